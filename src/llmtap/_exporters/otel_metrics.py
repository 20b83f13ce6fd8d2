"""OpenTelemetry metrics exporter: every llmtap measurement through a meter provider.

For platform teams shipping telemetry over OTLP (to an OpenTelemetry Collector, Mimir, Prometheus'
OTLP receiver ...) instead of scraping. The instruments are the same as the Prometheus exporter's,
read from one table (``llmtap._core.metrics.INSTRUMENTS``), with the same meaning and bucket boundaries;
their names, units and attributes translate to exactly the Prometheus names the shipped dashboards
and alert rules query (docs/guides/opentelemetry.md, "Names on the OpenTelemetry path").

Writes are cheap, reads expensive: an attempt's (or call's) end only appends its record to a queue (no
lock); the next collection, on the reader's thread, writes it, oldest first, in a callback the SDK runs
before the other instruments' callbacks and before the collection's snapshot (:meth:`_Shared._flush`), so
each record lands, exactly once, in the interval it ended in. Records (and histogram values) wait only once
a collection has run: until then, as with the API's no-op meter provider, each end writes its own and
nothing is held. Past :data:`ENDED_MAX` queued records, an end writes the oldest itself (a reader that
stops collecting costs no more memory). The measurements come from the
shared :class:`~llmtap._core.mapping.Mapping`. Counters and up-down counters are folded by llmtap per
attribute set (plain arithmetic under one lock) and reported by observable instruments (cumulative totals;
the SDK turns them into deltas where the reader asks for delta temporality); the rate-limit gauges read the
last record that had rate limits, converted at collection. Histogram values are appended to their series
(one attribute dict each, built once) and recorded by the same callback, a series' values past
``record()`` into its aggregations (:mod:`llmtap._exporters._otel_bulk`: ~0.6 µs a value, not ~7) on the SDK
versions that path is tested on (:data:`llmtap._fences.OTEL_BULK`), through ``record()`` on any other.
Recorded with its span's context (from ``record.span_context``) is the first value per
bucket and interval that has a sampled span (the SDK's reservoir keeps one exemplar per bucket: it keeps
its trace and value; its time is the collection's, in the same interval, not the attempt's end); recorded
as soon as written, not with the pending values, are a series' first value and every value once
:data:`PENDING_MAX` are pending. A forked child drops its parent's queued records and pending values (the
parent reports them).

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
  :func:`spread`). Bucket counts, count, sum and max (per collection interval) are exact; min and
  the individual values are representatives inside the right bucket. That is still one value per
  chunk at collection (~0.6 µs through :mod:`~llmtap._exporters._otel_bulk`, ~8 µs where values go
  through ``record()``), so llmtap records it only with ``Settings.otel_chunk_gaps``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import os
import threading
import weakref
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import SpanContext

from llmtap._core.gaps import spread
from llmtap._core.mapping import Buckets, Labels, Mapping, Measurement, base_key
from llmtap._core.metrics import BASE_ATTRIBUTES, COUNTER, GAUGE, HISTOGRAM, INSTRUMENTS, UP_DOWN, Instrument
from llmtap._exporters import _otel_bulk, _otel_fork
from llmtap._exporters._health import register_otel
from llmtap._fences import OTEL_BULK
from llmtap._log import internal_error, log_once
from llmtap._version import __version__

if TYPE_CHECKING:
    from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord

__all__ = ["MIN_SDK", "OtelMetricsExporter", "spread"]

MIN_SDK = (1, 44, 0)
"""The oldest OpenTelemetry SDK llmtap's metrics are tested on and right on (the ``otel`` extra's floor).
Before 1.32 the SDK's OTLP exporter gives every histogram the SDK's default buckets (0, 5, 10 ... 10,000:
milliseconds) or the first histogram's advisory buckets, not each histogram's own (llmtap's are seconds and
tokens); before 1.44 the meter provider keeps its locks across a fork, so a worker forked while its parent
exported (gunicorn ``--preload``) can export no metric, llmtap's fork guard (``_otel_fork``) or not."""

Attributes = dict[str, str | int]
_Series = tuple[str | int, ...]


class OtelMetricsExporter:
    """Records every llmtap measurement through an OpenTelemetry meter.

    Args:
        meter_provider: default: the global meter provider.
        namespace: prefixes the ``llmtap.*`` instrument names (``Settings.metric_prefix_namespace``).
        exclude: instruments not to create (``Settings.exclude_metrics``).
        chunk_gaps: record ``gen_ai.client.operation.time_per_output_chunk`` (``Settings.otel_chunk_gaps``).
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
        if not chunk_gaps:  # Settings.otel_chunk_gaps: one SDK record() per chunk is the price
            exclude = (*exclude, "gap")
        self.mapping = mapping = Mapping(exclude, semconv_attributes=True)
        self._shared = shared = _shared(meter_provider, namespace)
        if drain is not None:
            shared.drain = drain
        self.instruments: dict[str, Any] = {spec.key: shared.instrument(spec) for spec in mapping.instruments}
        """The OpenTelemetry instruments, by key (observable ones for counters and gauges)."""
        self._histograms = {k: i for k, i in self.instruments.items() if _kind(k) == HISTOGRAM}
        self._exemplars = frozenset(i.key for i in mapping.instruments if i.exemplar)
        self._attribute_keys = attribute_labels
        self._seen: set[tuple[str, ...]] = set()
        self._series: dict[tuple[str, _Series], _Histogram] = {}
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

    def _write(
        self,
        key: tuple[str, ...],
        measurements: Iterable[Measurement],
        span: SpanContext | None,
        limits: AttemptRecord | None = None,
    ) -> None:
        """Fold ``measurements`` under one lock (counters and gauges into totals, histogram values into
        the pending ones); record now the few histogram values that cannot wait (:meth:`_Shared.defer`).
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
                context = _context_of(span) if exemplar and span is not None else _NO_SPAN
                if bulk:
                    _otel_bulk.record_one(histogram.instrument, histogram.attributes, value, context)
                else:
                    histogram.instrument.record(value, histogram.attributes, context)

    def _fold(
        self, key: tuple[str, ...], measurements: Iterable[Measurement], span: SpanContext | None
    ) -> list[tuple[_Histogram, Any, bool]]:
        """Under the lock: counters and gauges into the shared totals, histogram values into the pending
        ones; the histogram values to record now returned, each with whether it carries ``span``."""
        shared, totals, cache, histograms = self._shared, self._shared.totals, self._series, self._histograms
        now: list[tuple[_Histogram, Any, bool]] = []
        for name, value, labels in measurements:
            series = key + labels
            if name in histograms:
                histogram = cache.get((name, series))
                if histogram is None:
                    attrs = self._attributes(name, key, labels)
                    histogram = cache[(name, series)] = _Histogram(
                        histograms[name], attrs, _BOUNDS[name], name in self._exemplars
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
            elif name in _GAUGE_KEYS:
                entry[1] = value
            else:
                entry[1] += value
        return now

    # -- Sink ------------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key, measurements = base_key(attempt), self.mapping.start(attempt)
        if measurements or key not in self._seen:  # (a set read needs no lock) nothing to do otherwise
            self._write(key, measurements, None)
        return True if attempt.request_stream else None

    def end(self, record: AttemptRecord, state: object) -> None:
        self._shared.ended((self, record, state is not None))  # written at the next collection

    def call_end(self, record: CallRecord) -> None:
        self._shared.ended((self, record, None))

    def _write_ended(self, record: AttemptRecord | CallRecord, in_flight: bool | None) -> None:
        """What an ended record writes (``in_flight``: its start counted a stream in flight; ``None``: a call's
        record), at collection (or at its end, past :data:`ENDED_MAX`)."""
        if in_flight is None:
            call = cast("CallRecord", record)
            self._write(base_key(call), self.mapping.call_end(call), call.span_context)
            return
        attempt = cast("AttemptRecord", record)
        limits = attempt if self._rate_limited and attempt.rate_limit_headers else None  # converted at collection
        self._write(base_key(attempt), self.mapping.end(attempt, in_flight), attempt.span_context, limits)


def _context_of(span_context: SpanContext) -> Context:
    """A context holding the attempt's span, for the SDK's (trace-based) exemplar filter."""
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


_NO_SPAN: Context = trace.set_span_in_context(trace.INVALID_SPAN, Context())
"""The context of a histogram value that carries no exemplar: no span (the SDK would otherwise read
the current context, that of whichever thread records, and an empty ``Context()`` counts as none)."""

PENDING_MAX = 65_536
"""Histogram values kept for the next collection, in all (8 bytes each); past it, values are recorded
at once, as if no collection came (a reader that never collects costs no memory)."""

ENDED_MAX = 64
"""Ended records kept for the next collection (~0.9 KiB each: ~58 KiB; a 60-s export interval and more than
~1 request per second keep it full); past it, an end writes the
oldest :data:`_WRITE_BATCH` itself, in one batch, as if no collection came. Records (and histogram values)
wait only once a collection has run: with no reader (the API's no-op meter provider, a provider without
readers) nothing waits."""

_WRITE_BATCH = 64
"""Queued records an end writes past :data:`ENDED_MAX` (a reader that collects seldom keeps the queue full:
written in batches, the work stays as cheap as at a collection)."""

_Ended = tuple["OtelMetricsExporter", "AttemptRecord | CallRecord", "bool | None"]
"""An ended record, its exporter, and whether its start counted a stream in flight (``None``: a call's)."""


class _Histogram:
    """One histogram series: its instrument and attributes (built once), its values since the last
    collection, and the buckets that already recorded this interval's exemplar."""

    __slots__ = ("attributes", "bounds", "exemplar", "gaps", "instrument", "marked", "started", "values")

    def __init__(self, instrument: Any, attributes: Attributes, bounds: list[float], exemplar: bool) -> None:
        self.instrument = instrument
        self.attributes = attributes
        self.bounds = bounds
        self.exemplar = exemplar
        """The instrument carries the attempt's span as an exemplar."""
        self.values = array("d")
        self.marked: set[int] = set()
        self.started = False
        """A value was recorded into the SDK (the series exists there, with its start time)."""
        self.gaps: list[Any] | None = None
        """Pending chunk gaps: [bucket counts, sum, max] (see :func:`spread`)."""


_KINDS = {i.key: i.kind for i in INSTRUMENTS}
_kind = _KINDS.__getitem__
_GAP_BOUNDS = next(i.buckets for i in INSTRUMENTS if i.key == "gap")
_GAUGE_KEYS = frozenset(i.key for i in INSTRUMENTS if i.kind == GAUGE)
_BOUNDS = {i.key: [float(b) for b in i.buckets] for i in INSTRUMENTS if i.kind == HISTOGRAM}
"""Each histogram's bucket bounds, as advised to the SDK (a view may set others)."""


class _Shared:
    """llmtap's instruments on one meter provider under one namespace, each created once, and the
    totals their callbacks report.

    The OpenTelemetry SDK hands back the first instrument of a name, with the first one's callbacks,
    so an exporter made after another on the same provider (``uninstrument(); instrument()``) must
    reuse them, and it continues their totals.
    """

    def __init__(self, meter: Any, namespace: str) -> None:
        self.meter = meter
        self.namespace = namespace
        self.lock = threading.Lock()
        self.totals: dict[str, dict[_Series, list[Any]]] = {i.key: {} for i in INSTRUMENTS}
        """Counters, up-down counters and gauges: series -> [attributes, value]."""
        self.pending_limits: dict[tuple[str, ...], tuple[OtelMetricsExporter, AttemptRecord]] = {}
        """Base label set -> the last record with rate limits (and its exporter), converted at collection."""
        self._queued: list[_Histogram] = []
        """The series with pending values (each once)."""
        self._gapped: list[_Histogram] = []
        """The series with pending chunk gaps (each once)."""
        self._marked: list[_Histogram] = []
        """The series that recorded an exemplar this interval (each once)."""
        self._pending = 0
        """Histogram values pending, in all (bounded by :data:`PENDING_MAX`)."""
        self._ended: deque[_Ended] = deque()
        """Ended records, written at the next collection (bounded by :data:`ENDED_MAX`); appending to a
        ``deque`` is atomic: an end takes no lock."""
        self.drain: Callable[[], None] | None = None
        """Called first at each collection (given by the latest exporter made with one)."""
        self.collected = False
        """A collection has run (a reader exists): ended records and histogram values wait for the next one
        from now on; until then they are written at once and nothing is held."""
        self.bulk = OTEL_BULK.open()
        """Histogram values go past ``record()`` (:mod:`~llmtap._exporters._otel_bulk`): decided here, once,
        from the installed SDK's version; otherwise through ``record()``."""
        self._made: dict[str, Any] = {}
        self._made_lock = threading.Lock()
        register_otel(meter, namespace)  # llmtap.internal_errors, llmtap.label_overflows (observable counters)
        # An observable instrument's callback runs at every collection, on the reader's thread, before the
        # collection's snapshot; this one yields nothing, so nothing is exported under its name.
        meter.create_observable_gauge("llmtap.internal.gap_flush", callbacks=[self._flush])
        os.register_at_fork(after_in_child=functools.partial(_forget_in_child, weakref.ref(self)))

    def instrument(self, spec: Instrument) -> Any:
        with self._made_lock:
            made = self._made.get(spec.key)
            if made is None:
                made = self._made[spec.key] = self._make(spec)
            return made

    def _make(self, spec: Instrument) -> Any:
        meter, namespace = self.meter, self.namespace
        name = spec.name if spec.semconv or not namespace else f"{namespace}.{spec.name}"
        unit, doc = spec.unit, spec.description
        if spec.kind == HISTOGRAM:
            bounds = _BOUNDS[spec.key]
            return meter.create_histogram(name, unit=unit, description=doc, explicit_bucket_boundaries_advisory=bounds)
        callbacks = [self._observe(spec.key)]
        if spec.kind == COUNTER:
            return meter.create_observable_counter(name, callbacks, unit=unit, description=doc)
        if spec.kind == UP_DOWN:
            return meter.create_observable_up_down_counter(name, callbacks, unit=unit, description=doc)
        if spec.kind != GAUGE:
            raise ValueError(f"unknown instrument kind {spec.kind!r} of {spec.name}")
        return meter.create_observable_gauge(name, callbacks, unit=unit, description=doc)

    def _observe(self, key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        family = self.totals[key]
        gauge = key in _GAUGE_KEYS

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if gauge:
                self._merge_limits()
            with self.lock:
                series = [(attrs, value) for attrs, value in family.values()]
            return [Observation(value, attrs) for attrs, value in series]

        return observe

    def _merge_limits(self) -> None:
        """At collection: the rate limits of the records kept since the last one, into the gauges."""
        with self.lock:
            pending, self.pending_limits = self.pending_limits, {}
        for key, (exporter, record) in pending.items():
            exporter._write(key, exporter.mapping.rate_limits(record), None)

    def defer(self, histogram: _Histogram, value: float, sampled: bool) -> bool | None:
        """Under the lock: keep ``value`` for the next collection (None), or say it is recorded now,
        with the attempt's span (True) or without (False).

        Now are: a series' first value (the SDK starts the series, and its start time, with it); the
        first value of an interval, per bucket of an exemplar-carrying series, that has a sampled span
        (the SDK's reservoir keeps one exemplar per bucket; recorded now, it keeps its trace, value and
        time); and every value once :data:`PENDING_MAX` are pending."""
        first = not histogram.started
        histogram.started = True
        if sampled and histogram.exemplar:
            bucket = bisect.bisect_left(histogram.bounds, value)  # the SDK's bucket of value
            marked = histogram.marked
            if bucket not in marked:
                if not marked:
                    self._marked.append(histogram)
                marked.add(bucket)
                return True
        if first or not self.collected or self._pending >= PENDING_MAX:
            return False
        if not histogram.values:
            self._queued.append(histogram)
        histogram.values.append(value)
        self._pending += 1
        return None

    def add_gaps(self, histogram: _Histogram, gaps: Buckets) -> None:
        """Under the lock: merge an attempt's pre-bucketed gaps into the pending ones: O(buckets), no
        per-chunk work."""
        pending = histogram.gaps
        if pending is None:
            histogram.gaps = [list(gaps.counts), gaps.sum, gaps.max]
            self._gapped.append(histogram)
            return
        merged = pending[0]
        for i, count in enumerate(gaps.counts):
            merged[i] += count
        pending[1] += gaps.sum
        if gaps.max > pending[2]:
            pending[2] = gaps.max

    def ended(self, ended: _Ended) -> None:
        """Queue an ended record for the next collection (no lock); past :data:`ENDED_MAX`, write the oldest
        :data:`_WRITE_BATCH` first."""
        queue = self._ended
        if not self.collected:
            _write_ended(ended)
            return
        if len(queue) >= ENDED_MAX:
            for _ in range(_WRITE_BATCH):  # in one batch, as a collection writes: the ends that follow only queue
                try:
                    oldest = queue.popleft()
                except IndexError:  # a collection emptied it meanwhile
                    break
                _write_ended(oldest)
        queue.append(ended)

    def _flush(self, options: CallbackOptions) -> Iterable[Observation]:
        """At collection, before its snapshot (this instrument's callback is the first registered): write the
        ended records, oldest first (counters and gauges folded, so the observable instruments' callbacks
        that follow report them); record the pending histogram values, and the pending gaps one value per gap
        (see :func:`spread`); a new exemplar interval begins. The attempts handed off to be ended later
        end first (:attr:`drain`), so they are written in this collection."""
        self.collected = True  # ends and values wait for the collections from now on
        drain = self.drain
        if drain is not None:
            try:
                drain()
            except Exception as exc:  # never into the collection
                internal_error("sink", "the %s exporter failed: %r", OtelMetricsExporter.name, exc)
        queue = self._ended
        for _ in range(len(queue)):  # what ended before the collection: later ends wait for the next one
            try:
                ended = queue.popleft()
            except IndexError:  # an end past ENDED_MAX took it
                break
            _write_ended(ended)
        with self.lock:
            values = [(h.instrument, h.attributes, h.values) for h in self._queued]
            gaps = [(h.instrument, h.attributes, h.gaps) for h in self._gapped if h.gaps is not None]
            for h in self._queued:
                h.values = array("d")
            for h in self._gapped:
                h.gaps = None
            for h in self._marked:
                h.marked = set()
            self._queued, self._gapped, self._marked, self._pending = [], [], [], 0
        if self.bulk:
            many, counted = _otel_bulk.record_many, _otel_bulk.record_counted
        else:
            many, counted = _otel_bulk.through_record_many, _otel_bulk.through_record_counted
        for instrument, attrs, pending in values:
            many(instrument, attrs, pending, _NO_SPAN)
        for instrument, attrs, (counts, total, largest) in gaps:
            counted(instrument, attrs, spread(counts, total, _GAP_BOUNDS, largest), _NO_SPAN)
        return ()

    def _forget(self) -> None:
        """In a forked child: the pending values are the parent's (it reports them), and the lock may
        be held by a thread the child does not have."""
        self.lock = threading.Lock()
        self._ended.clear()
        for h in (*self._queued, *self._gapped, *self._marked):
            h.values, h.gaps, h.marked = array("d"), None, set()
        self._queued, self._gapped, self._marked, self._pending = [], [], [], 0


def _write_ended(ended: _Ended) -> None:
    """Write one ended record (a failure is counted as the request path counts it, and the rest go on)."""
    exporter, record, in_flight = ended
    try:
        exporter._write_ended(record, in_flight)
    except Exception as exc:
        internal_error("sink", "the %s exporter failed: %r", exporter.name, exc)


def _forget_in_child(ref: weakref.ref[_Shared]) -> None:
    shared = ref()
    if shared is not None:
        shared._forget()


_shared_lock = threading.Lock()
_shared_by_provider: weakref.WeakKeyDictionary[Any, dict[str, _Shared]] = weakref.WeakKeyDictionary()


def _shared(meter_provider: MeterProvider | None, namespace: str) -> _Shared:
    """The instruments of ``meter_provider`` (default: the global one) under ``namespace``."""
    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    _warn_if_old(provider)  # outside the lock: a log handler may do anything
    with _shared_lock:
        by_namespace = _shared_by_provider.setdefault(provider, {})
        shared = by_namespace.get(namespace)
        if shared is None:
            _otel_fork.guard(provider)  # no fork inside its collection or export (gunicorn --preload)
            meter = metrics.get_meter("llmtap", __version__, meter_provider=provider)
            shared = by_namespace[namespace] = _Shared(meter, namespace)
        return shared


def _warn_if_old(provider: Any) -> None:
    """One warning per process if ``provider`` is the OpenTelemetry SDK's and older than :data:`MIN_SDK`
    (called as ``instrument()`` sets the exporter up, never on a request)."""
    if getattr(provider, "_measurement_consumer", None) is None:  # not the SDK's meter provider
        return
    try:
        from opentelemetry.sdk.version import __version__ as sdk_version
    except ImportError:
        return
    numbers: list[int] = []
    for part in sdk_version.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        numbers.append(int(digits or 0))
    if tuple(numbers) < MIN_SDK:
        log_once(
            "old-otel-sdk",
            "opentelemetry-sdk %s is older than %s, which llmtap's OpenTelemetry metrics need: before "
            "1.32 its OTLP exporter gives llmtap's histograms wrong buckets (its default ones, for milliseconds), and "
            "before 1.44 a worker forked while its parent exported can export no metric; upgrade it: "
            "pip install 'opentelemetry-sdk>=%s'",
            sdk_version,
            ".".join(map(str, MIN_SDK)),
            ".".join(map(str, MIN_SDK)),
        )
