"""Prometheus exporter (prometheus-client).

Metric names are a contract: the shipped dashboards and alert rules query them. The families are
built from ``llmtap._core.metrics.INSTRUMENTS`` and filled from its :class:`~llmtap._core.mapping.Mapping`
(shared with the OpenTelemetry exporter, whose translated names are the same): OpenTelemetry GenAI
semconv names where one exists, ``llmtap_`` otherwise. Every series carries ``gen_ai_provider_name``,
``gen_ai_operation_name`` and ``gen_ai_request_model`` (bounded by ``Settings.max_models``).

Writes are cheap, reads expensive: an attempt's (or call's) end only appends its record to a queue
(:class:`_Folded`, a custom collector); each scrape first folds what is queued into plain numbers under one
lock, through the same ``measure`` (``_prometheus_common.py``, shared with the multiprocess store) and fold as
every other write, then builds the families, the
rate-limit values and the exemplars. Past :data:`PENDING_MAX` queued records an end folds the oldest one
itself (a registry nobody scrapes costs no memory). prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``) only sees values written through its own value classes, read by another
process: there the same measurements go to prometheus-client metric objects at once
(``_prometheus_multiprocess.py``, imported only in that mode).

The exporter and its single-process store (:class:`_Folded`) stay in one module though it is over 300 lines:
the store is what the exporter is in the common mode, and its cap (:data:`PENDING_MAX`) is the exporter's; the
other store and the parts both share (``_prometheus_common.py``) are their own modules.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample

from llmtap._core.mapping import Buckets, Mapping, Measurement, base_key
from llmtap._core.metrics import COUNTER, GAUGE, HISTOGRAM, INSTRUMENTS, label_name
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._exporters._health import HEALTH_METRIC_NAMES
from llmtap._exporters._health_prometheus import HealthCollector
from llmtap._exporters._prometheus_common import Ended, Family, exemplar_of, measure
from llmtap._log import internal_error

if TYPE_CHECKING:
    from collections.abc import Iterable

    from opentelemetry.trace import SpanContext

    from llmtap._exporters._prometheus_multiprocess import Objects

__all__ = ["METRIC_NAMES", "PENDING_MAX", "PrometheusExporter"]

PENDING_MAX = 64
"""Ended records kept for the next scrape (~0.9 KiB each with a call's record and twelve raw rate-limit headers: ~58
KiB); past it, an end folds the oldest :data:`_DRAIN_BATCH` itself, in one batch (a scrape every 15 s and more than
~4 requests per second keep it full: folded in batches, the work stays as cheap as at a scrape, and a process holds
~58 KiB of records rather than the ~0.2 MiB of 256). Records wait only once the registry has been scraped: one
nobody scrapes holds none (each end folds its own)."""

METRIC_NAMES: tuple[str, ...] = (*(i.prometheus() for i in INSTRUMENTS), *HEALTH_METRIC_NAMES)
"""Every metric family this exporter registers (histograms and counters by their family name)."""


class _Drain(Collector):
    """Exports nothing: each scrape first calls the ``drain`` the exporter was given (the tap's hand-off,
    :mod:`llmtap._core.handoff`, which ends the attempts the garbage collector handed off), so an abandoned
    stream is counted by the next scrape at the latest."""

    def __init__(self, drain: Callable[[], None]) -> None:
        self._drain = drain

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        try:
            self._drain()
        except Exception as exc:  # never into the scrape
            internal_error("sink", "the %s exporter failed: %r", PrometheusExporter.name, exc)
        return iter(())


class PrometheusExporter:
    """Registers the llmtap metrics in ``registry`` (default: the global one) and records into them.

    Args:
        registry: where to register (default: prometheus-client's global ``REGISTRY``).
        namespace: prepended to the ``llmtap_`` families (semconv names are kept).
        exclude: families not to register, by OpenTelemetry or Prometheus name (see
            ``Settings.excluded_metrics``).
        created_series: expose ``*_created`` series (``Settings.prometheus_created_series``).
        attribute_labels: ``Settings.attribute_labels``, labels after the base ones.
        drain: called first at each scrape (what ends the attempts handed off to be ended later, so the
            scrape counts them); ``None``: nothing is.
    """

    name = "prometheus"

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        namespace: str = "",
        *,
        exclude: tuple[str, ...] = (),
        created_series: bool = False,
        attribute_labels: tuple[str, ...] = (),
        drain: Callable[[], None] | None = None,
    ) -> None:
        self.registry = reg = REGISTRY if registry is None else registry
        self.mapping = mapping = Mapping(exclude)
        self.excluded = frozenset(i.key for i in INSTRUMENTS) - mapping.on
        extra = tuple(label_name(key) for key in attribute_labels)
        families = {i.key: Family(i, namespace, extra) for i in mapping.instruments}
        multiprocess = values.ValueClass is not values.MutexValue  # chosen by prometheus-client at import
        self.health: HealthCollector | None = None
        self._drain = None if drain is None else _Drain(drain)
        if self._drain is not None:
            reg.register(self._drain)  # first, so a scrape ends handed-off attempts before it reads the rest
        self._store: _Folded | Objects | None = None
        try:
            if multiprocess:  # only there: the module of its store is not loaded otherwise
                from llmtap._exporters._prometheus_multiprocess import Objects

                self._store = Objects(families, mapping, reg, created_series)
            else:
                self._store = _Folded(families, mapping, created_series)
                reg.register(self._store)
            self.health = HealthCollector(namespace).register(reg)  # llmtap_internal_errors / _label_overflows
        except ValueError as exc:  # a name already taken: register all or none
            self.unregister()
            raise ValueError(
                f"llmtap could not register its Prometheus metrics: {exc}. Another llmtap (or library) "
                "already uses these names in this registry: uninstrument it first, or pass registry="
            ) from exc
        self._write = self._store.write
        self._ended = self._store.ended
        self._seen = self._store.seen  # read without a lock: a miss only costs a write that takes one

    # -- Sink ----------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key = base_key(attempt)
        measurements = self.mapping.start(attempt)
        if measurements or key not in self._seen:  # a new base label set: its pre-created series now
            self._write(key, measurements, None)
        return True if attempt.request_stream else None

    def end(self, record: AttemptRecord, state: object) -> None:
        self._ended((record, state is not None, time.time()))

    def call_end(self, record: CallRecord) -> None:
        self._ended((record, None, time.time()))

    def close(self) -> None:
        """Fold what is queued, then remove every llmtap metric from the registry."""
        if isinstance(self._store, _Folded):
            self._store.drain()
        self.unregister()

    def unregister(self) -> None:
        """Remove every llmtap metric from the registry."""
        collectors: list[Any] = [self._drain, self.health]
        if isinstance(self._store, _Folded):
            collectors.append(self._store)
        elif self._store is not None:
            collectors += self._store.metrics
        for collector in collectors:
            if collector is not None:
                with contextlib.suppress(KeyError):
                    self.registry.unregister(collector)


class _Histogram:
    """One histogram series: counts per bucket (the last: +Inf), sum, the last exemplar per bucket."""

    __slots__ = ("counts", "created", "exemplars", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.exemplars: list[tuple[SpanContext, float, float] | None] | None = None
        self.created = time.time()


class _Folded(Collector):
    """Every llmtap series as plain numbers, turned into metric families at scrape: counters and gauges as
    floats, histograms as bucket counts, rate limits as the last record that had any (read at scrape).

    Ended records wait in a queue (a ``deque``: appending is atomic, so an end takes no lock) and are folded
    under the fold lock by the next scrape, oldest first; starts and the pre-created series are folded at
    once. Records wait only once the registry has been scraped (until then each end folds its own: a
    registry nobody reads holds nothing). Past :data:`PENDING_MAX` queued records, an end folds the oldest
    itself. A forked child forgets its parent's queue (the parent reports it)."""

    def __init__(self, families: dict[str, Family], mapping: Mapping, created_series: bool) -> None:
        self._families = families
        self._mapping = mapping
        self._created_series = created_series
        self._lock = threading.Lock()
        self._scrape_lock = threading.Lock()
        self._pending: deque[Ended] = deque()
        self._scraped = False
        """The registry has been scraped: a reader exists, so ended records may wait for it (until then
        each end folds its own record: a registry nobody reads holds nothing)."""
        self.seen: set[tuple[str, ...]] = set()
        """The base label sets whose pre-created series exist."""
        self._numbers: dict[str, dict[tuple[str | int, ...], float]] = {k: {} for k in families}
        self._created: dict[tuple[str, tuple[str | int, ...]], float] = {}
        self._histograms: dict[str, dict[tuple[str | int, ...], _Histogram]] = {k: {} for k in families}
        self._gauge_keys = frozenset(k for k, f in families.items() if f.kind == GAUGE)
        self._histogram_keys = frozenset(k for k, f in families.items() if f.kind == HISTOGRAM)
        self._exemplar_keys = frozenset(k for k, f in families.items() if f.exemplar)
        self._bounds = {k: f.bounds for k, f in families.items()}
        self._pending_limits: dict[tuple[str, ...], AttemptRecord] = {}
        os.register_at_fork(after_in_child=functools.partial(_forget_in_child, weakref.ref(self)))

    def ended(self, ended: Ended) -> None:
        """Queue an ended record for the next scrape (no lock); past :data:`PENDING_MAX`, fold the oldest
        :data:`_DRAIN_BATCH` first (in one batch, as a scrape does: the ends that follow only queue)."""
        pending = self._pending
        if not self._scraped:
            with self._lock:
                self._fold_ended(ended)
            return
        if len(pending) >= PENDING_MAX:
            with self._lock:  # only the holders of this lock pop: what is counted here is there
                for _ in range(min(len(pending), _DRAIN_BATCH)):
                    self._fold_ended(pending.popleft())
        pending.append(ended)

    def drain(self) -> None:
        """Fold the records queued when it begins, oldest first (the scrape, and ``close()``),
        :data:`_DRAIN_BATCH` at a time under the fold lock: a start that writes (a stream in flight, a
        retry) waits for one batch at most, not for the whole queue."""
        pending = self._pending
        left = len(pending)  # what ended before the drain began: later ends wait for the next one
        while left > 0:
            with self._lock:
                for _ in range(min(left, _DRAIN_BATCH)):
                    if not pending:  # the only other taker (an end past the cap) holds this lock too
                        left = 0
                        break
                    self._fold_ended(pending.popleft())
                    left -= 1

    def write(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None = None,
    ) -> None:
        """Fold ``measurements`` of the base label set ``key`` now (see :meth:`_fold`)."""
        with self._lock:
            self._fold(key, measurements, span, limits, 0.0)

    def _fold_ended(self, ended: Ended) -> None:
        """Under the fold lock: one queued record (a failure is counted as the request path counts it, and
        the scrape goes on)."""
        try:
            key, measurements, span, limits = measure(self._mapping, ended)
            self._fold(key, measurements, span, limits, ended[2])
        except Exception as exc:
            internal_error("sink", "the %s exporter failed: %r", PrometheusExporter.name, exc)

    def _fold(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None,
        at: float,
    ) -> None:
        """Under the fold lock: fold ``measurements`` of the base label set ``key`` (its pre-created series
        first, the first time it is seen); ``span``: exemplars, timed ``at``; ``limits``: a record whose rate
        limits become gauge values at the next scrape (kept as it is until then)."""
        if key not in self.seen:
            self.seen.add(key)
            self._fold(key, self._mapping.initial, None, None, 0.0)
        numbers, histograms, histogram_keys = self._numbers, self._histograms, self._histogram_keys
        if limits is not None:
            self._pending_limits[key] = limits
        for name, value, labels in measurements:
            series = key + labels
            if name in histogram_keys:
                histogram = histograms[name].get(series)
                if histogram is None:
                    histogram = histograms[name][series] = _Histogram(len(self._bounds[name]) + 1)
                if isinstance(value, Buckets):
                    counts = histogram.counts
                    for i, count in enumerate(value.counts):
                        if count:
                            counts[i] += count
                    histogram.sum += value.sum
                    continue
                i = bisect.bisect_left(self._bounds[name], value)
                histogram.counts[i] += 1
                histogram.sum += value
                if span is not None and name in self._exemplar_keys:
                    exemplars = histogram.exemplars
                    if exemplars is None:
                        exemplars = histogram.exemplars = [None] * len(histogram.counts)
                    exemplars[i] = (span, value, at)
                continue
            family = numbers[name]
            seen = family.get(series)
            if seen is None:
                if self._created_series:
                    self._created[(name, series)] = time.time()
                family[series] = float(value)  # type: ignore[arg-type]
            elif name in self._gauge_keys:
                family[series] = float(value)  # type: ignore[arg-type]
            else:
                family[series] = seen + value  # type: ignore[operator]

    def _forget(self) -> None:
        """In a forked child: the queued records are the parent's (it reports them), and the locks may be
        held by a thread the child does not have."""
        self._lock = threading.Lock()
        self._scrape_lock = threading.Lock()
        self._pending.clear()

    def describe(self) -> Iterator[Metric]:
        for name in self._families:
            yield self._family(name)

    def _family(self, name: str) -> Metric:
        f = self._families[name]
        if f.kind == COUNTER:
            return CounterMetricFamily(f.name, f.spec.description, labels=f.labels)
        if f.kind == HISTOGRAM:
            return HistogramMetricFamily(f.name, f.spec.description, labels=f.labels)
        return GaugeMetricFamily(f.name, f.spec.description, labels=f.labels)

    def collect(self) -> Iterator[Metric]:
        with self._scrape_lock:  # rate limits merge in the order the records came
            self._scraped = True  # ends queue from now on
            self.drain()
            pending, self._pending_limits = self._pending_limits, {}
            for key, record in pending.items():
                self.write(key, self._mapping.rate_limits(record), None)
            with self._lock:  # copy under the lock, build outside it
                numbers = {k: list(v.items()) for k, v in self._numbers.items()}
                histograms = {
                    k: [(s, list(h.counts), h.sum, h.exemplars and list(h.exemplars), h.created) for s, h in v.items()]
                    for k, v in self._histograms.items()
                }
                created = dict(self._created)
        for name, f in self._families.items():
            family: Any = self._family(name)
            if f.kind == HISTOGRAM:
                les = f.les
                for series, counts, total, exemplars, made in histograms[name]:
                    buckets: list[Any] = []
                    cumulative = 0.0  # floats, as prometheus-client's own values
                    for i, count in enumerate(counts):
                        cumulative += count
                        seen = exemplars[i] if exemplars else None
                        if seen is None:
                            buckets.append((les[i], cumulative))
                        else:
                            buckets.append((les[i], cumulative, Exemplar(exemplar_of(seen[0]), seen[1], seen[2])))
                    family.add_metric(series, buckets, total)
                    if self._created_series:
                        family.samples.append(
                            Sample(
                                f.name + "_created",
                                {k: str(v) for k, v in zip(f.labels, series, strict=True)},
                                made,
                            )
                        )
            elif f.kind == COUNTER:
                for series, value in numbers[name]:
                    family.add_metric(series, value, created=created.get((name, series)))
            else:
                for series, value in numbers[name]:
                    family.add_metric(series, value)
            yield family


_DRAIN_BATCH = 64
"""Queued records folded per hold of the fold lock at scrape (tens of µs)."""


def _forget_in_child(ref: weakref.ref[_Folded]) -> None:
    folded = ref()
    if folded is not None:
        folded._forget()
