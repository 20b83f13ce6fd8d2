"""llmtap._exporters._otel_bulk: values handed to the OpenTelemetry SDK's aggregations past ``record()`` land
exactly as ``record()`` would land them, on every reader layout; and where the fast path does not apply, every
value goes through ``record()``.

Each case records the same values into two real SDK meter providers built alike: one through
:func:`record_many`, one through ``Histogram.record`` one by one, and compares what a collection exports.
The fast path being taken (or not) is checked by counting ``record()`` calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, MetricReader
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)

from llmtap import _log
from llmtap._exporters import _otel_bulk
from llmtap._exporters._otel_bulk import record_counted, record_many, record_one

pytestmark = pytest.mark.current_otel  # the SDK 1.44+ internals the fast path learns (make compat leaves it out)

NO_SPAN = trace.set_span_in_context(trace.INVALID_SPAN, Context())
ATTRS: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic", "server.port": 443}
VALUES = [0.05, 0.3, 0.3, 1.7, 4.0, 12.5, 0.0]
BOUNDS = [0.1, 0.5, 1.0, 2.0, 5.0, 10.0]

Setup = Callable[[], tuple[MeterProvider, list[InMemoryMetricReader]]]


def _one_reader(**reader: Any) -> Setup:
    def make() -> tuple[MeterProvider, list[InMemoryMetricReader]]:
        r = InMemoryMetricReader(**reader)
        return MeterProvider(metric_readers=[r]), [r]

    return make


def _two_readers() -> tuple[MeterProvider, list[InMemoryMetricReader]]:
    cumulative, delta = InMemoryMetricReader(), InMemoryMetricReader(_delta())
    return MeterProvider(metric_readers=[cumulative, delta]), [cumulative, delta]


def _with_views(*views: View) -> Setup:
    def make() -> tuple[MeterProvider, list[InMemoryMetricReader]]:
        r = InMemoryMetricReader()
        return MeterProvider(metric_readers=[r], views=list(views)), [r]

    return make


def _delta() -> dict[type, AggregationTemporality]:
    return {Histogram: AggregationTemporality.DELTA}


SETUPS: dict[str, Setup] = {
    "cumulative": _one_reader(),
    "delta": _one_reader(preferred_temporality=_delta()),
    "two readers": _two_readers,
    "a view keeping some attributes": _with_views(View(instrument_name="h", attribute_keys={"server.port"})),
    "a view with other bounds, no min and max": _with_views(
        View(instrument_name="h", aggregation=ExplicitBucketHistogramAggregation([0.2, 3.0], record_min_max=False))
    ),
    "exponential, the reader's preferred aggregation": _one_reader(
        preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()}
    ),
    "two views, one exponential": _with_views(
        View(instrument_name="h"),
        View(instrument_name="h", name="h.exp", aggregation=ExponentialBucketHistogramAggregation()),
    ),
}


def _exported(readers: list[InMemoryMetricReader]) -> list[dict[tuple[str, frozenset[Any]], tuple[Any, ...]]]:
    """Per reader: (metric, attributes) -> what its data point says, times left out."""
    out = []
    for reader in readers:
        data = reader.get_metrics_data()
        points: dict[tuple[str, frozenset[Any]], tuple[Any, ...]] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        p = cast(Any, p)
                        shape = (
                            tuple(p.bucket_counts)
                            if hasattr(p, "bucket_counts")
                            else (p.scale, p.positive.offset, tuple(p.positive.bucket_counts), p.zero_count)
                        )
                        points[metric.name, frozenset((p.attributes or {}).items())] = (
                            p.count, round(p.sum, 9), p.min, p.max, shape
                        )  # fmt: skip
        out.append(points)
    return out


class _Pair:
    """Two providers built alike; ``bulk`` records through record_many, ``plain`` through record()."""

    def __init__(self, setup: Setup) -> None:
        self.bulk_provider, self.bulk_readers = setup()
        self.plain_provider, self.plain_readers = setup()
        self.bulk = self.bulk_provider.get_meter("t").create_histogram("h", explicit_bucket_boundaries_advisory=BOUNDS)
        self.plain = self.plain_provider.get_meter("t").create_histogram(
            "h", explicit_bucket_boundaries_advisory=BOUNDS
        )
        self.record_calls = 0
        original = self.bulk.record

        def counted(value: float, attributes: Any = None, context: Any = None) -> None:
            self.record_calls += 1
            original(value, attributes, context)

        self.bulk.record = counted  # type: ignore[method-assign,assignment]

    def record(self, values: list[float], attributes: dict[str, Any] = ATTRS) -> None:
        record_many(self.bulk, attributes, values, NO_SPAN)
        for value in values:
            self.plain.record(value, attributes, NO_SPAN)

    def record_counted(self, counted: list[tuple[float, int]], attributes: dict[str, Any] = ATTRS) -> None:
        record_counted(self.bulk, attributes, counted, NO_SPAN)
        for value, count in counted:
            for _ in range(count):
                self.plain.record(value, attributes, NO_SPAN)

    def exported(self) -> tuple[Any, Any]:
        return _exported(self.bulk_readers), _exported(self.plain_readers)

    def close(self) -> None:
        self.bulk_provider.shutdown()
        self.plain_provider.shutdown()


@pytest.fixture
def pair_of() -> Iterator[Callable[[Setup], _Pair]]:
    made: list[_Pair] = []

    def make(setup: Setup) -> _Pair:
        made.append(_Pair(setup))
        return made[-1]

    yield make
    for pair in made:
        pair.close()


@pytest.fixture(autouse=True)
def _enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_otel_bulk, "_disabled", False)


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_values_past_record_land_as_record_lands_them(setup: Setup, pair_of: Callable[[Setup], _Pair]) -> None:
    pair = pair_of(setup)
    pair.record(VALUES)
    pair.record(VALUES[:3], {**ATTRS, "error.type": "timeout"})  # a second series
    bulk, plain = pair.exported()
    assert bulk == plain
    assert all(points for points in plain)  # positive control: something was exported
    pair.record(VALUES[2:])  # a second interval (delta: only these)
    bulk, plain = pair.exported()
    assert bulk == plain
    assert pair.record_calls == 0  # the fast path was taken


COUNTED = [(0.1 / 3, 40), (0.3, 7), (1.7, 1), (12.5, 3), (0.0, 2), (0.7, 0)]
"""A chunk-gap histogram's values: each many times (the sum added value by value, so compared to 9 places)."""


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_counted_values_land_as_record_lands_each_of_them(setup: Setup, pair_of: Callable[[Setup], _Pair]) -> None:
    pair = pair_of(setup)
    pair.record_counted(COUNTED)
    pair.record_counted(COUNTED[:2], {**ATTRS, "error.type": "timeout"})
    bulk, plain = pair.exported()
    assert bulk == plain
    assert all(points for points in plain)  # positive control: something was exported
    pair.record_counted(COUNTED[3:])  # a second interval (delta: only these)
    bulk, plain = pair.exported()
    assert bulk == plain
    assert pair.record_calls == 0  # the fast path was taken


def test_counted_values_are_added_with_their_counts_not_one_by_one(
    pair_of: Callable[[Setup], _Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the SDK's explicit-bucket aggregation, ``aggregate`` is not called per value (the point of it)."""
    from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation

    calls = 0
    original = _ExplicitBucketHistogramAggregation.aggregate

    def spy(self: Any, measurement: Any, should_sample_exemplar: bool = True) -> None:
        nonlocal calls
        calls += 1
        original(self, measurement, should_sample_exemplar)

    monkeypatch.setattr(_ExplicitBucketHistogramAggregation, "aggregate", spy)
    pair = pair_of(SETUPS["cumulative"])
    pair.record_counted(COUNTED)
    assert calls == sum(count for _, count in COUNTED)  # control: the plain provider's record() aggregates each
    bulk, plain = pair.exported()
    assert bulk == plain and next(iter(plain[0].values()))[0] == 53


def test_counted_values_record_would_drop_go_through_record(pair_of: Callable[[Setup], _Pair]) -> None:
    pair = pair_of(SETUPS["cumulative"])
    pair.record_counted([(0.3, 2), (-1.0, 1), (float("nan"), 2)])
    assert pair.record_calls == 5
    bulk, plain = pair.exported()
    assert bulk == plain and next(iter(plain[0].values()))[0] == 2  # control: the valid values were kept


def test_past_the_cardinality_limit_values_go_to_the_overflow_series_as_with_record(
    pair_of: Callable[[Setup], _Pair],
) -> None:
    pair = pair_of(_one_reader(cardinality_limits={Histogram: 2}))
    for port in range(4):
        pair.record(VALUES, {**ATTRS, "server.port": port})
    bulk, plain = pair.exported()
    assert bulk == plain
    assert any(("otel.metric.overflow", True) in attrs for _, attrs in plain[0])  # the limit was reached


def test_a_series_targets_are_found_once_and_a_single_value_goes_past_record(
    pair_of: Callable[[Setup], _Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = 0
    original = _otel_bulk._targets

    def spy(instrument: Any, attributes: dict[str, Any]) -> Any:
        nonlocal found
        found += 1
        return original(instrument, attributes)

    monkeypatch.setattr(_otel_bulk, "_targets", spy)
    pair = pair_of(SETUPS["delta"])
    series = dict(ATTRS)  # one dict per series, as the exporter keeps it
    pair.record([0.3], series)
    pair.record([0.4, 0.5], series)
    assert (found, pair.record_calls) == (1, 0)
    bulk, plain = pair.exported()
    assert bulk == plain and next(iter(plain[0].values()))[0] == 3
    pair.record([0.6], series)  # the next interval: the same targets, a new aggregation (delta)
    pair.record([0.7], dict(series))  # another dict: looked up
    assert found == 2
    bulk, plain = pair.exported()
    assert bulk == plain and next(iter(plain[0].values()))[0] == 2
    other = pair_of(SETUPS["delta"])  # another provider's instrument: its own targets
    other.record([0.3], series)
    other_bulk, other_plain = other.exported()
    assert found == 3 and other_bulk == other_plain and other_plain[0]
    monkeypatch.setattr(pair.bulk, "_is_enabled", lambda: False)  # its meter disabled since: record() decides
    pair.record([0.75], series)
    assert pair.record_calls == 1
    monkeypatch.setattr(pair.bulk, "_is_enabled", lambda: True)
    monkeypatch.setattr(_otel_bulk, "_disabled", True)
    pair.record([0.8], series)
    assert pair.record_calls == 2  # disabled: record(), whatever was found before


def test_a_value_record_would_drop_sends_them_all_through_record(
    pair_of: Callable[[Setup], _Pair], caplog: pytest.LogCaptureFixture
) -> None:
    pair = pair_of(SETUPS["cumulative"])
    pair.record([0.3, -1.0, float("inf"), float("nan"), 2.0])
    assert pair.record_calls == 5  # the SDK's checks and warnings are its own
    for values in ([float("inf"), -float("inf")], [1.0, float("nan")], [1e308, 1e308], [0.5, -0.5]):
        pair.record(values)
    assert pair.record_calls == 13
    bulk, plain = pair.exported()
    assert bulk == plain
    assert next(iter(plain[0].values()))[0] == 6  # control: the valid values were kept


def test_an_exemplar_filter_that_samples_without_a_span_keeps_record(
    monkeypatch: pytest.MonkeyPatch, pair_of: Callable[[Setup], _Pair]
) -> None:
    """With ``always_on`` every value carries an exemplar, which only record() makes."""
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_on")
    pair = pair_of(SETUPS["cumulative"])
    pair.record(VALUES)
    assert pair.record_calls == len(VALUES)
    bulk, plain = pair.exported()
    assert bulk == plain
    (reader,) = pair.bulk_readers
    pair.record(VALUES)
    data = reader.get_metrics_data()
    assert data is not None
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert point.exemplars  # what the fast path would have lost


def _exemplars(readers: list[InMemoryMetricReader]) -> list[list[tuple[Any, ...]]]:
    """Per reader: each point's exemplars (value, trace and span id, the attributes its series dropped)."""
    out = []
    for reader in readers:
        data = reader.get_metrics_data()
        out.append(
            sorted(
                (e.value, e.trace_id, e.span_id, tuple(sorted((e.filtered_attributes or {}).items())))
                for rm in (data.resource_metrics if data else ())
                for sm in rm.scope_metrics
                for m in sm.metrics
                for p in m.data.data_points
                for e in cast(Any, p).exemplars
            )
        )
    return out


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_one_value_with_a_span_keeps_its_exemplar_as_record_keeps_it(
    setup: Setup, pair_of: Callable[[Setup], _Pair]
) -> None:
    sampled = trace.SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=trace.TraceFlags(1))
    unsampled = trace.SpanContext(0x1235, 0x5679, is_remote=False, trace_flags=trace.TraceFlags(0))
    pair = pair_of(setup)
    for value, span in ((0.3, sampled), (1.7, unsampled), (4.0, sampled)):
        context = trace.set_span_in_context(trace.NonRecordingSpan(span))
        record_one(pair.bulk, ATTRS, value, context)
        pair.plain.record(value, ATTRS, context)
    assert pair.record_calls == 0  # past record()
    bulk, plain = _exemplars(pair.bulk_readers), _exemplars(pair.plain_readers)
    assert bulk == plain
    assert any(plain)  # positive control: the sampled span's values carry exemplars
    assert all(e[1] == 0x1234 for reader in plain for e in reader)  # the unsampled one does not


def test_an_sdk_laid_out_otherwise_falls_back_to_record_once_and_for_all(
    monkeypatch: pytest.MonkeyPatch, pair_of: Callable[[Setup], _Pair]
) -> None:
    """As if the SDK's attribute hash took other arguments: nothing recorded twice, nothing lost."""
    sdk = _otel_bulk._load()
    assert sdk is not None

    def changed(*args: Any) -> Any:
        raise TypeError("another signature")

    monkeypatch.setattr(_otel_bulk, "_sdk", (*sdk[:3], changed))
    errors = _log.internal_errors().get("sink", 0)
    pair = pair_of(SETUPS["delta"])
    pair.record(VALUES)
    assert pair.record_calls == len(VALUES)
    assert _log.internal_errors()["sink"] == errors + 1  # counted, and said
    pair.record(VALUES)
    assert pair.record_calls == 2 * len(VALUES)
    assert _log.internal_errors()["sink"] == errors + 1  # once
    bulk, plain = pair.exported()
    assert bulk == plain


def test_an_sdk_without_the_layout_takes_record_quietly(
    monkeypatch: pytest.MonkeyPatch, pair_of: Callable[[Setup], _Pair]
) -> None:
    """An SDK version this module does not know (here: a module it imports missing) is not an error."""
    import sys

    monkeypatch.setattr(_otel_bulk, "_sdk", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.metrics._internal.exemplar.exemplar_filter", None)
    errors = _log.internal_errors().get("sink", 0)
    pair = pair_of(SETUPS["cumulative"])
    pair.record(VALUES)
    assert pair.record_calls == len(VALUES)
    assert _log.internal_errors().get("sink", 0) == errors
    bulk, plain = pair.exported()
    assert bulk == plain and plain[0]  # control: the values arrived


def test_the_api_no_op_and_proxy_instruments_take_record() -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    histogram = NoOpMeterProvider().get_meter("t").create_histogram("h")
    record_many(histogram, ATTRS, VALUES, NO_SPAN)  # no SDK layout to read: nothing raised


def test_values_racing_a_delta_readers_collections_are_each_counted_once() -> None:
    """The lookup and the values under the view's lock: a collection on another thread, which swaps the
    aggregations, never takes values recorded into an aggregation it already let go."""
    reader = InMemoryMetricReader(preferred_temporality=_delta())
    provider = MeterProvider(metric_readers=[reader])
    histogram = provider.get_meter("t").create_histogram("h", explicit_bucket_boundaries_advisory=BOUNDS)
    batches, batch = 400, [0.3] * 50
    counted: list[int] = []
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            counted.append(_count(reader))

    collector = threading.Thread(target=collect)
    collector.start()
    sent = 0
    try:  # at least `batches`, and on until two collections have taken values (a fast machine, a slow thread)
        while sent < batches or (sum(1 for c in counted if c) < 2 and sent < 200 * batches):
            record_many(histogram, ATTRS, batch, NO_SPAN)
            sent += 1
    finally:
        done.set()
        collector.join()
    counted.append(_count(reader))
    assert sum(counted) == sent * len(batch)
    assert sum(1 for c in counted if c) > 1  # positive control: the collections did interleave with the batches
    provider.shutdown()


def _count(reader: MetricReader) -> int:
    data = reader.get_metrics_data()  # type: ignore[attr-defined]
    if data is None:
        return 0
    return sum(p.count for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               for p in m.data.data_points)  # fmt: skip
