"""Helpers to feed recorded or synthetic bodies through the pure attempt observer."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

from llmtap._observer import AttemptObserver, ObserverConfig
from llmtap._record import AttemptRecord
from llmtap._settings import CHUNK_GAP_BUCKETS
from llmtap.providers._base import Provider, RequestInfo

CONFIG = ObserverConfig(
    stall_threshold=5.0, gap_bounds=CHUNK_GAP_BUCKETS, max_event_bytes=64 * 1024, max_json_bytes=1 << 20
)


def make_observer(provider: Provider, records: list[AttemptRecord], config: ObserverConfig = CONFIG) -> AttemptObserver:
    return AttemptObserver(
        provider=provider,
        provider_name=provider.name,
        config=config,
        request=RequestInfo("m", True, 10),
        model_label="m",
        method="POST",
        host="api.example",
        port=443,
        path="/v1/messages",
        resend_count=0,
        retry_reason=None,
        call=None,
        on_finish=lambda _obs, record: records.append(record),
    )


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
