"""Many values of one histogram series into the OpenTelemetry SDK at once, at collection.

Why llmtap reaches under the SDK's API here: ``Histogram.record()`` costs ~6.6 µs per value in the OTel
SDK 1.45 (a warm loop, six attributes), of which aggregating the value is 0.4 µs. The rest is spent on the
attributes, every time: the ``Measurement`` cleans them (2.5 µs), each view copies and hashes them into the
series' key (2.2 µs), and the exemplar filter and the reader loop run per value. llmtap's queued values
arrive per series with one attribute dict built once (:class:`~llmtap._exporters._otel_aggregation.Histogram`),
so :func:`record_many` finds the series' aggregation in each reader's view once per collection, the same
way the SDK does, and hands it each value (~0.6 µs): a request's four histogram values went from ~26 µs to
~3 µs.

A chunk-gap histogram's values come pre-bucketed from the core (one count per bucket and attempt), so a
collection has a few distinct values to hand over, each many times (:func:`record_counted`): on the SDK's
explicit-bucket aggregation each is added once with its count (its bucket count, min and max; the sum still
value by value, so it is the same float), which took ~4k instructions an event off a stream on the OTLP path
(``benchmarks/instructions.py``); on any other aggregation (an exponential view ...) value by value.

A value recorded at once with its attempt's span, for an exemplar (:func:`record_one`), takes the same way:
the SDK's exemplar filter is asked as ``record()`` asks it, and the aggregation samples the exemplar from the
same fields (value, time, attributes, context). The series' views and key are found once per series and
kept (:func:`_cached_targets`).

What the SDK would do differently is kept exactly or left to it: the value checks (a negative or non-finite
value goes through ``record()``, which drops it with the SDK's warning), a view's attribute keys, a disabled
meter, the cardinality limit (a series the SDK does not hold yet, or that overflowed, is recorded through
``record()`` first, then looked up again), delta temporality (the lookup and the values under the view's
lock, as the SDK holds it there, so a collection on another reader's thread does not swap the aggregations
between them). Values without a span are sampled by neither of the SDK's exemplar filters ``trace_based``
and ``always_off``, and a value with one is offered to the series' reservoir as the filter decides
(:func:`record_one`); with any other filter, with an SDK laid out otherwise (another version, a proxy
instrument, another measurement consumer) or if anything here fails, every value goes through
``record()``: slower, never different.

Two guards: the exporter takes this path only on the SDK versions it is tested on
(:data:`llmtap._fences.OTEL_BULK`, asked once when the exporter is set up; elsewhere it calls
:func:`through_record_many` and :func:`through_record_counted`, the public API), and inside that range this
module still checks the layout it reads (:func:`_load`, :func:`_targets`, :func:`_counts_of`).
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_left
from collections.abc import Sequence
from time import time_ns
from typing import Any

from opentelemetry.context import Context

from llmtap._log import internal_error, logger

__all__ = ["record_counted", "record_many", "record_one", "through_record_counted", "through_record_many"]


def record_many(instrument: Any, attributes: dict[str, Any], values: Sequence[float], context: Context) -> None:
    """Record ``values`` into ``instrument`` with ``attributes`` and no span (``context``: one without),
    as ``instrument.record`` would, one by one."""
    targets = _lookup(instrument, attributes, values)
    if targets is not None:
        _aggregate(instrument, targets, values, context)
        return
    through_record_many(instrument, attributes, values, context)


def through_record_many(instrument: Any, attributes: dict[str, Any], values: Sequence[float], context: Context) -> None:
    """:func:`record_many` through the public API: ``instrument.record`` per value."""
    record = instrument.record
    for value in values:
        record(value, attributes, context)


def record_one(instrument: Any, attributes: dict[str, Any], value: float, context: Context) -> None:
    """Record ``value`` into ``instrument`` with ``attributes`` and ``context`` (an attempt's span, for an
    exemplar), as ``instrument.record`` would: the SDK's exemplar filter decides on ``context`` as
    ``record()`` has it decide, and the series' aggregation samples the exemplar from the same fields."""
    targets = _lookup(instrument, attributes, (value,))
    if targets is None:
        instrument.record(value, attributes, context)
        return
    try:
        now = time_ns()
        sample = instrument._measurement_consumer._sdk_config.exemplar_filter.should_sample(
            value, now, attributes, context
        )
        measurement = _Value(value, now, instrument, context)
        measurement.attributes = attributes  # an exemplar keeps the ones its series drops
        for match, key, kept in targets:
            with match._lock:
                match._get_or_create_aggregation(key, kept).aggregate(measurement, sample)
    except Exception as exc:  # not again through record(): it may be in already
        _disable(exc)


def record_counted(
    instrument: Any, attributes: dict[str, Any], counted: Sequence[tuple[float, int]], context: Context
) -> None:
    """Record each ``(value, count)``'s value ``count`` times, as :func:`record_many` records the values one by
    one, in that order (a chunk-gap histogram's values: a few distinct ones, each many times). Where a series'
    aggregation is the SDK's explicit-bucket histogram, read as :func:`_counts_of` reads it, each value is
    added once with its count, in O(distinct values); anywhere else, value by value."""
    targets = _lookup(instrument, attributes, [value for value, count in counted if count > 0])
    if targets is not None:
        _aggregate_counted(instrument, targets, counted, context)
        return
    through_record_counted(instrument, attributes, counted, context)


def through_record_counted(
    instrument: Any, attributes: dict[str, Any], counted: Sequence[tuple[float, int]], context: Context
) -> None:
    """:func:`record_counted` through the public API: ``instrument.record`` per value, ``count`` times each."""
    record = instrument.record
    for value, count in counted:
        for _ in range(count):
            record(value, attributes, context)


def _aggregate_counted(
    instrument: Any, targets: list[_Target], counted: Sequence[tuple[float, int]], context: Context
) -> None:
    """:func:`_aggregate` for counted values: an explicit-bucket aggregation takes the counts, any other each
    value ``count`` times."""
    measurement = _Value(0.0, time_ns(), instrument, context)
    try:
        for match, key, kept in targets:
            with match._lock:
                aggregation = match._get_or_create_aggregation(key, kept)
                if _counts_of(aggregation):
                    _add_counted(aggregation, counted)
                    continue
                aggregate = aggregation.aggregate
                for value, count in counted:
                    measurement.value = value
                    for _ in range(count):
                        aggregate(measurement, False)
    except Exception as exc:
        _disable(exc)


def _counts_of(aggregation: Any) -> bool:
    """``aggregation`` is the SDK's explicit-bucket histogram as 1.4x lays it out: bucket counts in ``_value``
    (``None`` until the first value), ``_sum``, ``_min``, ``_max``, ``_record_min_max``, ``_boundaries``,
    guarded by ``_lock``; its ``aggregate`` does nothing else for a value that samples no exemplar."""
    held: dict[str, Any] = vars(aggregation)
    if _sdk is None or type(aggregation) is not _sdk[4] or not held.keys() >= _BUCKET_FIELDS:
        return False
    buckets: list[int] | None = held["_value"]
    return buckets is None or len(buckets) == len(held["_boundaries"]) + 1


_BUCKET_FIELDS = frozenset({"_lock", "_value", "_sum", "_min", "_max", "_record_min_max", "_boundaries"})


def _add_counted(aggregation: Any, counted: Sequence[tuple[float, int]]) -> None:
    """What ``aggregate`` does for each value, ``count`` times (the sum added value by value, in the same
    order, so it is the same float), the bucket counts at once."""
    with aggregation._lock:
        buckets = aggregation._value
        if buckets is None:
            buckets = aggregation._value = [0] * (len(aggregation._boundaries) + 1)
        bounds = aggregation._boundaries
        total = aggregation._sum
        low, high = aggregation._min, aggregation._max
        for value, count in counted:
            if count <= 0:
                continue
            for _ in range(count):
                total += value
            buckets[bisect_left(bounds, value)] += count
            low = min(low, value)
            high = max(high, value)
        aggregation._sum = total
        if aggregation._record_min_max:
            aggregation._min, aggregation._max = low, high


def _lookup(instrument: Any, attributes: dict[str, Any], values: Sequence[float]) -> list[_Target] | None:
    """Where ``values`` go past ``record()``: the series' targets, if ``record()`` would keep every value and
    the SDK is laid out as this module reads it; ``None``: through ``record()`` (which warns and drops what
    it drops; no value is recorded yet either way)."""
    if not values or not _valid(values):
        return None
    try:
        return _cached_targets(instrument, attributes)
    except Exception as exc:  # an SDK laid out otherwise than this module reads it
        _disable(exc)
        return None


def _valid(values: Sequence[float]) -> bool:
    """Every value one ``record()`` keeps: finite (a NaN or infinity makes the sum so, or fails it) and not
    negative (C-speed checks: the values come by the thousand)."""
    try:
        return math.isfinite(math.fsum(values)) and min(values) >= 0
    except (ValueError, OverflowError):  # inf + -inf; a sum past the float range
        return False


_Target = tuple[Any, Any, dict[str, Any]]
"""A view's match of the instrument, the series' key in it, and the attributes that view keeps."""

_SDK = tuple[Any, Any, tuple[type, ...], Any, type]
_sdk: _SDK | None = None
"""The SDK's histogram and measurement consumer classes, the exemplar filters that sample nothing without
a span, its attribute hash and its explicit-bucket histogram aggregation; ``None`` until loaded."""
_disabled = False


_TARGETS_KEPT = 4096
"""Series whose targets are kept per instrument (llmtap's series are bounded far below this)."""
_kept: weakref.WeakKeyDictionary[Any, dict[int, tuple[dict[str, Any], list[_Target]]]] = weakref.WeakKeyDictionary()
"""Instrument -> ``id(attributes)`` -> (those attributes, kept alive so the id stays theirs; their targets):
finding them is most of a value's cost (~70k instructions of ~76k for one value), and they do not change
while the instrument lives (a meter provider's readers and views are fixed when it is built; the
aggregation itself is looked up per batch, under the view's lock)."""


def _cached_targets(instrument: Any, attributes: dict[str, Any]) -> list[_Target] | None:
    """:func:`_targets`, found once per series (``attributes``: the series' one dict, built once)."""
    if _disabled:
        return None
    try:
        per = _kept.get(instrument)
    except TypeError:  # an instrument that takes no weak reference: looked up every time
        return _targets(instrument, attributes)
    if per is not None:
        kept = per.get(id(attributes))
        if kept is not None and kept[0] is attributes:
            return kept[1] if instrument._is_enabled() else None  # a meter disabled since: record() says so
    targets = _targets(instrument, attributes)
    if targets is not None:
        if per is None:
            per = _kept[instrument] = {}
        if len(per) < _TARGETS_KEPT:
            per[id(attributes)] = (attributes, targets)
    return targets


def _targets(instrument: Any, attributes: dict[str, Any]) -> list[_Target] | None:
    """Each view's match of ``instrument``, with the series' key and attributes in it, the series made
    there as the SDK makes it (cardinality limit included); ``None``: through ``record()``."""
    sdk = _load()
    if sdk is None:
        return None
    histogram, consumer_class, filters, hash_attributes, _ = sdk
    if not isinstance(instrument, histogram) or not instrument._is_enabled():  # a proxy, a disabled meter
        return None
    consumer = instrument._measurement_consumer
    if type(consumer) is not consumer_class or type(consumer._sdk_config.exemplar_filter) not in filters:
        return None
    targets: list[_Target] = []
    for storage in consumer._reader_storages.values():
        for match in storage._get_or_init_view_instrument_match(instrument):
            keys = match._view._attribute_keys
            kept = dict(attributes) if keys is None else {k: v for k, v in attributes.items() if k in keys}
            key = hash_attributes(kept)
            with match._lock:  # reads every internal _aggregate uses, before any value is recorded
                aggregation = match._get_or_create_aggregation(key, kept)
            if not callable(getattr(aggregation, "aggregate", None)):
                return None
            targets.append((match, key, kept))
    return targets


def _aggregate(instrument: Any, targets: list[_Target], values: Sequence[float], context: Context) -> None:
    """Hand ``values`` to the series' aggregation in each view: under the view's lock, which the SDK holds
    there for a delta reader (whose collection, on another reader's thread, swaps the aggregations)."""
    measurement = _Value(0.0, time_ns(), instrument, context)  # one for all: not kept (no exemplar asked)
    try:
        for match, key, kept in targets:
            with match._lock:
                aggregate = match._get_or_create_aggregation(key, kept).aggregate
                for value in values:
                    measurement.value = value
                    aggregate(measurement, False)
    except Exception as exc:  # not again through record(): some values may be in already
        _disable(exc)


class _Value:
    """What an aggregation reads of a ``Measurement`` (its value; the rest for an exemplar: ``attributes`` set
    where one may be sampled, :func:`record_one`), without the ``Measurement``'s cleaning of attributes it
    does not read: one per batch, its value set before each ``aggregate``."""

    __slots__ = ("attributes", "context", "instrument", "time_unix_nano", "value")

    def __init__(self, value: float, time_unix_nano: int, instrument: Any, context: Context) -> None:
        self.value = value
        self.time_unix_nano = time_unix_nano
        self.instrument = instrument
        self.context = context
        self.attributes: dict[str, Any] | None = None


def _load() -> _SDK | None:
    global _sdk, _disabled
    if _disabled:
        return None
    if _sdk is None:
        try:
            from opentelemetry.sdk.metrics._internal._view_instrument_match import (
                _hash_attributes,
                _ViewInstrumentMatch,
            )
            from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
            from opentelemetry.sdk.metrics._internal.exemplar.exemplar_filter import (
                AlwaysOffExemplarFilter,
                TraceBasedExemplarFilter,
            )
            from opentelemetry.sdk.metrics._internal.instrument import Histogram
            from opentelemetry.sdk.metrics._internal.measurement_consumer import SynchronousMeasurementConsumer
        except ImportError as exc:  # an SDK before 1.4x (or after): record(), as documented, nothing to count
            _disabled = True
            logger.debug("OpenTelemetry histogram values go through record() (%r)", exc)
            return None
        if not hasattr(_ViewInstrumentMatch, "_get_or_create_aggregation"):
            _disabled = True
            logger.debug("OpenTelemetry histogram values go through record() (an SDK before 1.4x)")
            return None
        filters = (TraceBasedExemplarFilter, AlwaysOffExemplarFilter)
        _sdk = (
            Histogram,
            SynchronousMeasurementConsumer,
            filters,
            _hash_attributes,
            _ExplicitBucketHistogramAggregation,
        )
    return _sdk


def _disable(exc: BaseException) -> None:
    """Every value through ``record()`` from now on; counted and said once (an SDK that has what
    :func:`_load` looks for, laid out otherwise)."""
    global _disabled
    if not _disabled:
        _disabled = True
        internal_error("sink", "OpenTelemetry histogram values go through record() from now on: %r", exc)
