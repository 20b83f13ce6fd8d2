"""Many values of one histogram series into the OpenTelemetry SDK at once, at collection.

Why llmtap reaches under the SDK's API here: ``Histogram.record()`` costs ~6.6 µs per value in the OTel
SDK 1.45 (a warm loop, six attributes), of which aggregating the value is 0.4 µs. The rest is spent on the
attributes, every time: the ``Measurement`` cleans them (2.5 µs), each view copies and hashes them into the
series' key (2.2 µs), and the exemplar filter and the reader loop run per value. llmtap's queued values
arrive per series with one attribute dict built once (:class:`~llmtap._exporters.otel_metrics._Histogram`),
so :func:`record_many` finds the series' aggregation in each reader's view once per collection, the same
way the SDK does, and hands it each value (~0.6 µs): a request's four histogram values went from ~26 µs to
~3 µs (``benchmarks/otel_floor.py``).

What the SDK would do differently is kept exactly or left to it: the value checks (a negative or non-finite
value goes through ``record()``, which drops it with the SDK's warning), a view's attribute keys, a disabled
meter, the cardinality limit (a series the SDK does not hold yet, or that overflowed, is recorded through
``record()`` first, then looked up again), delta temporality (the lookup and the values under the view's
lock, as the SDK holds it there, so a collection on another reader's thread does not swap the aggregations
between them). The values carry no span, so the SDK's exemplar filters ``trace_based`` and ``always_off``
would sample none; with any other filter, with an SDK laid out otherwise (another version, a proxy
instrument, another measurement consumer) or if anything here fails, every value goes through
``record()``: slower, never different.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from time import time_ns
from typing import Any

from opentelemetry.context import Context

from llmtap._log import internal_error, logger

__all__ = ["record_many"]


def record_many(instrument: Any, attributes: dict[str, Any], values: Sequence[float], context: Context) -> None:
    """Record ``values`` into ``instrument`` with ``attributes`` and no span (``context``: one without),
    as ``instrument.record`` would, one by one."""
    if len(values) > 1 and _valid(values):  # else: record() warns and drops what it drops
        try:
            targets = _targets(instrument, attributes)
        except Exception as exc:  # an SDK laid out otherwise than this module reads it; nothing recorded yet
            _disable(exc)
            targets = None
        if targets is not None:
            _aggregate(instrument, targets, values, context)
            return
    record = instrument.record
    for value in values:
        record(value, attributes, context)


def _valid(values: Sequence[float]) -> bool:
    """Every value one ``record()`` keeps: finite (a NaN or infinity makes the sum so, or fails it) and not
    negative (C-speed checks: the values come by the thousand)."""
    try:
        return math.isfinite(math.fsum(values)) and min(values) >= 0
    except (ValueError, OverflowError):  # inf + -inf; a sum past the float range
        return False


_Target = tuple[Any, Any, dict[str, Any]]
"""A view's match of the instrument, the series' key in it, and the attributes that view keeps."""

_SDK = tuple[Any, Any, tuple[type, ...], Any]
_sdk: _SDK | None = None
"""The SDK's histogram and measurement consumer classes, the exemplar filters that sample nothing without
a span, and its attribute hash; ``None`` until loaded."""
_disabled = False


def _targets(instrument: Any, attributes: dict[str, Any]) -> list[_Target] | None:
    """Each view's match of ``instrument``, with the series' key and attributes in it, the series made
    there as the SDK makes it (cardinality limit included); ``None``: through ``record()``."""
    sdk = _load()
    if sdk is None:
        return None
    histogram, consumer_class, filters, hash_attributes = sdk
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
    """What an aggregation reads of a ``Measurement`` (its value; the rest for an exemplar, which it is not
    asked to sample, so it keeps none), without the ``Measurement``'s cleaning of attributes it does not read:
    one per batch, its value set before each ``aggregate``."""

    __slots__ = ("attributes", "context", "instrument", "time_unix_nano", "value")

    def __init__(self, value: float, time_unix_nano: int, instrument: Any, context: Context) -> None:
        self.value = value
        self.time_unix_nano = time_unix_nano
        self.instrument = instrument
        self.context = context
        self.attributes = None


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
            from opentelemetry.sdk.metrics._internal.exemplar.exemplar_filter import (
                AlwaysOffExemplarFilter,
                TraceBasedExemplarFilter,
            )
            from opentelemetry.sdk.metrics._internal.instrument import Histogram
            from opentelemetry.sdk.metrics._internal.measurement_consumer import SynchronousMeasurementConsumer
        except ImportError as exc:  # an SDK before 1.4x (or after): record(), as documented, nothing to count
            _disabled = True
            logger.debug("llmtap: OpenTelemetry histogram values go through record() (%r)", exc)
            return None
        if not hasattr(_ViewInstrumentMatch, "_get_or_create_aggregation"):
            _disabled = True
            logger.debug("llmtap: OpenTelemetry histogram values go through record() (an SDK before 1.4x)")
            return None
        filters = (TraceBasedExemplarFilter, AlwaysOffExemplarFilter)
        _sdk = (Histogram, SynchronousMeasurementConsumer, filters, _hash_attributes)
    return _sdk


def _disable(exc: BaseException) -> None:
    """Every value through ``record()`` from now on; counted and said once (an SDK that has what
    :func:`_load` looks for, laid out otherwise)."""
    global _disabled
    if not _disabled:
        _disabled = True
        internal_error("sink", "llmtap: OpenTelemetry histogram values go through record() from now on: %r", exc)
