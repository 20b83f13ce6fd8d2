"""The Prometheus exporter's store for prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``):
the measurements go to prometheus-client metric objects at once, since their values live in files another
process reads at scrape. Imported by ``prometheus.py`` only in that mode (the common single-process mode
folds records at scrape, ``prometheus.py``'s ``_Folded``).

A chunk-gap histogram's values come pre-bucketed from the core; on the prometheus-client versions it is
tested on (:data:`llmtap._fences.PROMETHEUS_BUCKETS`, asked once when the store is made) they are added to
the histogram's bucket values at once (:func:`_merge_histogram`, prometheus-client's private ``_buckets``
and ``_sum``, checked first); on any other version, or a histogram laid out otherwise, they are observed
one value per gap through the public ``Histogram.observe()`` (:func:`_observe_each`: the same bucket
counts, count and sum)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.samples import Sample

from llmtap._core.gaps import spread
from llmtap._core.mapping import Buckets, Mapping, Measurement
from llmtap._core.metrics import COUNTER, GAUGE, HISTOGRAM
from llmtap._core.record import AttemptRecord
from llmtap._exporters._prometheus_common import Ended, Family, exemplar_of, measure
from llmtap._fences import PROMETHEUS_BUCKETS

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

__all__ = ["Objects"]


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


class Objects:
    """The same measurements written to prometheus-client metric objects, for its multiprocess mode
    (their values live in files every worker writes; a scrape sums them). Label children are cached."""

    def __init__(
        self, families: dict[str, Family], mapping: Mapping, registry: CollectorRegistry, created_series: bool
    ) -> None:
        self._mapping = mapping
        counter, histogram = (Counter, Histogram) if created_series else (_LeanCounter, _LeanHistogram)
        self._lock = threading.Lock()
        self.seen: set[tuple[str, ...]] = set()
        """The base label sets whose pre-created series exist."""
        self._children: dict[tuple[str, tuple[str | int, ...]], Any] = {}
        self._kinds = {k: f.kind for k, f in families.items()}
        self._exemplar_keys = frozenset(k for k, f in families.items() if f.exemplar)
        self._bounds = {k: f.bounds for k, f in families.items() if f.kind == HISTOGRAM}
        self._merge = PROMETHEUS_BUCKETS.open()
        """Pre-bucketed values are merged into the histograms' bucket values (decided here, once, from the
        installed prometheus-client's version); otherwise observed one by one."""
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
        """Write ``measurements`` of the base label set ``key`` now (its pre-created series first, the
        first time it is seen): the values live in files another process reads."""
        if key not in self.seen:
            with self._lock:
                new = key not in self.seen
                self.seen.add(key)
            if new:
                self.write(key, self._mapping.initial, None)
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
                    if not (self._merge and _merge_histogram(child, value)):
                        _observe_each(child, value, self._bounds[name])
                else:
                    exemplar = exemplar_of(span) if span is not None and name in self._exemplar_keys else None
                    child.observe(value, exemplar)
            elif kind == GAUGE:
                child.set(value)
            elif value:
                child.inc(value)

    def ended(self, ended: Ended) -> None:
        """Write an ended record's measurements now (see :func:`~llmtap._exporters._prometheus_common.measure`)."""
        self.write(*measure(self._mapping, ended))


def _merge_histogram(child: Histogram, buckets: Buckets) -> bool:
    """Add pre-bucketed observations (same bounds as the histogram) in one step per bucket; ``False`` (nothing
    added) where the histogram is not laid out as this reads it."""
    counters = getattr(child, "_buckets", None)
    sum_value = getattr(child, "_sum", None)
    if (
        sum_value is None
        or type(counters) is not list
        or len(counters) != len(buckets.counts)
        or not all(callable(getattr(value, "inc", None)) for value in (*counters, sum_value))
    ):
        return False  # prometheus-client laid out otherwise: observed one by one instead
    for value, count in zip(counters, buckets.counts, strict=True):
        if count:
            value.inc(count)
    sum_value.inc(buckets.sum)
    return True


def _observe_each(child: Histogram, buckets: Buckets, bounds: tuple[float, ...]) -> None:
    """The public way: one ``observe()`` per observation, of values in the right buckets that add up to the
    sum (:func:`~llmtap._core.gaps.spread`)."""
    observe = child.observe
    for value, count in spread(buckets.counts, buckets.sum, bounds, buckets.max):
        for _ in range(count):
            observe(value)
