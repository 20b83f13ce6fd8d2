"""The pure attempt observer: framing, encodings, hostile input, exactly-once finalisation."""

from __future__ import annotations

import gzip
import logging
import random

import pytest

from llmtap import Outcome
from llmtap._core.metrics import CHUNK_GAP_BUCKETS
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord
from llmtap._log import reset as reset_log
from llmtap._providers.anthropic import PROVIDER
from tests.support.replay import CONFIG, make_observer, splits
from tests.support.replay import START as START_VALUE
from tests.support.sse import DELTA, END, PING, SSE, START, STREAM, check_complete, event, run


@pytest.mark.parametrize("seed", range(20))
def test_random_splits(seed: int) -> None:
    check_complete(run(splits(STREAM, random.Random(seed), 13)))


def test_one_byte_reads_and_first_token_time() -> None:
    record = run([STREAM[i : i + 1] for i in range(len(STREAM))])
    check_complete(record)
    # the first content token is timed at the read that completed its event
    assert record.first_token_at == pytest.approx(0.01 * (len(START) + len(PING) + len(DELTA)))


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_endings(newline: bytes) -> None:
    body = STREAM.replace(b"\n", newline)
    check_complete(run(splits(body, random.Random(1), 7)))
    # a CRLF split between two reads is not a blank line
    check_complete(run([body[i : i + 1] for i in range(len(body))]))


def test_gzip_body_split_anywhere() -> None:
    check_complete(run(splits(gzip.compress(STREAM), random.Random(3), 5), [*SSE, (b"content-encoding", b"gzip")]))


def test_deflate_raw_and_zlib() -> None:
    import zlib

    check_complete(run([zlib.compress(STREAM)], [*SSE, (b"content-encoding", b"deflate")]))
    raw = zlib.compressobj(wbits=-15)
    body = raw.compress(STREAM) + raw.flush()
    check_complete(run([body], [*SSE, (b"content-encoding", b"deflate")]))


def test_corrupt_gzip_is_counted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    reset_log()
    with caplog.at_level(logging.WARNING, "llmtap"):
        record = run([b"\x1f\x8bnot really gzip", b"more"], [*SSE, (b"content-encoding", b"gzip")])
    assert record.outcome is Outcome.INCOMPLETE
    assert record.parse_errors == 1
    assert "invalid compressed body" in caplog.text


def test_unknown_encoding_passes_through_and_too_many_are_counted() -> None:
    # the clients skip codings they do not know (the app sees the bytes raw): so does llmtap
    check_complete(run([STREAM], [*SSE, (b"content-encoding", b"x-unknown")]))
    record = run([b"\x00\x01"], [*SSE, (b"content-encoding", b"gzip," * 6)], end="close")
    assert record.parse_errors == 1
    assert record.outcome is Outcome.CLIENT_CLOSED


def test_oversized_event_is_dropped_and_parsing_resumes() -> None:
    config = ObserverConfig(stall_threshold=5, gap_bounds=CHUNK_GAP_BUCKETS, max_event_bytes=1024, max_json_bytes=4096)
    huge = b"event: content_block_delta\ndata: " + b"x" * 50_000 + b"\n\n"
    record = run([START, *splits(huge, random.Random(2), 700), DELTA, END], config=config)
    assert record.parse_errors == 1
    assert record.outcome is Outcome.COMPLETED
    assert record.usage.output_tokens == 7


def test_malformed_events_are_counted() -> None:
    bad = event("content_block_delta", "{not json") + event("message_delta", '"just a string"')
    bad += b"data: \xff\xfe invalid utf-8\n\n"
    record = run([START, bad, DELTA, END])
    assert record.outcome is Outcome.COMPLETED
    assert record.parse_errors == 2  # the string payload is valid JSON, merely useless


def test_sse_error_event_after_200() -> None:
    error = event("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    record = run([START, DELTA, error])
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error_type == "overloaded_error"
    assert record.is_error


def test_missing_final_event_is_incomplete() -> None:
    record = run([START, DELTA])
    assert record.outcome is Outcome.INCOMPLETE
    assert record.error_type == "incomplete_stream"


def test_final_event_without_blank_line_is_not_dispatched() -> None:
    record = run([START, DELTA, b'event: message_stop\ndata: {"type":"message_stop"}'])
    assert record.outcome is Outcome.INCOMPLETE


@pytest.mark.parametrize(("end", "outcome"), [("close", Outcome.CLIENT_CLOSED), ("gc", Outcome.ABANDONED)])
def test_early_endings(end: str, outcome: Outcome) -> None:
    assert run([START, DELTA], end=end).outcome is outcome


def test_closed_after_final_event_is_completed() -> None:
    # openai-style: the SDK closes right after the terminal event without reading to EOF
    assert run([STREAM], end="close").outcome is Outcome.COMPLETED


def test_exceptions_classified() -> None:
    import asyncio

    for exc, outcome in [
        (asyncio.CancelledError(), Outcome.CANCELLED),
        (TimeoutError(), Outcome.TIMEOUT),
        (ConnectionResetError(), Outcome.CONNECTION_ERROR),
    ]:
        records: list[AttemptRecord] = []
        observer = make_observer(PROVIDER, records)
        observer.on_response(200, SSE, 0.0)
        observer.on_chunk(START, 0.1)
        observer.on_exception(GeneratorExit(), 0.2)  # a generator close is not an ending by itself
        assert records == []
        observer.on_exception(exc, 0.2)
        assert [r.outcome for r in records] == [outcome]


def test_non_streaming_json_and_errors() -> None:
    body = (
        b'{"type":"message","id":"msg_2","model":"m","stop_reason":"tool_use",'
        b'"usage":{"input_tokens":3,"output_tokens":4}}'
    )
    record = run(splits(body, random.Random(0), 9), [(b"content-type", b"application/json")])
    assert record.outcome is Outcome.COMPLETED and not record.streamed
    assert (record.usage.input_tokens, record.usage.output_tokens, record.stop_reason) == (3, 4, "tool_use")
    error = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"7"), (b"retry-after-ms", b"6500")]
    record = run([error], headers, status=429)
    assert record.outcome is Outcome.REJECTED and record.is_error  # a non-stream 429: rejected, as a stream's
    assert record.error_type == "rate_limit_error" and record.status_code == 429
    assert record.retry_after == 6.5  # retry-after-ms wins over retry-after


def test_html_error_page_is_not_a_parse_error() -> None:
    record = run([b"<html>bad gateway</html>"], [(b"content-type", b"text/html")], status=502)
    assert record.outcome is Outcome.REJECTED and record.error_type == "502" and record.parse_errors == 0


def test_gaps_and_stalls() -> None:
    records: list[AttemptRecord] = []
    config = ObserverConfig(
        stall_threshold=0.5, gap_bounds=CHUNK_GAP_BUCKETS, max_event_bytes=1 << 16, max_json_bytes=1 << 16
    )
    observer = make_observer(PROVIDER, records, config)
    observer.on_response(200, SSE, 0.0)
    for now, chunk in [(0.1, START), (0.2, DELTA), (1.0, DELTA), (1.05, END)]:
        observer.on_chunk(chunk, now)
    observer.on_eof(1.1)
    (record,) = records
    assert record.stalls == 1
    assert record.max_gap == pytest.approx(0.8)
    assert sum(record.gap_bucket_counts) == 3
    assert record.gap_sum == pytest.approx(0.95)


def test_memory_is_bounded_per_stream() -> None:
    """Only a partial event is ever held, however long the stream."""
    records: list[AttemptRecord] = []
    observer = make_observer(PROVIDER, records)
    observer.on_response(200, SSE, 0.0)
    observer.on_chunk(START, 0.0)
    for i in range(20_000):
        observer.on_chunk(DELTA[:30], i * 1e-4)
        observer.on_chunk(DELTA[30:], i * 1e-4)
        assert len(observer._pending) < len(DELTA)
    observer.on_chunk(END, 3.0)
    observer.on_eof(3.0)
    assert records[0].outcome is Outcome.COMPLETED


_JSON = [(b"content-type", b"application/json")]
_OVERLOADED = b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}'
_RATE_LIMITED = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
_INVALID = b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}'
_ERROR_EVENT = event("error", _OVERLOADED.decode())


@pytest.mark.parametrize(
    ("status", "headers", "body", "ending", "exc", "outcome", "error_type"),
    [
        pytest.param(200, SSE, STREAM, Ending.EOF, None, Outcome.COMPLETED, None, id="eof-final"),
        pytest.param(
            200, SSE, START + DELTA, Ending.EOF, None, Outcome.INCOMPLETE, "incomplete_stream", id="eof-no-final"
        ),
        pytest.param(200, SSE, STREAM, Ending.TERMINAL, None, Outcome.COMPLETED, None, id="terminal-final"),
        pytest.param(
            200,
            SSE,
            START + _ERROR_EVENT,
            Ending.TERMINAL,
            None,
            Outcome.SERVER_ERROR,
            "overloaded_error",
            id="terminal-error",
        ),
        pytest.param(200, SSE, START, Ending.CLOSED, None, Outcome.CLIENT_CLOSED, None, id="closed"),
        pytest.param(200, SSE, STREAM, Ending.CLOSED, None, Outcome.COMPLETED, None, id="closed-after-final"),
        pytest.param(200, SSE, START, Ending.DROPPED, None, Outcome.ABANDONED, None, id="dropped"),
        pytest.param(200, SSE, START, Ending.RAISED, TimeoutError(), Outcome.TIMEOUT, "TimeoutError", id="timeout"),
        pytest.param(
            200, SSE, STREAM, Ending.RAISED, ConnectionError(), Outcome.COMPLETED, None, id="raised-after-final"
        ),
        pytest.param(
            200, SSE, STREAM, Ending.RAISED, KeyboardInterrupt(), Outcome.CANCELLED, None, id="cancel-after-final"
        ),
        # an HTTP error status: rejected before any answer, whatever the status and however the body ended
        pytest.param(529, _JSON, _OVERLOADED, Ending.EOF, None, Outcome.REJECTED, "overloaded_error", id="529-eof"),
        pytest.param(529, _JSON, b"", Ending.CLOSED, None, Outcome.REJECTED, "529", id="529-closed-unread"),
        pytest.param(529, _JSON, b"", Ending.INTERNAL, None, Outcome.REJECTED, "529", id="529-internal"),
        pytest.param(429, _JSON, _RATE_LIMITED, Ending.EOF, None, Outcome.REJECTED, "rate_limit_error", id="429-eof"),
        pytest.param(429, _JSON, b"", Ending.DROPPED, None, Outcome.REJECTED, "429", id="429-dropped-unread"),
        pytest.param(400, _JSON, _INVALID, Ending.EOF, None, Outcome.REJECTED, "invalid_request_error", id="400-eof"),
        pytest.param(401, _JSON, b"", Ending.CLOSED, None, Outcome.REJECTED, "401", id="401-closed-unread"),
        pytest.param(
            503, _JSON, b"", Ending.RAISED, ConnectionResetError(), Outcome.REJECTED, "503", id="503-body-raised"
        ),
        pytest.param(500, SSE, _ERROR_EVENT, Ending.EOF, None, Outcome.REJECTED, "overloaded_error", id="500-sse"),
        # an error inside an answer that started (a 2xx): server_error, with the provider's error type
        pytest.param(
            200,
            SSE,
            START + DELTA + _ERROR_EVENT,
            Ending.EOF,
            None,
            Outcome.SERVER_ERROR,
            "overloaded_error",
            id="200-error-event",
        ),
        pytest.param(
            200,
            SSE,
            START + _ERROR_EVENT,
            Ending.CLOSED,
            None,
            Outcome.SERVER_ERROR,
            "overloaded_error",
            id="200-error-event-closed",
        ),
        pytest.param(200, _JSON, b"", Ending.INTERNAL, None, Outcome.COMPLETED, None, id="200-internal"),
        pytest.param(None, [], b"", Ending.INTERNAL, None, Outcome.CONNECTION_ERROR, None, id="no-response-internal"),
        pytest.param(
            None,
            [],
            b"",
            Ending.RAISED,
            ConnectionResetError(),
            Outcome.CONNECTION_ERROR,
            "ConnectionResetError",
            id="no-response-raised",
        ),
    ],
)
def test_the_ending_decision(
    status: int | None,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    ending: Ending,
    exc: BaseException | None,
    outcome: Outcome,
    error_type: str | None,
) -> None:
    """Every way an attempt ends goes through one decision; the record comes back once, from ``end``."""
    observer = AttemptObserver(START_VALUE, PROVIDER, CONFIG)
    if status is not None:
        observer.on_response(status, headers, 0.0)
    if body:
        observer.on_chunk(body, 0.1)
    record = observer.end(ending, 0.2, exc)
    assert record is not None
    assert (record.outcome, record.error_type) == (outcome, error_type)
    assert record[: len(START_VALUE)] == tuple(START_VALUE)  # the record begins with its start value
    assert observer.end(Ending.EOF, 0.3) is None  # and never comes twice
    assert observer.end(Ending.RAISED, 0.3, RuntimeError()) is None


@pytest.mark.parametrize(
    ("body", "outcome"),
    [(STREAM, Outcome.COMPLETED), (START + DELTA + _ERROR_EVENT, Outcome.SERVER_ERROR)],
    ids=["final-event", "error-event"],
)
def test_the_terminal_event_says_when_the_attempt_ends(body: bytes, outcome: Outcome) -> None:
    """``on_chunk`` reports the terminal event the moment it is parsed (the shell then ends the attempt
    there); bytes after it and the later EOF, close or collection change nothing."""
    observer = AttemptObserver(START_VALUE, PROVIDER, CONFIG)
    observer.on_response(200, SSE, 0.0)
    cut = len(body) - 3
    assert observer.on_chunk(body[:cut], 0.1) is False  # positive control: not before the last event is whole
    assert observer.on_chunk(body[cut:], 0.2) is True
    record = observer.end(Ending.TERMINAL, 0.2)
    assert record is not None and record.outcome is outcome and record.ended_at == 0.2
    observer.on_chunk(b"data: garbage after the end\n\n" + STREAM, 0.5)  # never breaks anything
    for ending in (Ending.EOF, Ending.CLOSED, Ending.DROPPED):
        assert observer.end(ending, 0.6) is None
