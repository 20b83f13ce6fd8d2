"""The record builder: a start value, timing and facts made into the immutable record."""

from __future__ import annotations

import pytest

from llmtap import Outcome
from llmtap._core.builder import build_record
from llmtap._core.gaps import GapCounter
from llmtap._core.record import AttemptRecord, RateLimit, Usage
from llmtap._providers._base import MAX_COUNT, Facts
from tests.support.records import raw_rate_limits
from tests.support.replay import START


def _facts(**values: object) -> Facts:
    facts = Facts()
    for name, value in values.items():
        setattr(facts, name, value)
    return facts


def _build(facts: Facts, includes_cache: bool, parse_errors: int = 0, **more: object) -> AttemptRecord:
    gaps = GapCounter((0.1,), 1.0)
    for now in (1.0, 1.05, 3.0):
        gaps.tick(now)
    kwargs: dict[str, object] = dict(
        status=200, streamed=True, headers_at=0.5, first_token_at=1.05, ended_at=3.5, gaps=gaps, facts=facts,
        input_includes_cache=includes_cache, rate_limit_headers=None, retry_after=None, parse_errors=parse_errors,
    )  # fmt: skip
    kwargs.update(more)
    return build_record(START, Outcome.COMPLETED, None, **kwargs)  # type: ignore[arg-type]


def test_the_record_begins_with_its_start_and_carries_the_timing() -> None:
    record = _build(Facts(), includes_cache=True)
    assert record[: len(START)] == tuple(START)
    assert (record.first_chunk_at, record.first_token_at, record.ended_at, record.chunks) == (1.0, 1.05, 3.5, 3)
    assert record.gap_bucket_counts == (1, 1) and record.stalls == 1 and record.max_gap == 1.95
    assert record.cost is None and record.span_context is None


def test_input_includes_the_cache_whatever_the_provider_reports() -> None:
    facts = _facts(input_tokens=10, output_tokens=3, cache_read_tokens=5, cache_write_tokens=2)
    assert _build(facts, includes_cache=False).usage == Usage(17, 3, 5, 2, None)
    facts = _facts(input_tokens=10, output_tokens=3, cache_read_tokens=5, cache_write_tokens=2)
    assert _build(facts, includes_cache=True).usage == Usage(10, 3, 5, 2, None)


def test_refused_values_are_parse_errors() -> None:
    facts = _facts(input_tokens=MAX_COUNT, cache_read_tokens=1)  # the total overflows: refused
    facts.count(-1)  # one more refused value
    record = _build(facts, includes_cache=False, parse_errors=3)
    assert record.usage.input_tokens is None and record.parse_errors == 5


def test_stop_reasons_in_choice_order_and_rate_limits_read_from_the_raw_values() -> None:
    facts = Facts()
    facts.set_stop_reason("length", 1)
    facts.set_stop_reason("stop", 0)
    limits = raw_rate_limits(("requests", 0, b"50"), ("requests", 1, b"49"))
    record = _build(facts, includes_cache=True, rate_limit_headers=limits)
    assert record.stop_reasons == ("stop", "length") and record.stop_reason == "stop"
    assert record.rate_limits == (RateLimit("requests", 50.0, 49.0, None),)
    assert _build(Facts(), includes_cache=True).rate_limits == ()


def test_records_share_their_response_model_and_stop_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans hold these until exported: records of equal values hold one object (a bounded memo; past its
    bound a record keeps its own, equal value)."""
    shared: dict[object, object] = {}
    monkeypatch.setattr("llmtap._core.builder._SHARED", shared)

    def record(model: str, reason: str) -> AttemptRecord:
        facts = _facts(response_model="".join(model))  # a new string, as parsed from each body
        facts.set_stop_reason("".join(reason))
        return _build(facts, includes_cache=True)

    first, second = record("claude", "end_turn"), record("claude", "end_turn")
    assert second.response_model == "claude" and second.response_model is first.response_model
    assert second.stop_reasons == ("end_turn",) and second.stop_reasons is first.stop_reasons
    monkeypatch.setattr("llmtap._core.builder._MAX_SHARED", 2)  # full
    third, fourth = record("gpt", "stop"), record("gpt", "stop")
    assert third.response_model == fourth.response_model == "gpt" and third.response_model is not fourth.response_model
    assert fourth.stop_reasons == ("stop",) and third.stop_reasons is not fourth.stop_reasons
    empty = _build(Facts(), includes_cache=True)
    assert (empty.stop_reasons, empty.response_model) == ((), None) and len(shared) == 2  # nothing to share


def test_each_server_time_is_paired_with_the_client_interval_its_source_covers() -> None:
    facts = Facts()
    facts.report_time("openai-processing-ms", 0.25)  # a header: until the headers (0.5)
    facts.report_time("firstByteLatency", 0.75, processing=False)  # until the first body chunk (1.0)
    facts.report_time("invocationLatency", 3.0)  # the last chunk: until the end (3.5)
    facts.report_time("not-a-source", 1.0, processing=False)  # never a label value
    record = _build(facts, includes_cache=True)
    at = START.started_at
    assert record.server_times == (
        ("openai-processing-ms", 0.25, 0.5 - at),
        ("firstByteLatency", 0.75, 1.0 - at),
        ("invocationLatency", 3.0, 3.5 - at),
    )
    assert record.server_time == 3.0  # the processing time the span carries: the last one read, a first byte's never
    # no headers seen (a connection dropped): nothing to pair a header's time with; no report at all: nothing
    assert _build(facts, includes_cache=True, headers_at=None).server_times[0][0] == "firstByteLatency"
    assert _build(Facts(), includes_cache=True).server_times == ()
