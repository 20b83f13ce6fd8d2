"""Test helpers: capture what llmtap records, for your tests and ours.

Example::

    from llmtap.testing import capture

    with capture(llmtap.Settings(base_urls=("http://127.0.0.1:8080",))) as cap:
        client.messages.create(...)
    assert cap.records[0].outcome is llmtap.Outcome.COMPLETED
    assert cap.sample("llmtap_attempts_total", status_code="200") == 1

:func:`sample` sums the same way over what another process exported, e.g. a scrape of your app's
``/metrics`` (several workers, ``llmtap run``)::

    from llmtap.testing import sample

    scraped = httpx.get("http://127.0.0.1:9464/metrics").text
    assert sample(scraped, "llmtap_streams_total", outcome="completed") == 3
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmtap import _installation, _lifecycle
from llmtap._core import handoff as _handoff
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._core.tap import Tap
from llmtap._settings import Settings

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_OTEL_EXTRA_HINT = "llmtap.testing.capture() records spans with the OpenTelemetry SDK: pip install 'llmtap[otel]'"

__all__ = ["Capture", "RecordingSink", "capture", "sample"]


class RecordingSink:
    """A sink that keeps every record it is given."""

    name = "recording"

    def __init__(self) -> None:
        self.records: list[AttemptRecord] = []
        self.calls: list[CallRecord] = []
        self._cond = threading.Condition()

    def start(self, attempt: AttemptStart) -> object:
        return True

    def end(self, record: AttemptRecord, state: object) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def call_end(self, record: CallRecord) -> None:
        with self._cond:
            self.calls.append(record)
            self._cond.notify_all()

    def close(self) -> None:
        pass

    def wait(self, records: int, calls: int = 0, timeout: float = 5.0) -> None:
        """Block until at least ``records`` attempts and ``calls`` calls have ended.

        Raises:
            TimeoutError: they did not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.records) < records or len(self.calls) < calls:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"expected {records} attempts / {calls} calls, got {len(self.records)} / {len(self.calls)}"
                    )
                self._cond.wait(left)


class Capture:
    """What one :func:`capture` block recorded: :attr:`records` (attempts), :attr:`calls` (logical calls,
    retries included) and :attr:`spans` are properties, read as they are at that moment; :meth:`wait` blocks
    until a number of them has ended, :meth:`sample` reads a metric from :attr:`registry`.
    """

    def __init__(self, tap: Tap, registry: CollectorRegistry, spans: InMemorySpanExporter, sink: RecordingSink):
        self.tap = tap
        self.registry = registry
        self.tracer_provider: TracerProvider | None = None
        self._spans = spans
        self._sink = sink

    @property
    def records(self) -> list[AttemptRecord]:
        """Every attempt ended so far (streams the garbage collector found dropped included)."""
        _handoff.drain()
        return self._sink.records

    @property
    def calls(self) -> list[CallRecord]:
        """Every logical call ended so far."""
        _handoff.drain()
        return self._sink.calls

    def wait(self, records: int, calls: int = 0, timeout: float = 5.0) -> None:
        """Block until at least ``records`` attempts and ``calls`` logical calls have ended.

        An attempt ends when its stream does (read to the end, closed, cancelled or dropped), which can be
        after the SDK call returned or on another thread: wait before asserting on :attr:`records`,
        :attr:`calls` or :attr:`spans`.

        Args:
            records: attempts to wait for (each HTTP request, retries included).
            calls: logical calls to wait for (an SDK call with its retries).
            timeout: seconds.

        Raises:
            TimeoutError: fewer ended within ``timeout`` (the message says how many did).
        """
        self._sink.wait(records, calls, timeout)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every span ended so far (one per attempt, in the order they ended)."""
        return tuple(self._spans.get_finished_spans())

    def __repr__(self) -> str:
        return (
            f"<llmtap.testing.Capture: {len(self.records)} records, {len(self.calls)} calls, {len(self.spans)} spans>"
        )

    def sample(self, name: str, /, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels`` (0.0 when none), in
        :attr:`registry` now: :func:`sample` of it."""
        return sample(self.registry, name, **labels)


def sample(source: CollectorRegistry | Iterable[Metric] | str, name: str, /, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0.0 when none).

    Label values are compared as exported (strings); labels not named may have any value, so
    ``sample(scraped, "llmtap_attempts_total")`` counts every attempt of every model and status.

    Args:
        source: a registry (collected now), metric families (``registry.collect()``,
            ``prometheus_client.parser.text_string_to_metric_families(...)``), or the text of a scrape
            (``/metrics`` in the Prometheus text format).
        name: the sample's name as exported, suffix included (``llmtap_attempts_total``,
            ``gen_ai_client_operation_duration_seconds_count``).
        labels: label values the sample must have. ``source`` and ``name`` are positional-only, so labels
            of those names can be asked for (``llmtap_server_reported_seconds`` has a ``source`` label).
    """
    if isinstance(source, str):
        families: Iterable[Metric] = text_string_to_metric_families(source)
    elif isinstance(source, CollectorRegistry):
        families = source.collect()
    else:
        families = source
    total = 0.0
    for family in families:
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@contextmanager
def capture(
    settings: Settings | None = None,
    *,
    patch: bool = True,
    meter_provider: MeterProvider | None = None,
    registry: CollectorRegistry | None = None,
) -> Iterator[Capture]:
    """Instrument with a fresh registry (or ``registry``) and an in-memory span exporter; uninstrument on exit.

    ``meter_provider`` receives the OpenTelemetry metrics (default: the global one), e.g. one with an
    ``InMemoryMetricReader`` to assert on them.

    The capture's ``tracer_provider`` can be handed to an SDK (e.g. the Anthropic client's
    ``open_telemetry={"tracer_provider": ...}``) so its spans land in the same exporter.

    Raises:
        ImportError: the OpenTelemetry SDK is not installed (``pip install 'llmtap[otel]'``).
        RuntimeError: llmtap is already instrumented in this process (by the app,
            ``opentelemetry-instrument`` / ``llmtap run``, or another ``capture()``). Capturing would
            have to take the app's instrumentation over and then remove it, so it refuses and
            leaves the app's instrumentation as it is: call :func:`llmtap.uninstrument` first.
    """
    if _installation.current is not None:
        raise RuntimeError(
            "llmtap.testing.capture(): llmtap is already instrumented in this process (llmtap.instrument(), "
            "opentelemetry-instrument / llmtap run, or an enclosing capture()); it is left as it is. "
            "Call llmtap.uninstrument() before capturing"
        )
    try:  # the SDK is an extra: an app that only exports Prometheus metrics never installs it
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError as exc:
        raise ImportError(f"{_OTEL_EXTRA_HINT} ({exc})") from exc
    registry = registry if registry is not None else CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = RecordingSink()
    try:
        tap = _lifecycle.activate(
            settings,
            registry=registry,
            tracer_provider=provider,
            meter_provider=meter_provider,
            patch=patch,
            extra_sinks=[sink],
        )
    except BaseException:
        provider.shutdown()
        raise
    cap = Capture(tap, registry, exporter, sink)
    cap.tracer_provider = provider
    try:
        yield cap
    finally:
        _lifecycle.deactivate()
        provider.shutdown()
