"""The record builder: one attempt's start value, timing and facts made into its immutable record."""

from __future__ import annotations

from typing import TypeVar

from llmtap._core.gaps import GapCounter
from llmtap._core.headers import RawRateLimits
from llmtap._core.record import AttemptRecord, AttemptStart, Outcome, Usage
from llmtap._providers._base import SERVER_TIMES, Facts, Until

__all__ = ["build_record"]

# the named tuples made without their Python-level ``__new__`` / ``_make`` (one call less each; every field given)
_new = tuple.__new__
_T = TypeVar("_T", str, tuple[str, ...])
_SHARED: dict[object, object] = {}
"""Response models and stop-reason tuples seen so far -> the first equal object (at most :data:`_MAX_SHARED`):
a record holds that one, not its own copy parsed from this body. Spans keep these values until the
application's span processor exports them (up to 512 spans between exports by default), so each record
sharing the few distinct values saves ~120 bytes of every held span."""
_MAX_SHARED = 512
_UNTIL = {source: int(spec.until) for source, spec in SERVER_TIMES.items()}
_HEADERS, _FIRST_CHUNK = int(Until.HEADERS), int(Until.FIRST_CHUNK)


def _shared(value: _T) -> _T:
    """The first value seen equal to ``value`` (``value`` itself once the memo is full: bounded)."""
    seen = _SHARED.get(value)
    if seen is not None:
        return seen  # type: ignore[return-value]
    if len(_SHARED) < _MAX_SHARED:
        _SHARED.setdefault(value, value)
    return value


def build_record(
    start: AttemptStart,
    outcome: Outcome,
    error_type: str | None,
    status: int | None,
    streamed: bool,
    headers_at: float | None,
    first_token_at: float | None,
    ended_at: float,
    gaps: GapCounter,
    facts: Facts,
    input_includes_cache: bool,
    rate_limit_headers: RawRateLimits | None,
    retry_after: float | None,
    parse_errors: int,
    span_context: object = None,
) -> AttemptRecord:
    """The record (the observer passes everything positionally: a call with 15 keywords costs more than the
    rest of this function); its ``cost`` is left for the tap (``Settings.cost``); ``span_context`` is the sampled
    span's context the tap found at the start (``Settings.exemplars``). ``parse_errors`` is the observer's
    count: values the provider parser refused (:attr:`Facts.rejected`) are added here."""
    input_tokens = facts.input_total(input_includes_cache)
    stops = facts.stop_reasons
    # per choice index, in index order (one choice but for n > 1)
    reasons = tuple(stops.values()) if len(stops) < 2 else tuple(reason for _, reason in sorted(stops.items()))
    model = facts.response_model
    reported = facts.server_times
    return _new(
        AttemptRecord,
        (
            *start,
            outcome,
            status,
            error_type,
            streamed,
            headers_at,
            gaps.first,
            first_token_at,
            ended_at,
            *gaps.summary(),  # chunks, max_gap, stalls, gap_bucket_counts, gap_sum
            _new(
                Usage,
                (
                    input_tokens,
                    facts.output_tokens,
                    facts.cache_read_tokens,
                    facts.cache_write_tokens,
                    facts.reasoning_tokens,
                ),
            ),
            _shared(reasons) if reasons else (),
            facts.response_id,
            _shared(model) if model else model,
            facts.request_id,
            rate_limit_headers,
            retry_after,
            facts.server_time,
            parse_errors + facts.rejected,
            None,  # cost: priced by the tap (Settings.cost)
            span_context,
            () if reported is None else _paired(reported, start.started_at, headers_at, gaps.first, ended_at),
            None,  # context_window: looked up by the tap
        ),
    )


def _paired(
    reported: dict[str, float],
    started_at: float,
    headers_at: float | None,
    first_chunk_at: float | None,
    ended_at: float,
) -> tuple[tuple[str, float, float], ...]:
    """Each server-reported time with the attempt's own time over the interval its source covers (a source whose
    interval's end was never seen, or unknown, is left out)."""
    out = []
    for source, seconds in reported.items():
        until = _UNTIL.get(source)
        if until is None:
            continue
        end = headers_at if until == _HEADERS else first_chunk_at if until == _FIRST_CHUNK else ended_at
        if end is not None:
            out.append((source, seconds, end - started_at))
    return tuple(out)
