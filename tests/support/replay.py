"""Helpers to feed recorded or synthetic bodies through the pure attempt observer."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

from llmtap._core.framer import SseFramer
from llmtap._core.metrics import CHUNK_GAP_BUCKETS
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord, AttemptStart
from llmtap._providers._base import Provider

CONFIG = ObserverConfig(
    stall_threshold=5.0, gap_bounds=CHUNK_GAP_BUCKETS, max_event_bytes=64 * 1024, max_json_bytes=1 << 20
)


START = AttemptStart(
    "", "chat", "m", "api.example", 443, "/v1/messages", "POST", True, 10, 0, None, None, (), (), 0.0, 0
)


class Fed:
    """A pure observer driven as the shells drive it; every record it returns is kept in ``records``."""

    def __init__(self, observer: AttemptObserver, records: list[AttemptRecord]) -> None:
        self.observer = observer
        self.records = records
        self.on_response = observer.on_response
        self.on_chunk = observer.on_chunk

    @property
    def _pending(self) -> bytes:
        framer = self.observer._framer
        return framer.pending if isinstance(framer, SseFramer) else b""

    def _keep(self, record: AttemptRecord | None) -> None:
        if record is not None:
            self.records.append(record)

    def on_eof(self, now: float) -> None:
        self._keep(self.observer.end(Ending.EOF, now))

    def on_close(self, now: float) -> None:
        self._keep(self.observer.end(Ending.CLOSED, now))

    def on_abandon(self, now: float = 0.0) -> None:
        self._keep(self.observer.end(Ending.DROPPED, now))

    def on_exception(self, exc: BaseException, now: float) -> None:
        self._keep(self.observer.end(Ending.RAISED, now, exc))


def make_observer(provider: Provider, records: list[AttemptRecord], config: ObserverConfig = CONFIG) -> Fed:
    return Fed(AttemptObserver(START._replace(provider=provider.name), provider, config), records)


def splits(body: bytes, rng: random.Random, max_piece: int = 97) -> list[bytes]:
    """Cut ``body`` at random points (pieces of 1..max_piece bytes, so inside events and UTF-8)."""
    pieces = []
    i = 0
    while i < len(body):
        n = rng.randint(1, max_piece)
        pieces.append(body[i : i + n])
        i += n
    return pieces


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def wire_headers(fixture: dict[str, Any], compress: bool) -> list[tuple[bytes, bytes]]:
    """The recorded response headers as raw pairs, with encoding/length fixed for the replayed body."""
    out: list[tuple[bytes, bytes]] = []
    for name, value in fixture["response"]["headers"].items():
        if name.lower() in ("content-encoding", "content-length", "transfer-encoding"):
            continue
        values = value if isinstance(value, list) else [value]
        out.extend((name.encode(), v.encode("latin-1")) for v in values)
    if compress:
        out.append((b"Content-Encoding", b"gzip"))
    return out


def body_bytes(fixture: dict[str, Any], compress: bool) -> bytes:
    raw: bytes = fixture["response"]["body_text"].encode("utf-8")
    return gzip.compress(raw) if compress else raw


def replay(fixture: dict[str, Any], provider: Provider, seed: int, compress: bool = False) -> AttemptRecord:
    records: list[AttemptRecord] = []
    observer = make_observer(provider, records)
    observer.on_response(fixture["response"]["status"], wire_headers(fixture, compress), 1.0)
    rng = random.Random(seed)
    now = 1.0
    for piece in splits(body_bytes(fixture, compress), rng):
        now += 0.001
        observer.on_chunk(piece, now)
    observer.on_eof(now + 0.001)
    assert len(records) == 1
    return records[0]


def expected_anthropic(fixture: dict[str, Any]) -> dict[str, Any]:
    """What the record must say, computed independently of the parser: by a full JSON parse."""
    text: str = fixture["response"]["body_text"]
    usage: dict[str, Any] = {}
    out: dict[str, Any] = {"stop_reason": None, "id": None, "model": None, "error_type": None, "final": False}
    if fixture["streaming"]:
        for line in text.splitlines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            kind = event.get("type")
            if kind == "message_start":
                out["id"] = event["message"]["id"]
                out["model"] = event["message"]["model"]
                usage.update(event["message"]["usage"])
            elif kind == "message_delta":
                out["stop_reason"] = event["delta"].get("stop_reason")
                usage.update(event.get("usage") or {})
            elif kind == "message_stop":
                out["final"] = True
            elif kind == "error":
                out["error_type"] = event["error"]["type"]
    else:
        body = json.loads(text)
        if body.get("type") == "error":
            out["error_type"] = body["error"]["type"]
        else:
            out.update(id=body["id"], model=body["model"], stop_reason=body["stop_reason"], final=True)
            usage.update(body["usage"])
    if usage:
        cache_read = usage.get("cache_read_input_tokens")
        cache_write = usage.get("cache_creation_input_tokens")
        out["input"] = usage["input_tokens"] + (cache_read or 0) + (cache_write or 0)
        out["output"] = usage["output_tokens"]
        out["cache_read"] = cache_read
        out["cache_write"] = cache_write
        out["reasoning"] = (usage.get("output_tokens_details") or {}).get("thinking_tokens")
    return out


def _data_lines(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            out.append(json.loads(line[5:]))
    return out


def _error_kind(error: Any) -> str:
    return str(error.get("code") or error.get("type"))


def expected_openai_chat(fixture: dict[str, Any]) -> dict[str, Any]:
    """Independent expectation for a Chat Completions fixture (full JSON parse)."""
    text: str = fixture["response"]["body_text"]
    out: dict[str, Any] = {"stop_reasons": {}, "usage": None, "id": None, "model": None, "error_type": None}
    chunks = _data_lines(text) if fixture["streaming"] else [json.loads(text)]
    for chunk in chunks:
        if chunk.get("error"):
            out["error_type"] = _error_kind(chunk["error"])
            continue
        out["id"] = out["id"] or chunk.get("id")
        out["model"] = out["model"] or chunk.get("model")
        for position, choice in enumerate(chunk.get("choices") or []):
            if choice.get("finish_reason"):
                out["stop_reasons"][choice.get("index", position)] = choice["finish_reason"]
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
    usage = out.pop("usage")
    out["stop_reasons"] = tuple(v for _, v in sorted(out["stop_reasons"].items()))
    out["input"] = usage["prompt_tokens"] if usage else None
    out["output"] = usage["completion_tokens"] if usage else None
    out["cache_read"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") if usage else None
    out["reasoning"] = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") if usage else None
    out["cache_write"] = None
    return out


def expected_openai_responses(fixture: dict[str, Any]) -> dict[str, Any]:
    """Independent expectation for a Responses fixture (full JSON parse)."""
    text: str = fixture["response"]["body_text"]
    out: dict[str, Any] = {"error_type": None, "id": None, "model": None, "stop_reasons": ()}
    if fixture["streaming"]:
        response = None
        for event in _data_lines(text):
            if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                response = event["response"]
            elif event.get("type") == "error":
                out["error_type"] = _error_kind(event.get("error") or event)
    else:
        response = json.loads(text)
        if response.get("error") and response.get("object") != "response":
            out["error_type"] = _error_kind(response["error"])
            response = None
    usage = None
    if response is not None:
        out["id"], out["model"] = response["id"], response["model"]
        if response["status"] == "incomplete":
            out["stop_reasons"] = (response["incomplete_details"]["reason"],)
        elif response["status"] == "completed":
            calls = [i for i in response.get("output", []) if i.get("type") == "function_call"]
            out["stop_reasons"] = ("tool_calls",) if calls else ("stop",)
        usage = response.get("usage")
    out["input"] = usage["input_tokens"] if usage else None
    out["output"] = usage["output_tokens"] if usage else None
    out["cache_read"] = usage["input_tokens_details"]["cached_tokens"] if usage else None
    out["reasoning"] = usage["output_tokens_details"]["reasoning_tokens"] if usage else None
    out["cache_write"] = None
    return out
