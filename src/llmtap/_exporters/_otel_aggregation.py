"""The OpenTelemetry metrics exporter's aggregation: llmtap's instruments on one meter provider, created once
(:class:`Shared`), the totals their callbacks report, and the queue of ended records and pending histogram
values written at each collection.

Writes are cheap, reads expensive: an end only appends its record to a queue (no lock); the next collection,
on the reader's thread, writes it, oldest first, in a callback the SDK runs before the other instruments'
callbacks and before the collection's snapshot (:meth:`Shared._flush`), so each record lands, exactly once,
in the interval it ended in. Records (and histogram values) wait only once a collection has run; past
:data:`ENDED_MAX` queued records an end writes the oldest itself; past :data:`PENDING_MAX` pending values they
are recorded at once. What a record writes is the exporter's (``otel_metrics.py``, a :class:`Writer` here).
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
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from llmtap._core.gaps import spread
from llmtap._core.metrics import COUNTER, GAUGE, HISTOGRAM, INSTRUMENTS, UP_DOWN, Instrument
from llmtap._exporters import _otel_bulk, _otel_fork
from llmtap._exporters._health import register_otel
from llmtap._fences import OTEL_BULK
from llmtap._log import internal_error, log_once
from llmtap._version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from llmtap._core.mapping import Buckets, Mapping, Measurement
    from llmtap._core.record import AttemptRecord, CallRecord

__all__ = [
    "BOUNDS",
    "ENDED_MAX",
    "GAUGE_KEYS",
    "MIN_SDK",
    "NO_SPAN",
    "PENDING_MAX",
    "Histogram",
    "Shared",
    "Writer",
    "shared",
]

MIN_SDK = (1, 44, 0)
"""The oldest OpenTelemetry SDK llmtap's metrics are tested on and right on (the ``otel`` extra's floor).
Before 1.32 the SDK's OTLP exporter gives every histogram the SDK's default buckets (0, 5, 10 ... 10,000:
milliseconds) or the first histogram's advisory buckets, not each histogram's own (llmtap's are seconds and
tokens); before 1.44 the meter provider keeps its locks across a fork, so a worker forked while its parent
exported (gunicorn ``--preload``) can export no metric, llmtap's fork guard (``_otel_fork``) or not."""

Attributes = dict[str, str | int]
_Series = tuple[str | int, ...]


class Writer(Protocol):
    """What the aggregation asks of the exporter that queued a record: what it writes (at collection)."""

    name: str
    mapping: Mapping

    def write(self, key: tuple[str, ...], measurements: Iterable[Measurement], span: SpanContext | None) -> None:
        """Fold ``measurements`` of the base label set ``key``."""
        ...

    def write_ended(self, record: AttemptRecord | CallRecord, in_flight: bool | None) -> None:
        """What an ended record writes."""
        ...


NO_SPAN: Context = trace.set_span_in_context(trace.INVALID_SPAN, Context())
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

Ended = tuple["Writer", "AttemptRecord | CallRecord", "bool | None"]
"""An ended record, its exporter, and whether its start counted a stream in flight (``None``: a call's)."""


class Histogram:
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


_GAP_BOUNDS = next(i.buckets for i in INSTRUMENTS if i.key == "gap")
GAUGE_KEYS = frozenset(i.key for i in INSTRUMENTS if i.kind == GAUGE)
BOUNDS = {i.key: [float(b) for b in i.buckets] for i in INSTRUMENTS if i.kind == HISTOGRAM}
"""Each histogram's bucket bounds, as advised to the SDK (a view may set others)."""


class Shared:
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
        self.pending_limits: dict[tuple[str, ...], tuple[Writer, AttemptRecord]] = {}
        """Base label set -> the last record with rate limits (and its exporter), converted at collection."""
        self._queued: list[Histogram] = []
        """The series with pending values (each once)."""
        self._gapped: list[Histogram] = []
        """The series with pending chunk gaps (each once)."""
        self._marked: list[Histogram] = []
        """The series that recorded an exemplar this interval (each once)."""
        self._pending = 0
        """Histogram values pending, in all (bounded by :data:`PENDING_MAX`)."""
        self._ended: deque[Ended] = deque()
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
            bounds = BOUNDS[spec.key]
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
        gauge = key in GAUGE_KEYS

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
            exporter.write(key, exporter.mapping.rate_limits(record), None)

    def defer(self, histogram: Histogram, value: float, sampled: bool) -> bool | None:
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

    def add_gaps(self, histogram: Histogram, gaps: Buckets) -> None:
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

    def ended(self, ended: Ended) -> None:
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
                internal_error("sink", "the %s exporter failed: %r", "otel_metrics", exc)
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
            many(instrument, attrs, pending, NO_SPAN)
        for instrument, attrs, (counts, total, largest) in gaps:
            counted(instrument, attrs, spread(counts, total, _GAP_BOUNDS, largest), NO_SPAN)
        return ()

    def _forget(self) -> None:
        """In a forked child: the pending values are the parent's (it reports them), and the lock may
        be held by a thread the child does not have."""
        self.lock = threading.Lock()
        self._ended.clear()
        for h in (*self._queued, *self._gapped, *self._marked):
            h.values, h.gaps, h.marked = array("d"), None, set()
        self._queued, self._gapped, self._marked, self._pending = [], [], [], 0


def _write_ended(ended: Ended) -> None:
    """Write one ended record (a failure is counted as the request path counts it, and the rest go on)."""
    exporter, record, in_flight = ended
    try:
        exporter.write_ended(record, in_flight)
    except Exception as exc:
        internal_error("sink", "the %s exporter failed: %r", exporter.name, exc)


def _forget_in_child(ref: weakref.ref[Shared]) -> None:
    shared = ref()
    if shared is not None:
        shared._forget()


_shared_lock = threading.Lock()
_shared_by_provider: weakref.WeakKeyDictionary[Any, dict[str, Shared]] = weakref.WeakKeyDictionary()


def shared(meter_provider: MeterProvider | None, namespace: str) -> Shared:
    """The instruments of ``meter_provider`` (default: the global one) under ``namespace``."""
    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    _warn_if_old(provider)  # outside the lock: a log handler may do anything
    with _shared_lock:
        by_namespace = _shared_by_provider.setdefault(provider, {})
        shared = by_namespace.get(namespace)
        if shared is None:
            _otel_fork.guard(provider)  # no fork inside its collection or export (gunicorn --preload)
            meter = metrics.get_meter("llmtap", __version__, meter_provider=provider)
            shared = by_namespace[namespace] = Shared(meter, namespace)
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
