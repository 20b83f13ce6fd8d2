"""A process forked while its meter provider collects or exports (gunicorn ``--preload`` under ``llmtap run``).

The real SDK reader and OTLP exporter send to a receiver on 127.0.0.1 that holds the parent's export
(or a callback holds the parent's collection) while the process forks; the child then records one
value and must export it. Each case runs with llmtap's guard (a provider llmtap records into) and,
as its control, without it (a provider llmtap never saw): there the child never exports, which
shows that the fork really landed inside the export or collection.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

from llmtap._exporters import _otel_fork
from llmtap._exporters.otel_metrics import OtelMetricsExporter
from tests.support.deploy import wait_until
from tests.support.otlp import Receiver, otlp_receiver

PARENT = os.getpid()


class _Held:
    """Holds the parent's metric exports in the receiver until :attr:`release` is set."""

    def __init__(self, receiver: Receiver) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        handler = receiver.RequestHandlerClass
        held = self

        class Holding(handler):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                if self.path == "/v1/metrics" and not held.release.is_set():
                    held.entered.set()
                    held.release.wait(10)
                super().do_POST()

        receiver.RequestHandlerClass = Holding


def _child_points(receiver: Receiver) -> int:
    """Data points the child recorded (``who=child``), in any export."""
    return sum(
        1
        for request in receiver.metrics()
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        for point in metric.sum.data_points
        if any(a.key == "who" and a.value.string_value == "child" for a in point.attributes)
    )


@pytest.fixture
def held() -> Iterator[tuple[Receiver, _Held]]:
    with otlp_receiver() as receiver:
        hold = _Held(receiver)
        yield receiver, hold
        hold.release.set()


def _provider(receiver: Receiver, guarded: bool) -> MeterProvider:
    exporter = OTLPMetricExporter(endpoint=receiver.endpoint + "/v1/metrics", timeout=10)
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=50)])
    if guarded:
        OtelMetricsExporter(meter_provider=provider)  # where llmtap guards the provider it records into
    return provider


def _fork_and_record(provider: MeterProvider, release_after: float | None, hold: threading.Event) -> int:
    """Fork now; the child adds 1 to a counter and lingers. ``release_after``: seconds after the fork
    began that the parent's held export or collection is let go (``None``: after the fork)."""
    if release_after is not None:
        threading.Timer(release_after, hold.set).start()
    counter = provider.get_meter("test").create_counter("child.records")
    pid = os.fork()
    if pid == 0:
        try:
            counter.add(1, {"who": "child"})
            time.sleep(20)
        finally:
            os._exit(0)
    hold.set()
    return pid


def _exported_by_child(receiver: Receiver, pid: int, within: float) -> bool:
    try:
        wait_until(lambda: _child_points(receiver) > 0, within, "the child's export")
        return True
    except TimeoutError:
        return False
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("release_after", [0.2, None], ids=["export-ends-soon", "export-stuck"])
@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "control"])
def test_a_fork_inside_the_parents_export(
    held: tuple[Receiver, _Held], guarded: bool, release_after: float | None
) -> None:
    """The parent's reader is sending (the receiver holds it) when the process forks. Guarded: the
    fork waits for the export to end (export-ends-soon) or, after ``WAIT``, the child gets a new
    export lock (export-stuck); either way the child exports."""
    receiver, hold = held
    provider = _provider(receiver, guarded)
    provider.get_meter("test").create_counter("parent.records").add(1)
    assert hold.entered.wait(10), "the parent's reader never exported"
    started = time.monotonic()
    pid = _fork_and_record(provider, release_after, hold.release)
    waited = time.monotonic() - started
    try:
        assert _exported_by_child(receiver, pid, 10 if guarded else 3) is guarded
        if guarded:
            assert waited < _otel_fork.WAIT + 2  # the fork waits at most WAIT (plus a loaded machine's slack)
    finally:
        provider.shutdown()


def _blocking_callback(entered: threading.Event, release: threading.Event) -> Callable[..., Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        if os.getpid() == PARENT and not release.is_set():
            entered.set()
            release.wait(10)
        return [Observation(1)]

    return observe


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "control"])
def test_a_fork_inside_the_parents_collection(held: tuple[Receiver, _Held], guarded: bool) -> None:
    """The parent's reader is running callbacks (one of them blocks) when the process forks; guarded,
    the fork waits for the collection to end and the child exports what it records."""
    receiver, _ = held
    _.release.set()  # exports pass; the callback holds the collection instead
    provider = _provider(receiver, guarded)
    entered, release = threading.Event(), threading.Event()
    provider.get_meter("test").create_observable_gauge("slow", callbacks=[_blocking_callback(entered, release)])
    assert entered.wait(10), "the parent's reader never collected"
    pid = _fork_and_record(provider, 0.2, release)
    try:
        assert _exported_by_child(receiver, pid, 10 if guarded else 3) is guarded
    finally:
        provider.shutdown()


def test_guard_leaves_other_meter_providers_alone() -> None:
    """The API's no-op provider (no SDK internals) is not guarded; an SDK one is, once."""
    from opentelemetry.metrics import NoOpMeterProvider

    before = len(_otel_fork._providers)
    _otel_fork.guard(NoOpMeterProvider())
    assert len(_otel_fork._providers) == before
    provider: Any = MeterProvider()
    _otel_fork.guard(provider)
    _otel_fork.guard(provider)
    assert len(_otel_fork._providers) == before + 1
    provider.shutdown()
