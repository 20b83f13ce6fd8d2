"""Attempt records built by hand, for the units that take one (calls, exporters): every field given.

:func:`attempt_record` is a plain completed attempt; :func:`start`, :func:`record` and :func:`call` are an
attempt's start, its end and its call that make every measurement there is (the metric mapping's and the
Prometheus exporter's units).
"""

from __future__ import annotations

from typing import Any

from llmtap._core.headers import RawRateLimits
from llmtap._core.metrics import CHUNK_GAP_BUCKETS
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord, Cost, Outcome, Usage
from llmtap._providers._base import Header
from tests.support.replay import START


def attempt_record(**fields: Any) -> AttemptRecord:
    """A completed 200 attempt of ``START`` (started at 0, ended at 1), with ``fields`` replaced; a field
    not named here is ``None`` (the record's shape is the core's to change)."""
    ending: dict[str, Any] = {
        "outcome": Outcome.COMPLETED,
        "status_code": 200,
        "error_type": None,
        "streamed": True,
        "headers_at": None,
        "first_chunk_at": None,
        "first_token_at": None,
        "ended_at": 1.0,
        "chunks": 0,
        "max_gap": 0.0,
        "stalls": 0,
        "gap_bucket_counts": (),
        "gap_sum": 0.0,
        "usage": Usage(),
        "stop_reasons": (),
        "response_id": None,
        "response_model": None,
        "request_id": None,
        "rate_limits": (),
        "rate_limit_headers": None,
        "retry_after": None,
        "server_time": None,
        "server_times": (),
        "parse_errors": 0,
    }
    unknown = set(fields) - set(AttemptRecord._fields)
    assert not unknown, f"no such AttemptRecord fields: {unknown}"
    values = {**dict.fromkeys(AttemptRecord._fields), **START._asdict(), **ending, **fields}
    return AttemptRecord(**{name: values[name] for name in AttemptRecord._fields})


def raw_rate_limits(*headers: tuple[str, int, bytes | None]) -> RawRateLimits:
    """Rate-limit headers as the walk keeps them, from ``(resource, Header kind, checked value)`` in the order
    they came (``None``: garbage)."""
    specs = tuple(dict.fromkeys((resource, kind) for resource, kind, _ in headers))
    return RawRateLimits(
        specs,
        bytes(specs.index((resource, kind)) for resource, kind, _ in headers),
        b"\n".join(value or b"" for _, _, value in headers),
    )


def kept_rate_limits(raw: RawRateLimits | None) -> list[tuple[str, int, bytes | None]]:
    """``(resource, Header kind, checked value)`` per header as the walk kept them (``None``: garbage)."""
    if raw is None:
        return []
    values = raw.values.split(b"\n")
    return [(*raw.specs[slot], value or None) for slot, value in zip(raw.slots, values, strict=True)]


GAPS = (3, 2) + (0,) * (len(CHUNK_GAP_BUCKETS) - 2) + (1,)


def start(**changes: Any) -> AttemptStart:
    """A streamed attempt's start (``changes``: fields replaced)."""
    fields: dict[str, Any] = {
        "provider": "anthropic", "operation": "chat", "request_model": "m", "server_address": "api.example",
        "server_port": 443, "url_path": "/v1/messages", "method": "POST", "request_stream": True,
        "request_max_tokens": 8, "resend_count": 0, "retry_reason": None, "call_id": "c", "attributes": (),
        "attribute_labels": (), "started_at": 0.0, "start_unix_ns": 0,
    }  # fmt: skip
    fields.update(changes)
    return AttemptStart(**fields)


# the rate-limit header values as the observer keeps them (resource, Header kind, raw value): read back as
# (RateLimit("requests", 50.0, 49.0, None), RateLimit("tokens", None, 1000.0, 7.0))
RAW_LIMITS = raw_rate_limits(
    ("requests", int(Header.LIMIT), b"50"),
    ("requests", int(Header.REMAINING), b"49"),
    ("tokens", int(Header.REMAINING), b"1000"),
    ("tokens", int(Header.RESET_IN), b"7s"),
)


def record(**changes: Any) -> AttemptRecord:
    """A streamed attempt that makes every measurement an attempt can make."""
    fields: dict[str, Any] = start()._asdict()
    fields.update(
        outcome=Outcome.COMPLETED, status_code=200, error_type=None, streamed=True, headers_at=0.1,
        first_chunk_at=0.2, first_token_at=0.3, ended_at=2.0, chunks=7, max_gap=3.0, stalls=1,
        gap_bucket_counts=GAPS, gap_sum=3.05, usage=Usage(100, 20, 30, 40, 5), stop_reasons=("end_turn",),
        response_id="r", response_model="m-2025", request_id="q", retry_after=1.5, server_time=None,
        rate_limit_headers=RAW_LIMITS,
        parse_errors=2, cost=Cost(0.1, 0.2, 0.03, 0.04, 0.05), context_window=400,
        server_times=(("x-envoy-upstream-service-time", 0.08, 0.1), ("latencyMs", 1.5, 2.0)),
    )  # fmt: skip
    fields.update(changes)
    return AttemptRecord(**fields)


def call(**changes: Any) -> CallRecord:
    """A completed call of two attempts."""
    fields: dict[str, Any] = {
        "call_id": "c", "provider": "anthropic", "operation": "chat", "request_model": "m", "attempts": 2,
        "outcome": Outcome.COMPLETED, "started_at": 0.0, "ended_at": 3.0, "first_token_at": 0.5,
    }  # fmt: skip
    fields.update(changes)
    return CallRecord(**fields)
