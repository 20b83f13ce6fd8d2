"""Prometheus exporter (prometheus-client).

Metric names are a contract: the shipped dashboards and alert rules query them. The families are
built from ``llmtap._core.metrics.INSTRUMENTS`` and filled from its :class:`~llmtap._core.metrics.Mapping`
(shared with the OpenTelemetry exporter, whose translated names are the same): OpenTelemetry GenAI
semconv names where one exists, ``llmtap_`` otherwise. Every series carries ``gen_ai_provider_name``,
``gen_ai_operation_name`` and ``gen_ai_request_model`` (bounded by ``Settings.max_models``).

Writes are cheap, reads expensive: an attempt's end folds its measurements into plain numbers under one
lock (:class:`_Folded`, a custom collector), keeps the record of its rate limits as it is, and the
families, the rate-limit values and the exemplars are built when Prometheus scrapes. prometheus-client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) only sees values written through its own value
classes, so there the same measurements go to prometheus-client metric objects (:class:`_Objects`).
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

from llmtap._core import handoff as _handoff
from llmtap._core.metrics import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    INSTRUMENTS,
    Buckets,
    Instrument,
    Mapping,
    Measurement,
    base_key,
    label_name,
)
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._exporters._health import HEALTH_METRIC_NAMES
from llmtap._exporters._health_prometheus import HealthCollector

if TYPE_CHECKING:
    from collections.abc import Iterable

    from opentelemetry.trace import SpanContext

__all__ = ["METRIC_NAMES", "PrometheusExporter", "exemplar_of"]

METRIC_NAMES: tuple[str, ...] = (*(i.prometheus() for i in INSTRUMENTS), *HEALTH_METRIC_NAMES)
"""Every metric family this exporter registers (histograms and counters by their family name)."""


class _HandOff(Collector):
    """Exports nothing: each scrape first ends the attempts handed off by the garbage collector
    (:mod:`llmtap._core.handoff`), so an abandoned stream is counted by the next scrape at the latest."""

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        _handoff.drain()
        return iter(())


class PrometheusExporter:
    """Registers the llmtap metrics in ``registry`` (default: the global one) and records into them.

    Args:
        registry: where to register (default: prometheus-client's global ``REGISTRY``).
        namespace: prepended to the ``llmtap_`` families (semconv names are kept).
        exclude: families not to register, by OpenTelemetry or Prometheus name (see
            ``Settings.exclude_metrics``).
        created_series: expose ``*_created`` series (``Settings.prometheus_created_series``).
        attribute_labels: ``Settings.attribute_labels``, labels after the base ones.
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
    ) -> None:
        self.registry = reg = REGISTRY if registry is None else registry
        self.mapping = mapping = Mapping(exclude)
        self.excluded = frozenset(i.key for i in INSTRUMENTS) - mapping.on
        self._lock = threading.Lock()
        self._seen: set[tuple[str, ...]] = set()
        extra = tuple(label_name(key) for key in attribute_labels)
        families = {i.key: _Family(i, namespace, extra) for i in mapping.instruments}
        multiprocess = values.ValueClass is not values.MutexValue  # chosen by prometheus-client at import
        self.health: HealthCollector | None = None
        self._handoff = _HandOff()
        reg.register(self._handoff)  # first, so a scrape ends handed-off attempts before it reads the rest
        self._store: _Folded | _Objects | None = None
        try:
            if multiprocess:
                self._store = _Objects(families, mapping, reg, created_series)
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
        self._rate_limited = mapping.rate_limited

    def _base(self, key: tuple[str, ...]) -> tuple[str, ...]:
        """``key``, its pre-created series made the first time it is seen."""
        if key not in self._seen:
            with self._lock:
                if key not in self._seen:
                    self._write(key, self.mapping.initial, None)
                    self._seen.add(key)
        return key

    # -- Sink ----------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key = self._base(base_key(attempt))
        measurements = self.mapping.start(attempt)
        if measurements:
            self._write(key, measurements, None)
        return True if attempt.request_stream else None

    def end(self, record: AttemptRecord, state: object) -> None:
        key = self._base(base_key(record))
        limits = record if self._rate_limited and record.rate_limit_headers else None  # converted at collection
        self._write(key, self.mapping.end(record, state is not None), record.span_context, limits)

    def call_end(self, record: CallRecord) -> None:
        key = self._base(base_key(record))
        self._write(key, self.mapping.call_end(record), record.span_context)

    def close(self) -> None:
        """Remove every llmtap metric from the registry."""
        self.unregister()

    def unregister(self) -> None:
        """Remove every llmtap metric from the registry."""
        collectors: list[Any] = [self._handoff, self.health]
        if isinstance(self._store, _Folded):
            collectors.append(self._store)
        elif self._store is not None:
            collectors += self._store.metrics
        for collector in collectors:
            if collector is not None:
                with contextlib.suppress(KeyError):
                    self.registry.unregister(collector)


def exemplar_of(context: SpanContext) -> dict[str, str]:
    """The OpenMetrics exemplar labels of a span: ``trace_id`` and ``span_id`` in W3C hex, the names
    Grafana links to a trace by."""
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


class _Family:
    """How one instrument is exposed: family name (namespaced, without ``_total``, as prometheus-client
    takes it), label names, bucket bounds and their ``le`` strings."""

    __slots__ = ("bounds", "exemplar", "kind", "labels", "les", "name", "spec")

    def __init__(self, spec: Instrument, namespace: str, extra_labels: tuple[str, ...]) -> None:
        self.spec = spec
        self.kind = spec.kind
        self.name = spec.prometheus().removesuffix("_total")
        if namespace and not spec.semconv:
            self.name = f"{namespace}_{self.name}"
        self.labels = spec.labels_with(extra_labels)
        self.bounds = spec.buckets
        self.les = (*(floatToGoString(b) for b in spec.buckets), "+Inf")  # type: ignore[no-untyped-call]
        self.exemplar = spec.exemplar


class _Histogram:
    """One histogram series: counts per bucket (the last: +Inf), sum, the last exemplar per bucket."""

    __slots__ = ("counts", "created", "exemplars", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.exemplars: list[tuple[SpanContext, float, float] | None] | None = None
        self.created = time.time()


class _Folded(Collector):
    """Every llmtap series as plain numbers, written under one lock and turned into metric families at
    scrape: counters and gauges as floats, histograms as bucket counts, rate limits as the last record
    that had any (read at scrape)."""

    def __init__(self, families: dict[str, _Family], mapping: Mapping, created_series: bool) -> None:
        self._families = families
        self._mapping = mapping
        self._created_series = created_series
        self._lock = threading.Lock()
        self._scrape_lock = threading.Lock()
        self._numbers: dict[str, dict[tuple[str | int, ...], float]] = {k: {} for k in families}
        self._created: dict[tuple[str, tuple[str | int, ...]], float] = {}
        self._histograms: dict[str, dict[tuple[str | int, ...], _Histogram]] = {k: {} for k in families}
        self._gauge_keys = frozenset(k for k, f in families.items() if f.kind == GAUGE)
        self._histogram_keys = frozenset(k for k, f in families.items() if f.kind == HISTOGRAM)
        self._exemplar_keys = frozenset(k for k, f in families.items() if f.exemplar)
        self._bounds = {k: f.bounds for k, f in families.items()}
        self._pending_limits: dict[tuple[str, ...], AttemptRecord] = {}

    def write(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None = None,
    ) -> None:
        """Fold ``measurements`` of the base label set ``key``; ``limits``: a record whose rate limits
        become gauge values at the next scrape (kept as it is until then)."""
        numbers, histograms, histogram_keys = self._numbers, self._histograms, self._histogram_keys
        with self._lock:
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
                        exemplars[i] = (span, value, time.time())
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


class _LeanCounter(Counter):
    """No ``*_created`` sample per label set (see ``Settings.prometheus_created_series``).

    prometheus-client's own switch, ``disable_created_metrics()``, is process-wide; a library must
    not change how the application's own metrics are exposed.
    """

    def _child_samples(self) -> Iterable[Sample]:
        return tuple(s for s in super()._child_samples() if s.name != "_created")


class _LeanHistogram(Histogram):
    def _child_samples(self) -> Iterable[Sample]:
        return tuple(s for s in super()._child_samples() if s.name != "_created")


class _Objects:
    """The same measurements written to prometheus-client metric objects, for its multiprocess mode
    (their values live in files every worker writes; a scrape sums them). Label children are cached."""

    def __init__(
        self, families: dict[str, _Family], mapping: Mapping, registry: CollectorRegistry, created_series: bool
    ) -> None:
        self._mapping = mapping
        counter, histogram = (Counter, Histogram) if created_series else (_LeanCounter, _LeanHistogram)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, tuple[str | int, ...]], Any] = {}
        self._kinds = {k: f.kind for k, f in families.items()}
        self._exemplar_keys = frozenset(k for k, f in families.items() if f.exemplar)
        self.metrics: list[Any] = []
        self._metrics: dict[str, Any] = {}
        for key, f in families.items():
            doc, labels = f.spec.description, f.labels
            if f.kind == COUNTER:
                metric: Any = counter(f.name, doc, labels, registry=registry)
            elif f.kind == HISTOGRAM:
                metric = histogram(f.name, doc, labels, registry=registry, buckets=f.bounds)
            elif f.kind == GAUGE:  # last value seen (rate-limit headers)
                metric = Gauge(f.name, doc, labels, registry=registry, multiprocess_mode="mostrecent")
            else:  # the in-flight up-down counter
                metric = Gauge(f.name, doc, labels, registry=registry, multiprocess_mode="livesum")
            self.metrics.append(metric)
            self._metrics[key] = metric

    def write(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None = None,
    ) -> None:
        if limits is not None:  # the gauges live in files: set now
            self.write(key, self._mapping.rate_limits(limits), None)
        for name, value, labels in measurements:
            child = self._children.get((name, key + labels))
            if child is None:
                with self._lock:
                    child = self._children[(name, key + labels)] = self._metrics[name].labels(*key, *labels)
            kind = self._kinds[name]
            if kind == HISTOGRAM:
                if isinstance(value, Buckets):
                    _merge_histogram(child, value)
                else:
                    exemplar = exemplar_of(span) if span is not None and name in self._exemplar_keys else None
                    child.observe(value, exemplar)
            elif kind == GAUGE:
                child.set(value)
            elif value:
                child.inc(value)


def _merge_histogram(child: Histogram, buckets: Buckets) -> None:
    """Add pre-bucketed observations (same bounds as the histogram) in one step per bucket."""
    counters = getattr(child, "_buckets", None)
    sum_value = getattr(child, "_sum", None)
    if counters is None or sum_value is None or len(counters) != len(buckets.counts):
        return  # prometheus-client internals changed: skip rather than mis-record
    for value, count in zip(counters, buckets.counts, strict=True):
        if count:
            value.inc(count)
    sum_value.inc(buckets.sum)
