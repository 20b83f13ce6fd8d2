"""``llmtap._core.jsonbody.loads``: what ``json.loads`` returns or raises, for every body (a unit: no wire)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from llmtap._core.jsonbody import loads

BODIES = [
    b'{"type":"message","usage":{"input_tokens":3}}',
    b'{"a":1} \r\n\t',  # trailing whitespace is allowed
    b"{}",
    b'{"a":1,"a":2}',  # duplicate keys: the last wins
    b'{"text":"caf\xc3\xa9 \\ud83d\\ude00 \\u0000"}',
    b'{"n":NaN,"i":Infinity,"f":1e400,"big":123456789012345678901234567890}',
    b"[1, 2]",  # not an object: json.loads's own
    b'  {"a":1}',  # leading whitespace: json.loads's own
    b'"text"',
    b"\xef\xbb\xbf{}",  # a UTF-8 BOM: json.loads's own
    '{"a":"b"}'.encode("utf-16"),
    b'{"a":1} x',  # extra data
    b'{"a":1}{"b":2}',
    b'{"a":',  # truncated
    b"{",
    b"{'a':1}",
    b'{"a":"\xff"}',  # not UTF-8
    b"",
    b"{" * 100_000,  # deeper than the scanner recurses
]


def _outcome(parse: Callable[[bytes], object], body: bytes) -> tuple[str, object]:
    try:
        return ("value", parse(body))
    except RecursionError:
        return ("error", RecursionError)
    except ValueError:
        return ("error", ValueError)


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_same_as_json_loads(body: bytes) -> None:
    expected = _outcome(json.loads, body)
    got = _outcome(loads, body)
    if expected[0] == "value" and isinstance(expected[1], dict) and "n" in expected[1]:
        assert repr(got) == repr(expected)  # NaN != NaN
    else:
        assert got == expected


def test_both_outcomes_occur() -> None:
    """Positive controls for the comparison above: values and errors are both among the cases."""
    kinds = {_outcome(loads, body)[0] for body in BODIES}
    assert kinds == {"value", "error"}
