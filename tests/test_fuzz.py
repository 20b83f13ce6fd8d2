"""Differential fuzzing: mutated real provider responses served over a real socket to the real SDKs,
once without llmtap and once with it.

Required for every input: the app's result (or exception) is identical with and without llmtap,
nothing escapes from llmtap (no internal error counted), the attempt is recorded exactly once, and
an input made malformed on purpose (bad usage numbers, garbage rate-limit headers) is counted as a
parse error. ``make test`` runs a short profile; ``make fuzz`` a long one (``LLMTAPTEST_FUZZ_EXAMPLES``
inputs, default 5,000) and prints how many inputs were tried.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmtap
from llmtap import Outcome
from llmtap._log import internal_errors
from llmtap._providers import _openai_common
from llmtap._providers import anthropic as anthropic_provider
from llmtap._providers._base import MAX_COUNT
from llmtap.testing import capture
from tests.support.fixtures import recorded_fixtures, require_fixtures
from tests.support.rawserver import RawServer, Reply, fixture_reply, http_response, pieces

pytestmark = pytest.mark.fixtures

EXAMPLES = int(os.environ.get("LLMTAPTEST_FUZZ_EXAMPLES", "300"))
settings.register_profile(
    "llmtap-fuzz",
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FILES = [p for p in recorded_fixtures("*.json") if p.name != "README.md"]
TRIED = {"inputs": 0, "malformed": 0}  # counted by check(), reported by the property test
OUTCOMES: set[str] = set()


@dataclass
class Base:
    name: str
    sdk: str  # anthropic / anthropic-beta / chat / responses
    request: dict[str, Any]
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _bases() -> list[Base]:
    out = []
    for path in FILES:
        fixture, status, headers, body = fixture_reply(path)
        api = fixture["api"]
        url = fixture["request"]["url"]
        sdk = {"messages": "anthropic", "chat.completions": "chat", "responses": "responses"}[api]
        if sdk == "anthropic" and "beta=true" in url:
            sdk = "anthropic-beta"
        out.append(Base(path.stem, sdk, fixture["request"]["body"], status, headers, body))
    return out


BASES = _bases()


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    require_fixtures()
    with RawServer() as raw:
        yield raw


_clients: dict[str, Any] = {}


def _client(kind: str, base_url: str) -> Any:
    key = f"{kind}@{base_url}"
    if key not in _clients:
        if kind.startswith("anthropic"):
            _clients[key] = anthropic.Anthropic(api_key="k", base_url=base_url, max_retries=0, timeout=5.0)
        else:
            _clients[key] = openai.OpenAI(api_key="k", base_url=base_url + "/v1", max_retries=0, timeout=5.0)
    return _clients[key]


def _digest(items: Any) -> str:
    return hashlib.sha256(repr(items).encode("utf-8", "surrogatepass")).hexdigest()


def run_app(base: Base, base_url: str) -> tuple[Any, ...]:
    """What the app sees: every streamed event / the parsed response, or the exception.

    The recorded request body is sent as recorded, through the SDK's own ``post`` (the typed
    ``create`` methods refuse fields newer SDKs dropped); parsing and streaming are the SDK's.
    """
    client = _client(base.sdk, base_url)
    body = dict(base.request)
    stream = bool(body.get("stream"))
    if base.sdk.startswith("anthropic"):
        path = "/v1/messages?beta=true" if base.sdk == "anthropic-beta" else "/v1/messages"
        cast_to: Any = anthropic.types.Message
        stream_cls: Any = anthropic.Stream[anthropic.types.RawMessageStreamEvent]
    elif base.sdk == "chat":
        path = "/chat/completions"
        cast_to = openai.types.chat.ChatCompletion
        stream_cls = openai.Stream[openai.types.chat.ChatCompletionChunk]
    else:
        path = "/responses"
        cast_to = openai.types.responses.Response
        stream_cls = openai.Stream[openai.types.responses.ResponseStreamEvent]
    try:
        result = client.post(path, cast_to=cast_to, body=body, stream=stream, stream_cls=stream_cls)
        if stream:
            with result as events:
                return ("ok", _digest([repr(event) for event in events]))
        return ("ok", _digest(repr(result)))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc)[:2000])


# -- mutations ------------------------------------------------------------------------------------

_COUNT = re.compile(rb'("(?:input_tokens|output_tokens|prompt_tokens|completion_tokens|promptTokenCount)"\s*:\s*)\d+')
BAD_NUMBERS = [
    b"-1",
    b"-99999999999999999999",
    str(1 << 64).encode(),
    str(MAX_COUNT + 1).encode(),
    b"1.5",
    b'"12"',
    b"true",
]
GARBAGE = [b"soon", b"nan", b"-inf", b"1e999", b"\xff\xfe", b"12abc", b""]
RL_HEADERS = [
    b"retry-after",
    b"retry-after-ms",
    b"anthropic-ratelimit-requests-remaining",
    b"x-ratelimit-remaining-tokens",
    b"x-ratelimit-reset-requests",
    b"anthropic-ratelimit-tokens-reset",
]
INSERTS = [b"\r", b"\n", b"\x00", b"\r\n", b"\n\n", b"\xff\xfe", b"\xc3", b"\r\r\n"]
CONTENT_TYPES = [b"text/plain", b"application/json", b"text/event-stream", b"", b"text/event-stream; charset=latin-1"]


PROVIDER_HEADERS = {
    "anthropic": anthropic_provider.HEADERS,
    "anthropic-beta": anthropic_provider.HEADERS,
    "chat": _openai_common.HEADERS,
    "responses": _openai_common.HEADERS,
}


@dataclass
class Input:
    base: Base
    mutation: str
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    read_size: int
    malformed: bool  # a parse error is required

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # what hypothesis prints
        printer.text(repr(self))

    def __repr__(self) -> str:
        extra = [h for h in self.headers if h not in self.base.headers]
        return (
            f"Input({self.base.name}, {self.mutation}, status={self.status}, read_size={self.read_size}, "
            f"body[{len(self.body)}]={self.body[:300]!r}..., added headers={extra})"
        )

    def reply(self) -> Reply:
        raw = http_response(self.status, self.headers, self.body)
        head_end = raw.index(b"\r\n\r\n") + 4
        return Reply([raw[:head_end], *pieces(raw[head_end:], self.read_size)] if self.read_size else [raw])


@st.composite
def inputs(draw: st.DrawFn) -> Input:
    base = draw(st.sampled_from(BASES))
    headers = list(base.headers)
    body = base.body
    status = base.status
    malformed = False
    mutation = draw(
        st.sampled_from(
            ["none", "truncate", "flip", "insert", "content_type", "gzip_absent", "gzip_stacked", "headers", "usage"]
        )
    )
    if mutation == "truncate":
        body = body[: draw(st.integers(0, len(body)))]
    elif mutation == "flip":
        at = draw(st.integers(0, max(len(body) - 1, 0)))
        if body:
            body = body[:at] + bytes([body[at] ^ draw(st.integers(1, 255))]) + body[at + 1 :]
    elif mutation == "insert":
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.sampled_from(INSERTS)) + body[at:]
    elif mutation == "content_type":
        headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]
        headers.append((b"content-type", draw(st.sampled_from(CONTENT_TYPES))))
    elif mutation == "gzip_absent":
        headers.append((b"content-encoding", b"gzip"))
    elif mutation == "gzip_stacked":
        headers.append((b"content-encoding", draw(st.sampled_from([b"gzip, gzip", b"GZIP ,identity, gzip"]))))
        body = gzip.compress(gzip.compress(body))
    elif mutation == "headers":
        for _ in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from(RL_HEADERS))
            if draw(st.booleans()):
                headers.append((name, draw(st.sampled_from(GARBAGE))))
                # a parse error when llmtap reads that header for this provider
                malformed = malformed or name.startswith(b"retry-after") or name in PROVIDER_HEADERS[base.sdk]
            else:
                headers.extend([(name, b"1"), (name, b"2")])  # a duplicate, each value valid
    elif mutation == "usage":
        value = draw(st.sampled_from(BAD_NUMBERS))
        body, replaced = _COUNT.subn(lambda m: m.group(1) + value, body, count=1)
        malformed = replaced > 0 and base.status == 200
    read_size = draw(st.sampled_from([0, 0, 1, 7, 1024])) if len(body) <= 20_000 else 0
    return Input(base, mutation, status, headers, body, read_size, malformed)


_baselines: dict[str, tuple[Outcome, int]] = {}


def _baseline(server: RawServer, base: Base) -> tuple[Outcome, int]:
    """The record of the unmutated response, read whole; its outcome agrees with the app's result."""
    if base.name not in _baselines:
        server.reply = Input(base, "none", base.status, base.headers, base.body, 0, False).reply()
        with capture(llmtap.Settings(base_urls=(server.base_url,))) as cap:
            app = run_app(base, server.base_url)
            cap.wait(1, calls=1, timeout=10)
            (record,) = cap.records
        assert (record.outcome is Outcome.COMPLETED) == (app[0] == "ok" and base.status == 200), record
        _baselines[base.name] = (record.outcome, record.parse_errors)
    return _baselines[base.name]


def check(server: RawServer, case: Input) -> None:
    server.reply = case.reply()
    without = run_app(case.base, server.base_url)
    errors_before = internal_errors()
    with capture(llmtap.Settings(base_urls=(server.base_url,))) as cap:
        with_llmtap = run_app(case.base, server.base_url)
        cap.wait(1, calls=1, timeout=10)
        records = list(cap.records)
    assert with_llmtap == without, f"the app saw something else with llmtap ({case.mutation})"
    assert internal_errors() == errors_before, "an internal error escaped into llmtap's counters"
    assert len(records) == 1, [r.outcome for r in records]
    record = records[0]
    if case.malformed:
        assert record.parse_errors >= 1, (case.mutation, case.base.name)
    if case.mutation in ("none", "gzip_stacked"):
        # an untouched (or stacked-encoded) body, read whole or in pieces: the ending the app saw
        # (never an invented abort), and exactly the parse errors of the plain body
        assert (record.outcome, record.parse_errors) == _baseline(server, case.base), record
    TRIED["inputs"] += 1
    TRIED["malformed"] += case.malformed
    OUTCOMES.add(record.outcome.value)


@settings(settings.get_profile("llmtap-fuzz"))
@given(case=inputs())
def _every_input(server: RawServer, case: Input) -> None:
    check(server, case)


@pytest.mark.slow
def test_mutated_responses_change_nothing_for_the_app(server: RawServer) -> None:
    """The property, over ``LLMTAPTEST_FUZZ_EXAMPLES`` inputs; then what was tried (``make fuzz`` prints it with
    ``-s``), and the positive control that the run was not vacuous: inputs were checked, and some of them
    malformed on purpose, each of which was required to count a parse error."""
    before = dict(TRIED)
    _every_input(server)
    tried = TRIED["inputs"] - before["inputs"]
    malformed = TRIED["malformed"] - before["malformed"]
    print(f"\nfuzz: {tried} inputs tried, {malformed} malformed on purpose, outcomes {sorted(OUTCOMES)}")
    assert tried > 0
    assert malformed > 0, "no malformed input was generated: the parse-error requirement was never checked"


def test_an_8_mib_single_line_is_dropped_not_buffered_whole(server: RawServer) -> None:
    base = next(b for b in BASES if b.name == "anthropic-messages-stream-text")
    marker = b'"type":"text_delta","text":"'
    at = base.body.index(marker) + len(marker)
    body = base.body[:at] + b"x" * (8 << 20) + base.body[at:]
    case = Input(base, "8mib", base.status, base.headers, body, 0, True)
    check(server, case)
