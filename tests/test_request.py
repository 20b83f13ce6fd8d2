"""``llmtap._core.request``: model, stream flag and output-token limit, read before a request is sent, from the
SDKs' request options or a raw JSON body. The byte scan of a raw body must say what a full JSON parse says."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llmtap._core.request import UNKNOWN, info_from_body, info_from_content, info_from_json, info_from_options
from llmtap._providers._base import RequestInfo


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
def test_each_api_names_its_token_limit(key: str) -> None:
    body = {"model": "m-1", key: 64, "stream": True, "messages": []}
    assert info_from_json(body) == RequestInfo("m-1", True, 64)
    assert info_from_body(json.dumps(body).encode()) == RequestInfo("m-1", True, 64)


def test_absent_fields_are_unknown_not_guessed() -> None:
    assert info_from_body(b'{"messages": []}') == RequestInfo(None, None, None)
    assert info_from_json({"model": 7, "stream": "yes", "max_tokens": True}) == RequestInfo(None, None, None)
    assert info_from_json({"max_tokens": -1}).max_tokens is None
    assert info_from_json({"max_tokens": 5}).max_tokens == 5  # positive control


def test_a_nested_model_key_is_resolved_by_a_full_parse() -> None:
    """Two ``"model"`` keys (one in a nested object): the top-level one, not the first in the bytes."""
    body = b'{"metadata": {"model": "inner"}, "model": "outer", "max_tokens": 10}'
    assert info_from_body(body) == RequestInfo("outer", None, 10)


def test_a_nested_stream_key_is_resolved_by_a_full_parse() -> None:
    """An earlier message's tool input may hold a ``"stream"`` key: the request's own flag counts."""
    body = (
        b'{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": {"stream": false}}]}],'
        b' "model": "m", "stream": true}'
    )
    assert info_from_body(body) == RequestInfo("m", True, None)


def test_a_key_inside_a_string_is_not_read() -> None:
    body = json.dumps({"messages": [{"content": 'say "model": "fake", "max_tokens": 1'}], "model": "real"}).encode()
    assert info_from_body(body) == RequestInfo("real", None, None)


def test_ambiguous_and_unparseable_is_unknown() -> None:
    assert info_from_body(b'{"model": "a", "model": "b", ') is UNKNOWN


def test_options_and_content_routes() -> None:
    assert info_from_options(SimpleNamespace(json_data={"model": "m", "stream": False})) == RequestInfo(
        "m", False, None
    )
    assert info_from_options(SimpleNamespace(json_data=None)) is None  # no JSON: the body is read instead
    assert info_from_options(object()) is None
    assert info_from_content({"model": "m"}) == RequestInfo("m", None, None)  # aiohttp's json=
    assert info_from_content(b'{"model": "m"}') == RequestInfo("m", None, None)


@pytest.mark.xfail(reason="the scan reads a nested key when the request has none of its own (one match)")
def test_a_nested_key_alone_is_not_the_requests() -> None:
    """Known limit of the byte scan, here so that fixing it is noticed (xfail is strict): a request with
    no ``stream`` key of its own and one nested in an earlier message is read as that nested value."""
    assert info_from_body(b'{"model": "m", "messages": [{"content": {"stream": true}}]}').stream is None


# The scan and the parse agree on every body an SDK or a person would send: model names of printable
# characters without a quote or backslash (JSON escapes would hide them from the scan) up to 256 long,
# token limits below 10**9, the keys in any order, at any nesting, with any JSON spacing; except a key
# only nested, never at the top (the known limit above).
_names = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'), min_size=1, max_size=256
)
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=20))
_noise = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["model", "stream", "max_tokens", "content", "x"]), inner, max_size=3),
    ),
    max_leaves=8,
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    data: dict[str, Any] = {}
    keys = draw(st.permutations(["model", "stream", "max_tokens", "max_completion_tokens", "messages", "tools"]))
    for key in keys:
        if not draw(st.booleans()):
            continue
        if key == "model":
            data[key] = draw(_names)
        elif key == "stream":
            data[key] = draw(st.booleans())
        elif key.startswith("max_"):
            data[key] = draw(st.integers(0, 10**9 - 1))
        else:
            data[key] = draw(_noise)
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,\n", " :\t")]))
    return json.dumps(data, separators=separators).encode()


@settings(max_examples=300, deadline=None)
@given(body=bodies())
def test_the_scan_says_what_a_full_parse_says(body: bytes) -> None:
    data = json.loads(body)
    nested = _nested_keys(data)
    for own in (("model",), ("stream",), ("max_tokens", "max_completion_tokens")):
        assume(any(k in data for k in own) or not any(k in nested for k in own))
    assert info_from_body(body) == info_from_json(data)


def _nested_keys(value: Any, depth: int = 0) -> set[str]:
    """The object keys below the top level."""
    keys: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if depth:
                keys.add(key)
            keys |= _nested_keys(inner, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            keys |= _nested_keys(inner, depth + 1)
    return keys
