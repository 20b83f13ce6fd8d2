"""Attempt records built by hand, for the units that take one (calls, exporters): every field given."""

from __future__ import annotations

from typing import Any

from llmtap._core.headers import RawRateLimits
from llmtap._core.record import AttemptRecord, Outcome, Usage
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
