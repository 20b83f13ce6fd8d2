"""The garbage collector never ends an attempt: it only hands the ending off (``llmtap._core.handoff``).

The hazard (issue 14): a thread holds a lock on llmtap's ending path (prometheus-client's
``labels()`` lock, a value lock, an OTel SDK lock, one of llmtap's own), allocates, the collector
runs on that thread and finds an abandoned observed stream; if its finaliser ended the attempt there,
the ending would wait for the lock the same thread holds, forever. Each test below holds one such lock
on a worker thread, runs ``gc.collect()`` there with an abandoned observed stream in a reference
cycle, and requires that the thread returns and that the attempt is counted at the next drain.
The control shows the test can fail: with the hand-off undone, the thread never returns.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import generate_latest

import llmtap
from llmtap import _log
from llmtap._core import handoff as _handoff
from llmtap._core import stream as _stream
from llmtap._core.record import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture, sample

REQUEST = {"model": "claude-x", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "x"}]}
RETURN_TIMEOUT = 30.0  # generous: the thread either returns at once or never


@pytest.fixture
def tapped(sim: Simulator) -> Iterator[tuple[Capture, MeterProvider]]:
    sim.clear()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = llmtap.Settings(base_urls=(sim.base_url,), otel_metrics=True, otel_time_per_output_chunk=True)
    with capture(settings, meter_provider=provider) as cap:
        yield cap, provider
    provider.shutdown()


def _abandon_in_a_cycle(client: httpx.Client, url: str) -> None:
    """Send a stream, read nothing, and leave the response reachable only through a reference cycle,
    so only the cyclic collector can find it (no refcount drop ends it first)."""
    response = client.send(
        client.build_request("POST", url, json=REQUEST, headers=Scenario(tokens=200, gap=0.001).headers()), stream=True
    )
    cycle: list[Any] = [response]
    cycle.append(cycle)


def _collect_while_holding(lock: Any, client: httpx.Client, url: str) -> threading.Thread:
    """On a worker thread: take ``lock``, abandon a stream in a cycle, run the collector, let go."""

    def work() -> None:
        gc.disable()  # only the collect below finds the cycle
        try:
            _abandon_in_a_cycle(client, url)  # before the lock: sending takes some of these locks
            with lock:
                gc.collect()
        finally:
            gc.enable()

    thread = threading.Thread(target=work, daemon=True, name="gc-inside-a-lock")
    thread.start()
    thread.join(RETURN_TIMEOUT)
    return thread


def _prometheus(tap: llmtap.Tap) -> Any:
    """The Prometheus exporter among the tap's sinks."""
    return next(sink for sink in tap.sinks if sink.name == "prometheus")


def _otel_sdk_lock(provider: MeterProvider) -> Any:
    """A lock of the OpenTelemetry SDK's that recording takes (the measurement consumer's, or the
    provider's own); found by attribute so a new SDK version fails loudly here, not silently."""
    consumer = getattr(provider, "_measurement_consumer", None)
    lock = getattr(consumer, "_lock", None) or getattr(provider, "_lock", None)
    assert lock is not None, "the OpenTelemetry SDK's internals moved: update this test"
    return lock


# Every lock the ending path (bounds, exporters, the call, the log limiter, the hand-off itself) can
# take, by a name and how to reach it from a live capture.
LOCKS: dict[str, Callable[[Capture, MeterProvider], Any]] = {
    "bounds: request model": lambda cap, _: cap.tap._bounds.request_model._lock,
    "bounds: response model": lambda cap, _: cap.tap._bounds.response_model._lock,
    "bounds: stop reason": lambda cap, _: cap.tap._bounds.stop_reason._lock,
    "bounds: error type": lambda cap, _: cap.tap._bounds.error_type._lock,
    "bounds: server": lambda cap, _: cap.tap._bounds._server._lock,
    "prometheus fold": lambda cap, _: _prometheus(cap.tap)._store._lock,
    "prometheus scrape": lambda cap, _: _prometheus(cap.tap)._store._scrape_lock,
    "prometheus registry": lambda cap, _: cap.registry._lock,
    "otel exporter": lambda cap, _: next(s for s in cap.tap.sinks if s.name == "otel_metrics")._shared.lock,  # type: ignore[attr-defined]
    "otel sdk": lambda _, provider: _otel_sdk_lock(provider),
    "recording sink": lambda cap, _: cap._sink._cond,
    "log limiter": lambda cap, _: _log._lock,
    "hand-off drain": lambda cap, _: _handoff._lock,
}


@pytest.mark.parametrize("name", LOCKS)
def test_the_collector_inside_a_lock_only_hands_off(
    name: str, sim: Simulator, tapped: tuple[Capture, MeterProvider]
) -> None:
    cap, provider = tapped
    lock = LOCKS[name](cap, provider)
    before = len(cap.records)
    with httpx.Client(timeout=10) as client:
        thread = _collect_while_holding(lock, client, sim.base_url + "/v1/messages")
        assert not thread.is_alive(), f"gc.collect() inside the {name} lock did not return"
        records = cap.records  # drains what the collector handed off
    assert [r.outcome for r in records[before:]] == [Outcome.ABANDONED]  # counted, exactly once
    assert cap.sample("llmtap_streams_total", outcome="abandoned") == 1


def test_the_collector_inside_the_fold_lock_with_a_full_queue_only_hands_off(
    sim: Simulator, tapped: tuple[Capture, MeterProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PENDING_MAX an end folds under the fold lock itself: still only a hand-off inside the collector."""
    from llmtap._exporters import prometheus

    monkeypatch.setattr(prometheus, "PENDING_MAX", 0)
    test_the_collector_inside_a_lock_only_hands_off("prometheus fold", sim, tapped)


# The control runs in a child process: a finaliser stuck inside the collector leaves the collector
# "running" for good, and every later gc.collect() in that process does nothing.
_CONTROL = """
import gc, sys, threading, httpx, llmtap
from llmtap._core import handoff as _handoff
from llmtap.simulator import Simulator
from llmtap.testing import capture
from tests.test_handoff import REQUEST, _abandon_in_a_cycle
from llmtap._exporters import prometheus
prometheus.PENDING_MAX = 0  # every end folds under the fold lock (else it only queues, taking no lock)
if sys.argv[1] == "undone":
    _handoff.defer = lambda end, attempt, ending, at, exc: end(attempt, ending, at, exc)
with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap, httpx.Client() as client:
    lock = next(s for s in cap.tap.sinks if s.name == "prometheus")._store._lock  # the lock every attempt's end takes
    def work():
        gc.disable()
        _abandon_in_a_cycle(client, sim.base_url + "/v1/messages")
        with lock:
            gc.collect()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(5)
    print("hung" if thread.is_alive() else "returned", len(cap.records), flush=True)
    if thread.is_alive():
        import os; os._exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "expected"), [("undone", "hung 0"), ("on", "returned 1")])
def test_without_the_hand_off_the_collector_hangs_inside_a_lock(mode: str, expected: str) -> None:
    """The control (as 0.1 did: the finaliser ends the attempt itself) hangs; the same child with the
    hand-off returns and counts the attempt."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _CONTROL, mode], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.strip() == expected, done.stderr[-2000:]


def test_the_collector_inside_a_calls_lock_only_hands_off(
    sim: Simulator, tapped: tuple[Capture, MeterProvider]
) -> None:
    """The logical call's lock: an SDK stream abandoned while its call's lock is held."""
    cap, _ = tapped
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)

    def work() -> None:
        gc.disable()
        try:
            stream = client.messages.create(
                **REQUEST,
                # type: ignore[call-overload]
                extra_headers=Scenario(tokens=200, gap=0.001).headers(),
            )
            call = stream.response.stream._attempt.call
            assert call is not None
            cycle: list[Any] = [stream]
            cycle.append(cycle)
            del stream, cycle
            with call._lock:
                gc.collect()
        finally:
            gc.enable()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(RETURN_TIMEOUT)
    assert not thread.is_alive(), "gc.collect() inside a call's lock did not return"
    assert [r.outcome for r in cap.records] == [Outcome.ABANDONED]
    assert [c.outcome for c in cap.calls] == [Outcome.ABANDONED]
    client.close()


def test_an_abandoned_stream_is_counted_by_the_next_scrape(
    sim: Simulator, tapped: tuple[Capture, MeterProvider]
) -> None:
    cap, _ = tapped
    with httpx.Client(timeout=10) as client:
        _abandon_in_a_cycle(client, sim.base_url + "/v1/messages")
        assert _scraped_abandoned(cap) == 0  # control: not yet collected
        gc.collect()
    assert _scraped_abandoned(cap) == 1


def test_an_abandoned_stream_is_counted_by_the_next_opentelemetry_collection(sim: Simulator) -> None:
    """The OpenTelemetry metric path drains the hand-off too (its exporter is handed ``drain=``): with the
    Prometheus exporter off, an abandoned stream is in the next collection at the latest."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = llmtap.Settings(base_urls=(sim.base_url,), prometheus=False, otel_metrics=True)
    try:
        with capture(settings, meter_provider=provider), httpx.Client(timeout=10) as client:
            _abandon_in_a_cycle(client, sim.base_url + "/v1/messages")
            assert _collected_abandoned(reader) == 0  # control: not yet collected
            gc.collect()
            assert _collected_abandoned(reader) == 1
    finally:
        provider.shutdown()


def _collected_abandoned(reader: InMemoryMetricReader) -> float:
    """The ``llmtap.streams`` data points with ``outcome="abandoned"`` in one collection of ``reader``."""
    data = reader.get_metrics_data()
    values: list[float] = [
        point.value  # type: ignore[union-attr]
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "llmtap.streams"
        for point in metric.data.data_points
        if (point.attributes or {}).get("outcome") == "abandoned"
    ]
    return sum(values)


def _scraped_abandoned(cap: Capture) -> float:
    """What a scrape of the registry says (not cap.sample, which drains by itself)."""
    return sample(generate_latest(cap.registry).decode(), "llmtap_streams_total", outcome="abandoned")


def test_the_next_attempt_ends_what_was_handed_off(sim: Simulator, tapped: tuple[Capture, MeterProvider]) -> None:
    cap, _ = tapped
    with _handoff._lock:  # the daemon thread cannot drain meanwhile
        _stream._dropped(cap.tap, _begin_one(cap, sim))
        assert len(cap._sink.records) == 0
    with httpx.Client(timeout=10) as client:
        client.post(sim.base_url + "/v1/messages", json={**REQUEST, "stream": False})
    cap._sink.wait(2)
    assert sorted(r.outcome.value for r in cap._sink.records) == ["abandoned", "completed"]


def _begin_one(cap: Capture, sim: Simulator) -> Any:
    request = httpx.Request("POST", sim.base_url + "/v1/messages", json=REQUEST)
    attempt = cap.tap._begin(request)
    assert attempt is not None
    return attempt


def test_a_forked_child_drains_its_own_and_not_the_parents(
    sim: Simulator, tapped: tuple[Capture, MeterProvider]
) -> None:
    """The parent's pending endings stay the parent's; the child starts its own thread and lock."""
    cap, _ = tapped
    read, write = os.pipe()
    with _handoff._lock:  # held at the fork: the child must not inherit it held
        _stream._dropped(cap.tap, _begin_one(cap, sim))
        pid = os.fork()
        if pid == 0:  # the child: its queue is empty, its lock free, a new attempt starts its thread
            try:
                ok = _handoff._items.empty() and _handoff._lock.acquire(timeout=5) and _handoff._thread is None
                _handoff._lock.release()
                _handoff.tend()
                ok = ok and _handoff._thread is not None and _handoff._thread.is_alive()
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.close(write)
    assert [r.outcome for r in cap.records] == [Outcome.ABANDONED]  # the parent's, ended in the parent
