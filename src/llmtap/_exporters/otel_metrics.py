"""OpenTelemetry metrics exporter: every llmtap measurement through a meter provider.

For platform teams shipping telemetry over OTLP (to an OpenTelemetry Collector, Mimir, Prometheus'
OTLP receiver ...) instead of scraping. The instruments are the same as the Prometheus exporter's,
read from one table (``llmtap._core.metrics.INSTRUMENTS``), with the same meaning and bucket boundaries;
their names, units and attributes translate to exactly the Prometheus names the shipped dashboards
and alert rules query (docs/guides/opentelemetry.md, "Names on the OpenTelemetry path").

Writes are cheap, reads expensive: an attempt's (or call's) end only queues its record; the next collection
writes it (the aggregation, :mod:`llmtap._exporters._otel_aggregation`: the instruments created once per
meter provider, the queue, the pending histogram values and when they are recorded). The measurements come
from the shared :class:`~llmtap._core.mapping.Mapping`. Counters and up-down counters are folded by llmtap per
attribute set (plain arithmetic under one lock) and reported by observable instruments (cumulative totals;
the SDK turns them into deltas where the reader asks for delta temporality); the rate-limit gauges read the
last record that had rate limits, converted at collection. Histogram values are appended to their series
(one attribute dict each, built once) and recorded at collection, a series' values past
``record()`` into its aggregations (:mod:`llmtap._exporters._otel_bulk`: ~0.6 µs a value, not ~7) on the SDK
versions that path is tested on (:data:`llmtap._fences.OTEL_BULK`), through ``record()`` on any other.
Recorded with its span's context (from ``record.span_context``) is the first value per
bucket and interval that has a sampled span (the SDK's reservoir keeps one exemplar per bucket: it keeps
its trace and value; its time is the collection's, in the same interval, not the attempt's end). A forked
child drops its parent's queued records and pending values (the parent reports them).

Differences from the native exporter, all invisible to the shipped queries:

* attributes that have no value are left out instead of being ``""`` (``error.type`` on success,
  ``status_code`` when no response arrived); PromQL treats an empty label and a missing one alike;
* the GenAI semconv histograms also carry ``server.address``, ``server.port`` and, when known,
  ``gen_ai.response.model``, as the conventions recommend;
* the series the native exporter pre-creates at zero are reported at zero from the moment a
  (provider, operation, model) is first seen; histograms cannot be, they appear on first use;
* ``gen_ai.client.operation.time_per_output_chunk``: the core aggregates the gaps of an attempt into
  bucket counts and their sum, so nothing runs per chunk. The OpenTelemetry API can only record
  single values (the conventions ask for one per chunk), and one SDK ``record()`` costs microseconds,
  so an attempt's end only merges its counts into pending per-label-set totals (O(buckets)); the
  next metric collection, on the reader's thread, records one value per gap from them (see
  :func:`llmtap._core.gaps.spread`). Bucket counts, count, sum and max (per collection interval) are exact; min and
  the individual values are representatives inside the right bucket. That is still one value per
  chunk at collection (~0.6 µs through :mod:`~llmtap._exporters._otel_bulk`, ~8 µs where values go
  through ``record()``), so llmtap records it only with ``Settings.otel_time_per_output_chunk``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanContext

from llmtap._core.mapping import Buckets, Labels, Mapping, Measurement, base_key
from llmtap._core.metrics import BASE_ATTRIBUTES, HISTOGRAM, INSTRUMENTS
from llmtap._exporters import _otel_aggregation as _aggregation
from llmtap._exporters import _otel_bulk

if TYPE_CHECKING:
    from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord

__all__ = ["OtelMetricsExporter"]

Attributes = dict[str, str | int]
_Series = tuple[str | int, ...]


class OtelMetricsExporter:
    """Records every llmtap measurement through an OpenTelemetry meter.

    Args:
        meter_provider: default: the global meter provider.
        namespace: prefixes the ``llmtap.*`` instrument names (``Settings.metric_namespace``).
        exclude: instruments not to create (``Settings.excluded_metrics``).
        chunk_gaps: record ``gen_ai.client.operation.time_per_output_chunk`` (``Settings.otel_time_per_output_chunk``).
        attribute_labels: ``Settings.attribute_labels``, attributes after the base ones.
        drain: called first at each collection (what ends the attempts handed off to be ended later, so
            the collection counts them); ``None``: nothing is.
    """

    name = "otel_metrics"

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        *,
        namespace: str = "",
        exclude: tuple[str, ...] = (),
        chunk_gaps: bool = True,
        attribute_labels: tuple[str, ...] = (),
        drain: Callable[[], None] | None = None,
    ) -> None:
        if not chunk_gaps:  # Settings.otel_time_per_output_chunk: one SDK record() per chunk is the price
            exclude = (*exclude, "gap")
        self.mapping = mapping = Mapping(exclude, semconv_attributes=True)
        self._shared = shared = _aggregation.shared(meter_provider, namespace)
        if drain is not None:
            shared.drain = drain
        self.instruments: dict[str, Any] = {spec.key: shared.instrument(spec) for spec in mapping.instruments}
        """The OpenTelemetry instruments, by key (observable ones for counters and gauges)."""
        self._histograms = {k: i for k, i in self.instruments.items() if _kind(k) == HISTOGRAM}
        self._exemplars = frozenset(i.key for i in mapping.instruments if i.exemplar)
        self._attribute_keys = attribute_labels
        self._seen: set[tuple[str, ...]] = set()
        self._series: dict[tuple[str, _Series], _aggregation.Histogram] = {}
        """The histograms' series (the counters' live in the shared totals)."""
        self._rate_limited = mapping.rate_limited

    def close(self) -> None:
        """Nothing to release: the shared instruments stay with the meter provider, and their
        callbacks keep reporting the totals, which the next exporter on the same provider continues."""

    def _attributes(self, name: str, key: tuple[str, ...], labels: Labels) -> Attributes:
        """The attributes of one series; attribute labels and attributes without a value are left out."""
        attrs: Attributes = dict(zip(BASE_ATTRIBUTES, key[:3], strict=True))
        attrs.update((k, v) for k, v in zip(self._attribute_keys, key[3:], strict=True) if v)
        attrs.update((k, v) for k, v in zip(self.mapping.attributes[name], labels, strict=True) if v != "")
        return attrs

    def write(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None = None,
    ) -> None:
        """Fold ``measurements`` under one lock (counters and gauges into totals, histogram values into
        the pending ones); record now the few histogram values that cannot wait (``Shared.defer``).
        ``limits``: a record whose rate limits become gauge values at the next collection."""
        shared = self._shared
        with shared.lock:
            if limits is not None:
                shared.pending_limits[key] = (self, limits)
            if key not in self._seen:  # the series the native exporter pre-creates, at zero
                self._seen.add(key)
                self._fold(key, self.mapping.initial, None)
            now = self._fold(key, measurements, span)
        if now:
            bulk = shared.bulk
            for histogram, value, exemplar in now:
                context = _context_of(span) if exemplar and span is not None else _aggregation.NO_SPAN
                if bulk:
                    _otel_bulk.record_one(histogram.instrument, histogram.attributes, value, context)
                else:
                    histogram.instrument.record(value, histogram.attributes, context)

    def _fold(
        self, key: tuple[str, ...], measurements: Iterable[Measurement], span: SpanContext | None
    ) -> list[tuple[_aggregation.Histogram, Any, bool]]:
        """Under the lock: counters and gauges into the shared totals, histogram values into the pending
        ones; the histogram values to record now returned, each with whether it carries ``span``."""
        shared, totals, cache, histograms = self._shared, self._shared.totals, self._series, self._histograms
        now: list[tuple[_aggregation.Histogram, Any, bool]] = []
        for name, value, labels in measurements:
            series = key + labels
            if name in histograms:
                histogram = cache.get((name, series))
                if histogram is None:
                    attrs = self._attributes(name, key, labels)
                    histogram = cache[(name, series)] = _aggregation.Histogram(
                        histograms[name], attrs, _aggregation.BOUNDS[name], name in self._exemplars
                    )
                if isinstance(value, Buckets):
                    shared.add_gaps(histogram, value)
                else:
                    exemplar = shared.defer(histogram, value, span is not None)
                    if exemplar is not None:
                        now.append((histogram, value, exemplar))
                continue
            family = totals[name]
            entry = family.get(series)
            if entry is None:
                family[series] = [self._attributes(name, key, labels), value]
            elif name in _aggregation.GAUGE_KEYS:
                entry[1] = value
            else:
                entry[1] += value
        return now

    # -- Sink ------------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key, measurements = base_key(attempt), self.mapping.start(attempt)
        if measurements or key not in self._seen:  # (a set read needs no lock) nothing to do otherwise
            self.write(key, measurements, None)
        return True if attempt.request_stream else None

    def end(self, record: AttemptRecord, state: object) -> None:
        self._shared.ended((self, record, state is not None))  # written at the next collection

    def call_end(self, record: CallRecord) -> None:
        self._shared.ended((self, record, None))

    def write_ended(self, record: AttemptRecord | CallRecord, in_flight: bool | None) -> None:
        """What an ended record writes (``in_flight``: its start counted a stream in flight; ``None``: a call's
        record), at collection (or at its end, past ``ENDED_MAX``)."""
        if in_flight is None:
            call = cast("CallRecord", record)
            self.write(base_key(call), self.mapping.call_end(call), call.span_context)
            return
        attempt = cast("AttemptRecord", record)
        limits = attempt if self._rate_limited and attempt.rate_limit_headers else None  # converted at collection
        self.write(base_key(attempt), self.mapping.end(attempt, in_flight), attempt.span_context, limits)


def _context_of(span_context: SpanContext) -> Context:
    """A context holding the attempt's span, for the SDK's (trace-based) exemplar filter."""
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


_KINDS = {i.key: i.kind for i in INSTRUMENTS}
_kind = _KINDS.__getitem__
