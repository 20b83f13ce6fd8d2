"""The Prometheus exporter's ends only queue their records; the scrape folds them (``_Folded``).

Units with no wire (records made by hand, a fresh registry each): the wire paths are covered by every test
that scrapes a tapped registry (tests/test_prometheus.py, tests/test_handoff.py, ...).
"""

from __future__ import annotations

import os
import time

import pytest
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry

from llmtap._exporters import prometheus
from llmtap._exporters.prometheus import PrometheusExporter, _Folded
from tests.support.race import ends_racing_reads
from tests.support.records import call, record, start

ATTEMPTS = "llmtap_attempts_total"


def _exporter(scraped: bool = True) -> tuple[PrometheusExporter, _Folded]:
    """A fresh exporter; ``scraped``: its registry was scraped once (a reader exists: ends queue)."""
    exporter = PrometheusExporter(CollectorRegistry())
    assert isinstance(exporter._store, _Folded)
    if scraped:
        _attempts(exporter)
    return exporter, exporter._store


def _attempts(exporter: PrometheusExporter) -> float:
    """One scrape's count of 200 attempts (a scrape folds what is queued)."""
    value = exporter.registry.get_sample_value(ATTEMPTS, _labels(status="200"))
    return 0.0 if value is None else value


def _labels(**extra: str) -> dict[str, str]:
    base = {"gen_ai_provider_name": "anthropic", "gen_ai_operation_name": "chat", "gen_ai_request_model": "m"}
    if "status" in extra:
        return {**base, "status_code": extra["status"], "error_type": ""}
    return {**base, **extra}


def _folded_attempts(store: _Folded) -> float:
    """What is folded already, without a scrape (which would fold the queue)."""
    return sum(v for k, v in store._numbers["attempts"].items() if k[3] == "200")


def test_an_end_is_queued_and_the_scrape_folds_it_once() -> None:
    exporter, store = _exporter()
    exporter.end(record(), exporter.start(start()))
    exporter.call_end(call())
    assert len(store._pending) == 2 and _folded_attempts(store) == 0  # queued, not folded
    assert _attempts(exporter) == 1  # positive control: the scrape folds it
    assert not store._pending
    assert _attempts(exporter) == 1  # once: a second scrape adds nothing
    assert exporter.registry.get_sample_value("llmtap_streams_in_flight", _labels()) == 0  # start +1, end -1
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert exporter.registry.get_sample_value(duration, _labels(error_type="")) == 1
    assert exporter.registry.get_sample_value("llmtap_call_duration_seconds_count", _labels(outcome="completed")) == 1


def test_a_registry_nobody_has_scraped_holds_no_record() -> None:
    """Until the first scrape each end folds its own record: nothing waits for a reader that may never come."""
    exporter, store = _exporter(scraped=False)
    exporter.end(record(), exporter.start(start()))
    exporter.call_end(call())
    assert not store._pending and _folded_attempts(store) == 1  # folded at once
    assert _attempts(exporter) == 1
    exporter.end(record(), None)  # positive control: once scraped, an end queues
    assert len(store._pending) == 1 and _folded_attempts(store) == 1
    assert _attempts(exporter) == 2


def test_past_the_cap_every_attempt_is_still_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "PENDING_MAX", 3)
    exporter, store = _exporter()
    for _ in range(10):
        exporter.end(record(), exporter.start(start()))
        assert len(store._pending) <= 3  # bounded: nobody scrapes
    # the 4th, 7th and 10th ends each folded the whole queue (a batch of up to 64) before queueing their own
    assert (_folded_attempts(store), len(store._pending)) == (9, 1)
    assert _attempts(exporter) == 10  # every attempt, once
    assert _attempts(exporter) == 10


def test_ends_racing_scrapes_are_each_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ends on several threads (queued, and folded past a small cap) while another scrapes."""
    monkeypatch.setattr(prometheus, "PENDING_MAX", 64)
    exporter, _ = _exporter()
    threads, each = 4, 2_000
    scraped = ends_racing_reads(lambda: exporter.end(record(), None), lambda: _attempts(exporter), threads, each)
    assert scraped == sorted(scraped)  # never counted back
    assert _attempts(exporter) == threads * each


def test_the_exemplar_is_timed_at_the_end_not_the_scrape() -> None:
    exporter, _ = _exporter()
    span = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    before = time.time()
    exporter.end(record(span_context=span), None)
    after = time.time()
    time.sleep(0.01)
    scraped_at = time.time()
    exemplars = [s.exemplar for m in exporter.registry.collect() for s in m.samples if s.exemplar is not None]
    assert exemplars  # positive control: the span became exemplars
    assert all(e.labels["trace_id"] == format(0xABC, "032x") for e in exemplars)
    assert all(before <= e.timestamp <= after < scraped_at for e in exemplars)  # type: ignore[operator]


def test_a_forked_child_does_not_fold_its_parents_queue() -> None:
    """The parent reports the records queued at the fork; the child starts with none."""
    exporter, store = _exporter()
    exporter.end(record(), None)
    exporter.end(record(), None)  # queued at the fork
    assert len(store._pending) == 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            exporter.end(record(), None)
            os.write(write, f"{_attempts(exporter):g}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as child:
        assert child.read() == "1"  # the child's own attempt only
    os.waitpid(pid, 0)
    assert _attempts(exporter) == 2  # control: the parent's queued attempts, once, in the parent


def test_close_folds_what_is_queued() -> None:
    exporter, store = _exporter()
    exporter.end(record(), None)
    exporter.close()
    assert not store._pending and _folded_attempts(store) == 1
