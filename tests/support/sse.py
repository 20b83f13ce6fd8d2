"""An Anthropic SSE stream written by hand and a driver feeding it to a bare observer (the observer's and
the wire-value tests' shared material)."""

from __future__ import annotations

from llmtap._core.observer import ObserverConfig
from llmtap._core.record import AttemptRecord, Outcome
from llmtap._providers.anthropic import PROVIDER
from tests.support.replay import make_observer

__all__ = ["DELTA", "END", "PING", "SSE", "START", "STREAM", "check_complete", "event", "run"]

SSE = [(b"content-type", b"text/event-stream")]


def event(name: str, data: str) -> bytes:
    return f"event: {name}\ndata: {data}\n\n".encode()


START = event(
    "message_start",
    '{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":'
    '{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":1}}}',
)
DELTA = event(
    "content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"héllo ✓"}}'
)
PING = event("ping", '{"type": "ping"}')
END = event(
    "message_delta",
    '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}',
) + event("message_stop", '{"type":"message_stop"}')
STREAM = START + PING + DELTA * 20 + END


def run(chunks: list[bytes], headers: list[tuple[bytes, bytes]] = SSE, end: str = "eof", status: int = 200,
        config: ObserverConfig | None = None) -> AttemptRecord:  # fmt: skip
    records: list[AttemptRecord] = []
    observer = make_observer(PROVIDER, records, *(() if config is None else (config,)))
    observer.on_response(status, headers, 0.0)
    now = 0.0
    for chunk in chunks:
        now += 0.01
        observer.on_chunk(chunk, now)
    if end == "eof":
        observer.on_eof(now)
    elif end == "close":
        observer.on_close(now)
    elif end == "gc":
        observer.on_abandon()
    # every ending after the first is a no-op: exactly once
    observer.on_eof(now)
    observer.on_close(now)
    observer.on_exception(RuntimeError("late"), now)
    observer.on_abandon()
    assert len(records) == 1
    return records[0]


def check_complete(record: AttemptRecord) -> None:
    assert record.outcome is Outcome.COMPLETED
    assert record.parse_errors == 0
    assert record.usage.input_tokens == 15 and record.usage.output_tokens == 7
    assert record.usage.cache_read_tokens == 5
    assert record.stop_reason == "end_turn" and record.response_id == "msg_1"
