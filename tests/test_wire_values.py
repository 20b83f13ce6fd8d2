"""Wire values handled as the client handles them: content encodings decoded exactly as httpx and
httpx2 decode them (checked on the same bytes), token counts refused when no int64 holds them,
garbage header numbers counted as parse errors, and no sink ever fed a value it cannot take."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import brotli
import httpx
import httpx2
import pytest
import zstandard
from prometheus_client import CollectorRegistry

from llmtap import Outcome
from llmtap._core.body import BodyDecodeError, make_decoder, supported_codings
from llmtap._core.record import AttemptRecord
from llmtap._exporters.prometheus import PrometheusExporter
from llmtap._providers import anthropic, gemini, openai_chat, openai_responses
from llmtap._providers._base import MAX_COUNT, Provider
from tests.support.replay import make_observer
from tests.support.sse import SSE, STREAM, check_complete, run

PLAIN = b'data: {"x": "h\xc3\xa9llo"}\n\n' * 50


def _deflate_raw(data: bytes) -> bytes:
    raw = zlib.compressobj(wbits=-15)
    return raw.compress(data) + raw.flush()


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


# (header values, body): every encoding and stack the clients accept, and some they skip or refuse
ENCODED: list[tuple[list[str], bytes]] = [
    (["gzip"], gzip.compress(PLAIN)),
    (["gzip, gzip"], gzip.compress(gzip.compress(PLAIN))),
    (["gzip", "gzip"], gzip.compress(gzip.compress(PLAIN))),  # two header lines, joined as one list
    ([" GZip ,\tIdentity "], gzip.compress(PLAIN)),
    (["deflate"], zlib.compress(PLAIN)),
    (["deflate"], _deflate_raw(PLAIN)),
    (["br"], brotli.compress(PLAIN)),
    (["zstd"], _zstd(PLAIN)),
    (["zstd"], _zstd(PLAIN[:100]) + _zstd(PLAIN[100:])),  # two frames
    (["gzip, br, zstd"], _zstd(brotli.compress(gzip.compress(PLAIN)))),
    (["identity"], PLAIN),
    (["x-gzip"], gzip.compress(PLAIN)),  # not a coding the clients know: passed through raw
    (["compress, gzip"], gzip.compress(PLAIN)),  # the unknown one skipped, the known one undone
    ([""], PLAIN),
    (["gzip"], gzip.compress(PLAIN) + gzip.compress(b"second member")),  # the clients read one member
    (["gzip"], gzip.compress(PLAIN) + b"trailing garbage"),
    (["gzip"], gzip.compress(PLAIN)[:-12]),  # truncated
    (["gzip"], b"\x1f\x8bnot really gzip"),
    (["gzip"], PLAIN),  # declared but absent
    (["deflate"], b"not deflate at all"),
    (["br"], b"not brotli"),
    (["zstd"], b"not zstd"),
]


def _client_read(module: Any, values: list[str], body: bytes, chunks: list[bytes]) -> bytes | str:
    headers = [("content-encoding", v) for v in values]

    def stream() -> Any:
        yield from chunks

    try:
        response = module.Response(200, headers=headers, content=stream())
        return bytes(response.read())
    except module.DecodingError:
        return "DecodingError"


def _llmtap_read(values: list[str], chunks: list[bytes]) -> bytes | str:
    try:
        decoder = make_decoder(",".join(values).encode("latin-1"))
        if decoder is None:
            return b"".join(chunks)
        return b"".join(decoder(c) for c in chunks)
    except BodyDecodeError:
        return "DecodingError"


@pytest.mark.parametrize("read_size", [1, 7, 1 << 20], ids=["1-byte", "7-byte", "whole"])
@pytest.mark.parametrize(("values", "body"), ENCODED, ids=[f"{i}-{'+'.join(v)}" for i, (v, _) in enumerate(ENCODED)])
def test_decoding_matches_the_clients(values: list[str], body: bytes, read_size: int) -> None:
    chunks = [body[i : i + read_size] for i in range(0, len(body), read_size)]
    expected = _client_read(httpx2, values, body, chunks)  # the client the SDKs use
    assert _llmtap_read(values, chunks) == expected
    if _client_read(httpx, values, body, chunks) != expected:
        # httpx 0.28 fails a zstd frame boundary split across reads and a br stack at flush;
        # httpx2 (which the SDKs use) decodes both, and llmtap follows httpx2
        assert "zstd" in values[0]


def test_brotli_and_zstd_are_supported_like_the_clients() -> None:
    assert {"gzip", "deflate", "br", "zstd"} <= supported_codings()
    accepted = {c.strip() for c in httpx2.Client().headers["accept-encoding"].split(",")}
    assert accepted == supported_codings()  # what the client asks for is what llmtap decodes


def test_too_many_codings_refused_like_httpx2() -> None:
    body = PLAIN
    for _ in range(6):
        body = gzip.compress(body)
    values = ["gzip"] * 6
    assert _client_read(httpx2, values, body, [body]) == "DecodingError"
    assert _llmtap_read(values, [body]) == "DecodingError"


def test_stacked_gzip_stream_is_completed() -> None:
    """The issue's case: ``gzip, gzip`` was recorded as an incomplete stream (a service-side abort)."""
    body = gzip.compress(gzip.compress(STREAM))
    check_complete(run([body[i : i + 5] for i in range(0, len(body), 5)], [*SSE, (b"content-encoding", b"gzip, gzip")]))
    headers = [*SSE, (b"Content-Encoding", b"gzip"), (b"content-encoding", b"GZIP ")]
    check_complete(run([body], headers))


# -- token counts ------------------------------------------------------------------------------

BAD_COUNTS: list[Any] = [-1, -(1 << 70), 1 << 64, MAX_COUNT + 1, 1.5, 12.0, True, "12", [3], {"n": 1}]


def _anthropic_body(value: Any) -> tuple[Provider, dict[str, Any]]:
    usage = {"input_tokens": 3, "output_tokens": value}
    msg = {"type": "message", "id": "m", "model": "c", "stop_reason": "end_turn", "usage": usage}
    return anthropic.PROVIDER, msg


def _chat_body(value: Any) -> tuple[Provider, dict[str, Any]]:
    body = {"id": "c", "model": "g", "choices": [{"index": 0, "finish_reason": "stop"}]}
    return openai_chat.PROVIDER, {**body, "usage": {"prompt_tokens": 3, "completion_tokens": value}}


def _responses_body(value: Any) -> tuple[Provider, dict[str, Any]]:
    usage = {"input_tokens": 3, "output_tokens": value}
    return openai_responses.PROVIDER, {
        "object": "response",
        "id": "r",
        "model": "g",
        "status": "completed",
        "usage": usage,
    }


def _gemini_body(value: Any) -> tuple[Provider, dict[str, Any]]:
    candidate = {"finishReason": "STOP", "content": {"parts": [{"text": "x"}]}}
    return gemini.PROVIDER, {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": value},
    }


BODIES = [_anthropic_body, _chat_body, _responses_body, _gemini_body]


def _record_for(provider: Provider, body: dict[str, Any]) -> AttemptRecord:
    records: list[AttemptRecord] = []
    observer = make_observer(provider, records)
    observer.on_response(200, [(b"content-type", b"application/json")], 1.0)
    observer.on_chunk(json.dumps(body).encode(), 1.1)
    observer.on_eof(1.2)
    (record,) = records
    return record


@pytest.mark.parametrize("build", BODIES, ids=lambda b: b.__name__)
@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_bad_token_counts_are_refused_and_counted(build: Any, value: Any) -> None:
    provider, body = build(value)
    record = _record_for(provider, body)
    assert record.outcome is Outcome.COMPLETED  # the app got its answer: so does the record
    assert record.usage.output_tokens is None
    assert record.usage.input_tokens == 3  # the rest of the attempt is kept
    assert record.parse_errors == 1
    # every sink takes the record whole (the Prometheus counters refused negative increments before)
    exporter = PrometheusExporter(CollectorRegistry())
    exporter.end(record, None)
    assert exporter.registry.get_sample_value("llmtap_attempts_total", _labels(record, status_code="200")) == 1


@pytest.mark.parametrize("build", BODIES, ids=lambda b: b.__name__)
def test_good_token_counts_pass(build: Any) -> None:
    """Positive control for the test above: the largest int64 passes, as does 0."""
    for value in (0, MAX_COUNT):
        record = _record_for(*build(value))
        assert record.usage.output_tokens == value and record.parse_errors == 0


def test_input_plus_cache_beyond_int64_is_refused() -> None:
    usage = {"input_tokens": MAX_COUNT, "cache_read_input_tokens": 1, "output_tokens": 2}
    body = {"type": "message", "id": "m", "model": "c", "stop_reason": "end_turn", "usage": usage}
    record = _record_for(anthropic.PROVIDER, body)
    assert record.usage.input_tokens is None and record.usage.output_tokens == 2 and record.parse_errors == 1


def _labels(record: AttemptRecord, **extra: str) -> dict[str, str]:
    return {
        "gen_ai_provider_name": record.provider,
        "gen_ai_operation_name": record.operation,
        "gen_ai_request_model": record.request_model,
        "error_type": "",
        **extra,
    }


# -- header numbers ----------------------------------------------------------------------------

GARBAGE = [b"soon", b"nan", b"inf", b"-inf", b"1e999", b"", b"\xff\xfe", b"Tue, 99 Foo 2026"]


@pytest.mark.parametrize("value", GARBAGE, ids=repr)
@pytest.mark.parametrize("name", [b"retry-after", b"retry-after-ms"])
def test_garbage_retry_after_is_a_parse_error(name: bytes, value: bytes) -> None:
    # alone, after a good retry-after-ms, and duplicated: always counted, never recorded
    headers = [(b"content-type", b"application/json"), (name, value)]
    record = run([b'{"type":"error","error":{"type":"rate_limit_error"}}'], headers, status=429)
    assert record.parse_errors == 1 and record.retry_after is None
    other = b"retry-after" if name == b"retry-after-ms" else b"retry-after-ms"
    record = run(
        [b"{}"], [(b"content-type", b"application/json"), (other, b"2"), (name, value), (name, value)], status=429
    )
    assert record.parse_errors == 2
    assert record.retry_after == (2.0 if other == b"retry-after" else 0.002)


def test_good_retry_after_values_parse() -> None:
    """Positive control: seconds, milliseconds (preferred), an HTTP-date in the past (0)."""
    record = run([b"{}"], [(b"retry-after", b"3"), (b"retry-after-ms", b"1500")], status=429)
    assert record.retry_after == 1.5 and record.parse_errors == 0
    record = run([b"{}"], [(b"retry-after", b"Wed, 21 Oct 2015 07:28:00 GMT")], status=429)
    assert record.retry_after == 0.0 and record.parse_errors == 0


@pytest.mark.parametrize("value", [b"nan", b"inf", b"1e999", b"x"])
def test_non_finite_rate_limit_and_server_time_are_parse_errors(value: bytes) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"anthropic-ratelimit-requests-limit", value),
        (b"anthropic-ratelimit-requests-remaining", b"7"),
    ]
    record = run([b"{}"], headers)
    assert record.parse_errors == 1
    assert [(r.resource, r.limit, r.remaining) for r in record.rate_limits] == [("requests", None, 7.0)]
