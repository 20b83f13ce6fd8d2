"""OTLP exponential histograms stored by a real Prometheus 2.42 as native histograms, through
``tests/support/nativeprom.py`` (a stand-in for a Collector serving Prometheus' protobuf exposition).

Fast (no Prometheus): the encoder against client_model's schema, built here from a hand-written
``FileDescriptorProto`` (field numbers and wire types of client_model v0.3.0, the version Prometheus 2.42 vendors),
and the OTLP -> Prometheus bucket index shift and downscaling.

Live (``prometheus``, ``slow``): the real OpenTelemetry SDK and OTLP/HTTP exporter feed the stand-in, a real
``prometheus --enable-feature=native-histograms`` scrapes it every second, and everything is asserted through
Prometheus' HTTP API:

* ``spread``: 1,000 values log-uniform over 0.01-60 s plus a 0 (the zero bucket): exact count and sum; every
  stored bucket holds exactly the values recorded in its range; no classic ``_bucket``/``_count``/``_sum`` series
  (controls: a counter, and an explicit-bucket histogram that *does* give classic series); quantiles and
  ``histogram_fraction`` within one bucket of the truth at the schema stored (3: the SDK's scale for this range);
* ``narrow``: two close values, so the SDK keeps scale 20: downscaled to schema 8, count and median right
  (served at schema 20, Prometheus 2.42 ingests it, then panics in the API on any query reading its buckets);
* ``empty``: a point with no observations. The SDK exports no point for an attribute set nothing was recorded
  with, so this one is posted by hand (an OTLP point as the SDK would write it: count 0, zero threshold 0). It
  sorts first in its family, and Prometheus 2.42 decides whether a whole family is native from its first metric:
  without the stand-in's non-zero zero threshold, every series of the family would turn classic;
* ``rate``: more values recorded later widen the range, so the SDK rescales (5 -> 4); ``rate()`` of the native
  histogram is positive and ``increase()`` smaller than the count before: no counter reset was seen (with the
  buckets off by one index, Prometheus' own downscaling disagrees with the SDK's, and it sees one).
"""

from __future__ import annotations

import gzip
import math
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
from google.protobuf import (  # type: ignore[import-untyped]  # no stubs installed
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Histogram as ApiHistogram
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.sdk.metrics import Counter as SdkCounter
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality as SdkTemporality
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.resources import Resource as SdkResource

from tests.support.nativeprom import (
    CONTENT_TYPE,
    ZERO_THRESHOLD,
    NativeCollector,
    NativeHistogram,
    native_collector,
    native_histogram,
)
from tests.support.prom import require
from tests.support.promlive import Proc, http_get, prometheus_command, query, start, stop_all, wait_for
from tests.support.scripts import load_script

CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA

# ---------------------------------------------------------------------------------------------
# client_model's metrics.proto (v0.3.0), the part the stand-in writes, as a FileDescriptorProto
# ---------------------------------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "uint32": _F.TYPE_UINT32,
    "sint32": _F.TYPE_SINT32,
    "sint64": _F.TYPE_SINT64,
    "string": _F.TYPE_STRING,
}
# message -> (field, number, type); "*" marks a repeated field
CLIENT_MODEL: dict[str, list[tuple[str, int, str]]] = {
    "LabelPair": [("name", 1, "string"), ("value", 2, "string")],
    "Gauge": [("value", 1, "double")],
    "Counter": [("value", 1, "double")],
    "Bucket": [("cumulative_count", 1, "uint64"), ("upper_bound", 2, "double")],
    "BucketSpan": [("offset", 1, "sint32"), ("length", 2, "uint32")],
    "Histogram": [
        ("sample_count", 1, "uint64"),
        ("sample_sum", 2, "double"),
        ("bucket", 3, "*Bucket"),
        ("schema", 5, "sint32"),
        ("zero_threshold", 6, "double"),
        ("zero_count", 7, "uint64"),
        ("negative_span", 9, "*BucketSpan"),
        ("negative_delta", 10, "*sint64"),
        ("positive_span", 12, "*BucketSpan"),
        ("positive_delta", 13, "*sint64"),
    ],
    "Metric": [
        ("label", 1, "*LabelPair"),
        ("gauge", 2, "Gauge"),
        ("counter", 3, "Counter"),
        ("timestamp_ms", 6, "int64"),
        ("histogram", 7, "Histogram"),
    ],
    "MetricFamily": [("name", 1, "string"), ("help", 2, "string"), ("type", 3, "MetricType"), ("metric", 4, "*Metric")],
}
METRIC_TYPES = {"COUNTER": 0, "GAUGE": 1, "SUMMARY": 2, "UNTYPED": 3, "HISTOGRAM": 4, "GAUGE_HISTOGRAM": 5}


def _metric_family_class() -> Any:
    package = "io.prometheus.client"
    proto = descriptor_pb2.FileDescriptorProto(name="metrics_for_test.proto", package=package, syntax="proto2")
    enum = proto.enum_type.add(name="MetricType")
    for name, number in METRIC_TYPES.items():
        enum.value.add(name=name, number=number)
    for message, fields in CLIENT_MODEL.items():
        m = proto.message_type.add(name=message)
        for field, number, type_ in fields:
            repeated = type_.startswith("*")
            type_ = type_.lstrip("*")
            f = m.field.add(name=field, number=number, label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if type_ in _SCALARS:
                f.type = _SCALARS[type_]
            else:
                f.type = _F.TYPE_ENUM if type_ == "MetricType" else _F.TYPE_MESSAGE
                f.type_name = f".{package}.{type_}"
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.MetricFamily"))


def _delimited(data: bytes) -> list[bytes]:
    """The messages of a varint-length-delimited stream."""
    out, pos = [], 0
    while pos < len(data):
        length = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        out.append(data[pos : pos + length])
        pos += length
    assert pos == len(data)
    return out


# ---------------------------------------------------------------------------------------------
# OTLP requests by hand
# ---------------------------------------------------------------------------------------------


def _kv(attributes: dict[str, str]) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()]


def _request(*metrics: Metric, resource: dict[str, str] | None = None) -> ExportMetricsServiceRequest:
    scope = InstrumentationScope(name="llmtap", version="1.2.3")
    return ExportMetricsServiceRequest(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=_kv(resource or {"service.name": "svc"})),
                scope_metrics=[ScopeMetrics(scope=scope, metrics=list(metrics))],
            )
        ]
    )


def _exponential(name: str, *points: ExponentialHistogramDataPoint) -> Metric:
    data = ExponentialHistogram(aggregation_temporality=CUMULATIVE, data_points=list(points))
    return Metric(name=name, unit="s", exponential_histogram=data)


def _post(collector: NativeCollector, request: ExportMetricsServiceRequest) -> ExportMetricsServiceResponse:
    body = gzip.compress(request.SerializeToString())
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    req = urllib.request.Request(collector.endpoint + "/v1/metrics", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        response = ExportMetricsServiceResponse()
        response.ParseFromString(resp.read())
        return response


def _scrape(collector: NativeCollector) -> dict[str, Any]:
    """``GET /metrics`` decoded with the client_model schema: family name -> MetricFamily message; each message
    re-serializes to exactly the bytes served (no unknown field, no wire type the schema does not expect)."""
    with urllib.request.urlopen(collector.metrics_url, timeout=10) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        data = resp.read()
    cls = _metric_family_class()
    families = {}
    for raw in _delimited(data):
        family = cls()
        family.ParseFromString(raw)
        assert family.SerializeToString() == raw, family
        families[family.name] = family
    return families


def _labels(metric: Any) -> dict[str, str]:
    return {pair.name: pair.value for pair in metric.label}


# ---------------------------------------------------------------------------------------------
# Fast: the translation and the encoding
# ---------------------------------------------------------------------------------------------


def test_index_shift_one_value_at_scale_0() -> None:
    """1.5 at scale 0 is OTLP bucket 0, (1, 2]; Prometheus calls (1, 2] bucket 1."""
    point = ExponentialHistogramDataPoint(count=1, sum=1.5, scale=0)
    point.positive.offset, point.positive.bucket_counts[:] = 0, [1]
    h = native_histogram(point)
    assert h == NativeHistogram(1, 1.5, 0, ZERO_THRESHOLD, 0, positive_spans=((1, 1),), positive_deltas=(1,))
    base = 2.0 ** (2.0**-h.schema)
    index = h.positive_spans[0][0]
    assert base ** (index - 1) < 1.5 <= base**index


def test_downscale_puts_every_bucket_inside_its_prometheus_bucket() -> None:
    """At every scale above 8, OTLP bucket i, (2**(i/2**s), 2**((i+1)/2**s)], lies inside Prometheus bucket
    ``(i >> (s - 8)) + 1`` at schema 8, (2**((j-1)/256), 2**(j/256)] (exact, in log2 space)."""
    for scale in range(9, 21):
        shift = scale - 8
        for i in [*range(-600, 600), -(2**scale), 2**scale - 1, 2**scale, 5 * 2**scale + 7]:
            j = (i >> shift) + 1
            lower, upper = Fraction(i, 2**scale), Fraction(i + 1, 2**scale)
            assert Fraction(j - 1, 256) <= lower < upper <= Fraction(j, 256), (scale, i, j)


def test_downscale_merges_buckets_and_spans_carry_gaps() -> None:
    point = ExponentialHistogramDataPoint(count=48, sum=1.0, scale=10, zero_count=2)
    # scale 10 -> 8: indexes 1020..1023 -> 255, 1024..1027 -> 256; then + 1
    point.positive.offset, point.positive.bucket_counts[:] = 1020, [1, 2, 3, 4, 5, 6, 7, 8]
    # -5 -> -2; -4..-1 -> -1; then + 1
    point.negative.offset, point.negative.bucket_counts[:] = -5, [1, 1, 1, 1, 1]
    h = native_histogram(point)
    assert (h.schema, h.zero_count) == (8, 2)
    assert (h.positive_spans, h.positive_deltas) == (((256, 2),), (10, 16))
    assert (h.negative_spans, h.negative_deltas) == (((-1, 2),), (1, 3))

    gaps = ExponentialHistogramDataPoint(count=11, sum=1.0, scale=3)
    # OTLP indexes -2, -1, 2, 4 (empty buckets between) -> Prometheus -1, 0, 3, 5
    gaps.positive.offset, gaps.positive.bucket_counts[:] = -2, [3, 1, 0, 0, 5, 0, 2]
    h = native_histogram(gaps)
    assert h.schema == 3
    assert h.positive_spans == ((-1, 2), (2, 1), (1, 1))  # the first absolute, then the gap since the last end
    assert h.positive_deltas == (3, -2, 4, -3)  # each count minus the previous, across spans
    assert not h.negative_spans and not h.negative_deltas


def test_an_empty_histogram_keeps_a_zero_threshold() -> None:
    """Prometheus 2.42 ingests a histogram as native only with buckets, a zero count or a zero threshold > 0."""
    empty = native_histogram(ExponentialHistogramDataPoint(count=0, sum=0.0, scale=20))
    assert not empty.positive_spans and not empty.negative_spans and empty.zero_count == 0
    assert empty.zero_threshold == ZERO_THRESHOLD > 0
    assert empty.schema == 8
    wide = native_histogram(ExponentialHistogramDataPoint(count=1, sum=0.0, scale=2, zero_count=1, zero_threshold=0.25))
    assert (wide.zero_threshold, wide.zero_count) == (0.25, 1)  # a threshold of its own is kept


def test_exposition_decodes_with_the_client_model_schema() -> None:
    exponential = ExponentialHistogramDataPoint(
        attributes=_kv({"gen_ai.provider.name": "openai"}), count=43, sum=123.5, scale=10, zero_count=2
    )
    exponential.positive.offset, exponential.positive.bucket_counts[:] = 1020, [1, 2, 3, 4, 5, 6, 7, 8]
    exponential.negative.offset, exponential.negative.bucket_counts[:] = -5, [1, 1, 1, 1, 1]
    number = NumberDataPoint(attributes=_kv({"gen_ai.provider.name": "openai"}), as_int=7)
    counter = Sum(aggregation_temporality=CUMULATIVE, is_monotonic=True, data_points=[number])
    up_down = Sum(aggregation_temporality=CUMULATIVE, is_monotonic=False, data_points=[NumberDataPoint(as_double=2.5)])
    explicit = HistogramDataPoint(count=6, sum=20.0, explicit_bounds=[1.0, 5.0], bucket_counts=[1, 2, 3])
    request = _request(
        Metric(name="llmtap.attempts", unit="{attempt}", sum=counter),
        Metric(name="llmtap.in_flight", unit="{request}", description="in flight", sum=up_down),
        Metric(name="llmtap.cache.hit", unit="1", gauge=Gauge(data_points=[NumberDataPoint(as_double=0.75)])),
        Metric(
            name="llmtap.request.size",
            unit="By",
            histogram=Histogram(aggregation_temporality=CUMULATIVE, data_points=[explicit]),
        ),
        _exponential("llmtap.time_to_first_token", exponential),
    )
    with native_collector() as collector:
        response = _post(collector, request)
        families = _scrape(collector)
        assert not response.HasField("partial_success") and collector.errors == []
    assert sorted(families) == [
        "llmtap_attempts_total",
        "llmtap_cache_hit_ratio",
        "llmtap_in_flight",
        "llmtap_request_size_bytes",
        "llmtap_time_to_first_token_seconds",
        "target_info",
    ]
    types = {name: family.type for name, family in families.items()}
    assert types == {
        "llmtap_attempts_total": METRIC_TYPES["COUNTER"],
        "llmtap_cache_hit_ratio": METRIC_TYPES["GAUGE"],
        "llmtap_in_flight": METRIC_TYPES["GAUGE"],
        "llmtap_request_size_bytes": METRIC_TYPES["HISTOGRAM"],
        "llmtap_time_to_first_token_seconds": METRIC_TYPES["HISTOGRAM"],
        "target_info": METRIC_TYPES["GAUGE"],
    }
    scope = {"otel_scope_name": "llmtap", "otel_scope_version": "1.2.3"}

    [counter] = families["llmtap_attempts_total"].metric
    assert _labels(counter) == {"gen_ai_provider_name": "openai", **scope}
    assert counter.HasField("counter") and counter.counter.value == 7.0 and not counter.HasField("gauge")
    [in_flight] = families["llmtap_in_flight"].metric
    assert families["llmtap_in_flight"].help == "in flight"
    assert in_flight.gauge.value == 2.5 and not in_flight.HasField("counter") and _labels(in_flight) == scope
    assert families["llmtap_cache_hit_ratio"].metric[0].gauge.value == 0.75
    assert not counter.HasField("timestamp_ms")  # Prometheus stamps the scrape time

    [classic] = families["llmtap_request_size_bytes"].metric
    assert (classic.histogram.sample_count, classic.histogram.sample_sum) == (6, 20.0)
    buckets = [(b.upper_bound, b.cumulative_count) for b in classic.histogram.bucket]
    assert buckets == [(1.0, 1), (5.0, 3), (math.inf, 6)]
    assert not classic.histogram.HasField("schema") and not classic.histogram.positive_span  # classic: no native

    [native] = families["llmtap_time_to_first_token_seconds"].metric
    h = native.histogram
    assert _labels(native) == {"gen_ai_provider_name": "openai", **scope}
    assert (h.sample_count, h.sample_sum, h.schema, h.zero_count, h.zero_threshold) == (43, 123.5, 8, 2, ZERO_THRESHOLD)
    assert [(s.offset, s.length) for s in h.positive_span] == [(256, 2)] and list(h.positive_delta) == [10, 16]
    assert [(s.offset, s.length) for s in h.negative_span] == [(-1, 2)] and list(h.negative_delta) == [1, 3]
    assert not h.bucket  # never classic buckets for an exponential point

    [info] = families["target_info"].metric
    assert _labels(info) == {"service_name": "svc"} and info.gauge.value == 1.0


def test_refused_points_are_logged_and_the_rest_served() -> None:
    """A scale below -4 (no Prometheus schema is that coarse) and delta temporality are refused; the point
    beside them (scale -4) is served."""
    too_coarse = ExponentialHistogramDataPoint(attributes=_kv({"case": "coarse"}), count=1, sum=100.0, scale=-5)
    too_coarse.positive.offset, too_coarse.positive.bucket_counts[:] = 0, [1]
    coarsest = ExponentialHistogramDataPoint(attributes=_kv({"case": "ok"}), count=1, sum=100.0, scale=-4)
    coarsest.positive.offset, coarsest.positive.bucket_counts[:] = 0, [1]
    delta = Sum(aggregation_temporality=DELTA, is_monotonic=True, data_points=[NumberDataPoint(as_int=1)])
    request = _request(
        _exponential("llmtap.time_to_first_token", too_coarse, coarsest), Metric(name="llmtap.deltas", sum=delta)
    )
    with native_collector() as collector:
        response = _post(collector, request)
        families = _scrape(collector)
        errors = list(collector.errors)
    assert response.partial_success.rejected_data_points == 2
    assert len(errors) == 2 and response.partial_success.error_message == "; ".join(errors)
    assert "scale -5 is coarser than Prometheus' coarsest schema -4" in errors[0] and "'coarse'" in errors[0]
    assert "llmtap.deltas: AGGREGATION_TEMPORALITY_DELTA" in errors[1]
    assert "llmtap_deltas_total" not in families
    [served] = families["llmtap_time_to_first_token_seconds"].metric
    assert _labels(served)["case"] == "ok" and served.histogram.schema == -4


# ---------------------------------------------------------------------------------------------
# Live: the SDK -> the stand-in -> Prometheus 2.42
# ---------------------------------------------------------------------------------------------

HISTOGRAM = "llmtap_time_to_first_token_seconds"
SETTLE_SECONDS = 30.0  # Prometheus' scrape manager picks up its targets ~5 s after start, then scrapes every 1 s
SPREAD = [0.01 * 6000 ** (k / 999) for k in range(1000)] + [0.0]  # 0.01-60 s, log-uniform; and the zero bucket
NARROW = [3.0, 3.0002]  # ~100 buckets apart at scale 20: the SDK keeps scale 20 (max 160 buckets)
RATE_BEFORE, RATE_ADDED = 200, 50
COUNTER_VALUE = 7
CONTROL = [0.5, 2.0, 9.0]  # an explicit-bucket histogram: classic series must exist for it
MEASURED: dict[str, float] = {}  # what the live tests measured (printed with -s)
promql = load_script("dashboards/promql.py", "llmtap_dashboards_promql")
"""The forms the shipped dashboards and rules ask a histogram with, classic or native."""


@dataclass
class Live:
    url: str
    prom: Proc
    collector: NativeCollector
    histogram: ApiHistogram


def _wait(live: Live, expr: str, ok: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """``expr``'s result once ``ok`` accepts it; fails with the last answer after SETTLE_SECONDS."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        error, result = query(live.url, expr)
        if error is None and ok(result):
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"`{expr}` -> {error or result!r} after {SETTLE_SECONDS:.0f}s\n{live.prom.output()}")
        time.sleep(0.25)


def _number(live: Live, expr: str, ok: Callable[[float], bool] = lambda _: True) -> float:
    result = _wait(live, expr, lambda r: len(r) == 1 and "value" in r[0] and ok(float(r[0]["value"][1])))
    return float(result[0]["value"][1])


def _stored(live: Live, case: str) -> tuple[int, dict[str, Any]]:
    """(schema, Prometheus' JSON of the native histogram) of ``case``; the schema follows from a bucket's bounds."""
    [series] = _wait(live, f'{HISTOGRAM}{{case="{case}"}}', lambda r: len(r) == 1 and "histogram" in r[0])
    h: dict[str, Any] = series["histogram"][1]
    for _, lower, upper, _ in h.get("buckets", []):
        if float(lower) > 0:
            return round(-math.log2(math.log2(float(upper) / float(lower)))), h
    return 8, h  # no positive bucket (the empty case): the stand-in wrote schema 8


def _true_quantile(values: list[float], q: float) -> float:
    return sorted(values)[math.ceil(q * len(values)) - 1]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    binary = require("prometheus")
    with ExitStack() as stack:
        collector = stack.enter_context(native_collector())
        # the label set nothing is recorded with, there before the first scrape (see the module docstring)
        _post(collector, _request(_exponential("llmtap.time_to_first_token", _empty_point())))
        tmp = tmp_path_factory.mktemp("prometheus-native")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "nativeprom", "static_configs": [{"targets": [collector.target]}]}],
        }
        args, url = prometheus_command(binary, config, tmp, "--enable-feature=native-histograms")
        prom = start("prometheus", args, tmp / "prometheus.log")
        stack.callback(stop_all, [prom])

        exporter = OTLPMetricExporter(
            endpoint=collector.endpoint + "/v1/metrics",
            preferred_temporality={SdkHistogram: SdkTemporality.CUMULATIVE, SdkCounter: SdkTemporality.CUMULATIVE},
            preferred_aggregation={SdkHistogram: ExponentialBucketHistogramAggregation()},
        )
        provider = MeterProvider(
            metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=500)],
            resource=SdkResource.create({"service.name": "nativeprom-test"}),
            views=[
                View(
                    instrument_name="llmtap.control_duration",
                    aggregation=ExplicitBucketHistogramAggregation((1.0, 5.0)),
                )
            ],
        )
        stack.callback(provider.shutdown)
        meter = provider.get_meter("llmtap", version="0.1.0")
        histogram = meter.create_histogram("llmtap.time_to_first_token", unit="s")
        for value in SPREAD:
            histogram.record(value, {"case": "spread"})
        for value in NARROW:
            histogram.record(value, {"case": "narrow"})
        for k in range(RATE_BEFORE):
            histogram.record(0.1 + k / 100, {"case": "rate"})
        meter.create_counter("llmtap.attempts", unit="{attempt}").add(COUNTER_VALUE, {"case": "control"})
        control = meter.create_histogram("llmtap.control_duration", unit="s")
        for value in CONTROL:
            control.record(value)

        live = Live(url, prom, collector, histogram)
        wait_for("prometheus to be ready", lambda: http_get(url + "/-/ready")[0] == 200, 60, prom)
        # everything scraped at least once, with the values recorded above
        _number(live, f'histogram_count({HISTOGRAM}{{case="spread"}})', lambda v: v == len(SPREAD))
        _number(live, f'histogram_count({HISTOGRAM}{{case="rate"}})', lambda v: v == RATE_BEFORE)
        _number(live, f"count(histogram_count({HISTOGRAM}))", lambda v: v == 4)
        _number(live, "llmtap_control_duration_seconds_count", lambda v: v == len(CONTROL))
        yield live
    if MEASURED:
        print("\nmeasured:", ", ".join(f"{k}={v:.6g}" for k, v in MEASURED.items()))


def _empty_point() -> ExponentialHistogramDataPoint:
    """As the SDK would write a histogram with no observation: count 0, scale 20, zero threshold 0."""
    now = time.time_ns()
    return ExponentialHistogramDataPoint(
        attributes=_kv({"case": "empty"}), start_time_unix_nano=now, time_unix_nano=now, count=0, sum=0.0, scale=20
    )


@pytest.mark.prometheus
@pytest.mark.slow
class TestLivePrometheus:
    def test_scraped_in_protobuf(self, live: Live) -> None:
        with live.collector.lock:
            accepts = list(live.collector.accepts)
        assert accepts and all(a.startswith(CONTENT_TYPE.replace(" ", "")) for a in accepts)
        assert live.collector.errors == []

    def test_count_and_sum_are_exact(self, live: Live) -> None:
        spread = f'{HISTOGRAM}{{case="spread"}}'
        assert _number(live, f"histogram_count({spread})") == len(SPREAD)
        assert _number(live, f"histogram_sum({spread})") == pytest.approx(sum(SPREAD), rel=1e-9)
        schema, stored = _stored(live, "spread")
        point = live.collector.point("llmtap.time_to_first_token", {"case": "spread"})
        assert isinstance(point, ExponentialHistogramDataPoint) and schema == point.scale <= 8
        MEASURED["spread schema"] = schema
        # the 0 is in the zero bucket, [-2**-128, 2**-128]
        zero = [b for b in stored["buckets"] if float(b[1]) < 0 < float(b[2])]
        assert [(float(b[1]), float(b[2]), b[3]) for b in zero] == [(-ZERO_THRESHOLD, ZERO_THRESHOLD, "1")]

    def test_no_classic_series(self, live: Live) -> None:
        classic = '{{__name__=~"{}_(bucket|count|sum)"}}[1h]'  # every sample since Prometheus started
        error, result = query(live.url, classic.format(HISTOGRAM))
        assert error is None and result == []
        # controls: an explicit-bucket histogram does give the classic series (3 buckets, count, sum) ...
        error, result = query(live.url, classic.format("llmtap_control_duration_seconds"))
        assert error is None and len(result) == 5
        # ... and the counter scraped beside the native histograms is there
        assert _number(live, 'llmtap_attempts_total{case="control"}') == COUNTER_VALUE
        # ... and the native histograms are there, each one a histogram, none a float
        natives = _wait(live, HISTOGRAM, lambda r: len(r) == 4)
        assert all("histogram" in s and "value" not in s for s in natives), natives
        assert {s["metric"]["case"] for s in natives} == {"empty", "narrow", "rate", "spread"}
        assert all(s["metric"]["otel_scope_name"] == "llmtap" for s in natives)

    def test_buckets_hold_the_values_recorded(self, live: Live) -> None:
        """Each bucket Prometheus stored, (lower, upper] (the zero bucket [-t, t]), holds exactly the values
        recorded in that range: the index shift and the spans are right end to end."""
        _, stored = _stored(live, "spread")
        total = 0
        for boundaries, lower, upper, count in stored["buckets"]:
            lo, up = float(lower), float(upper)
            inside = [v for v in SPREAD if (lo <= v if boundaries == 3 else lo < v) and v <= up]
            assert len(inside) == int(count), (lower, upper, count, inside)
            total += len(inside)
        assert total == len(SPREAD)

    @pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
    def test_quantiles_within_one_bucket(self, live: Live, q: float) -> None:
        schema, _ = _stored(live, "spread")
        estimate = _number(live, f'histogram_quantile({q}, {HISTOGRAM}{{case="spread"}})')
        true = _true_quantile(SPREAD, q)
        error = abs(estimate - true) / true
        MEASURED[f"q{q} relative error"] = error
        assert error <= 2 ** (2**-schema) - 1, (q, estimate, true, schema)

    def test_fraction_within_one_bucket(self, live: Live) -> None:
        schema, _ = _stored(live, "spread")
        estimate = _number(live, f'histogram_fraction(0, 5.12, {HISTOGRAM}{{case="spread"}})')
        true = sum(1 for v in SPREAD if 0 <= v <= 5.12) / len(SPREAD)
        # interpolated inside the bucket holding 5.12 (and inside the zero bucket, half of which is >= 0)
        base = 2 ** (2**-schema)
        j = math.ceil(math.log2(5.12) * 2**schema)
        in_bucket = sum(1 for v in SPREAD if base ** (j - 1) < v <= base**j) + SPREAD.count(0.0)
        MEASURED["fraction relative error"] = abs(estimate - true) / true
        assert abs(estimate - true) <= in_bucket / len(SPREAD), (estimate, true, in_bucket)
        assert abs(estimate - true) / true <= base - 1

    def test_downscaled_from_scale_20(self, live: Live) -> None:
        point = live.collector.point("llmtap.time_to_first_token", {"case": "narrow"})
        assert isinstance(point, ExponentialHistogramDataPoint) and point.scale == 20  # what the SDK sent
        schema, stored = _stored(live, "narrow")
        assert schema == 8
        assert int(stored["count"]) == len(NARROW) and float(stored["sum"]) == pytest.approx(sum(NARROW), rel=1e-9)
        median = _number(live, f'histogram_quantile(0.5, {HISTOGRAM}{{case="narrow"}})')
        MEASURED["narrow median relative error"] = abs(median - 3.0) / 3.0
        assert abs(median - 3.0) / 3.0 <= 2 ** (2**-8) - 1

    def test_an_empty_histogram_is_native(self, live: Live) -> None:
        assert _number(live, f'histogram_count({HISTOGRAM}{{case="empty"}})') == 0
        _, stored = _stored(live, "empty")
        assert int(stored["count"]) == 0 and not stored.get("buckets")
        error, result = query(live.url, f'{{__name__=~"{HISTOGRAM}_(bucket|count|sum)", case="empty"}}[1h]')
        assert error is None and result == []
        # control: the same query finds the classic series of the explicit-bucket histogram
        error, result = query(live.url, '{__name__=~"llmtap_control_duration_seconds_(bucket|count|sum)"}[1h]')
        assert error is None and result

    def test_rate_of_a_native_histogram(self, live: Live) -> None:
        """The added values widen the range, so the SDK rescales (5 -> 4): Prometheus sees a coarser schema
        between two scrapes, which is no counter reset when the buckets were mapped right."""
        before = live.collector.point("llmtap.time_to_first_token", {"case": "rate"})
        assert isinstance(before, ExponentialHistogramDataPoint) and before.count == RATE_BEFORE
        for k in range(RATE_ADDED):
            live.histogram.record(1.0 + k / 10, {"case": "rate"})
        selector = f'{HISTOGRAM}{{case="rate"}}'
        _number(live, f"histogram_count({selector})", lambda v: v == RATE_BEFORE + RATE_ADDED)
        after = live.collector.point("llmtap.time_to_first_token", {"case": "rate"})
        assert isinstance(after, ExponentialHistogramDataPoint) and after.scale < before.scale <= 8
        assert _number(live, f"histogram_count(rate({selector}[1m]))", lambda v: v > 0) > 0
        # extrapolated, but far below RATE_BEFORE: no counter reset was seen (one would add the whole count)
        increase = _number(live, f"histogram_count(increase({selector}[1m]))")
        MEASURED["increase of the added"] = increase
        assert 0 < increase < RATE_BEFORE

    def test_the_shipped_forms_read_native_and_classic_alike(self, live: Live) -> None:
        """``dashboards/promql.py``'s forms, as the panels and rules compose them (the ``or`` join, ``sum without
        (le)``, ``histogram_fraction(-Inf, ...) * histogram_count``), answer from the native histogram and from
        the classic control: counts and sums exact on both, the count under a bound exact on the classic side
        and within the bucket holding the bound on the native one. The values here stand still, so the range
        function is taken out (Prometheus 2.42's ``last_over_time`` reads no native histogram); ``rate`` over
        both kinds is the live demo test's (``test_prometheus_live.py``)."""

        def ask(expr: str) -> float:
            return _number(live, "sum(" + re.sub(r"last_over_time\(([^\[]+)\[1h\]\)", r"\1", expr) + ")")

        window, spread, fn = "1h", 'case="spread"', "last_over_time"
        assert ask(promql.count(HISTOGRAM, window, spread, fn=fn)) == len(SPREAD)
        assert ask(promql.total(HISTOGRAM, window, spread, fn=fn)) == pytest.approx(sum(SPREAD), rel=1e-9)
        under = ask(promql.under(HISTOGRAM, "5.12", window, spread, fn=fn))
        true = sum(1 for v in SPREAD if v <= 5.12)
        schema, _ = _stored(live, "spread")
        base = 2 ** (2**-schema)
        j = math.ceil(math.log2(5.12) * 2**schema)
        in_bucket = sum(1 for v in SPREAD if base ** (j - 1) < v <= base**j)
        MEASURED["shipped under-bound form, error in values"] = under - true
        assert abs(under - true) <= in_bucket, (under, true, in_bucket)
        # the classic side of the same forms, on the explicit-bucket control (bounds 1 and 5): exact
        control = "llmtap_control_duration_seconds"
        assert ask(promql.count(control, window, fn=fn)) == len(CONTROL)
        assert ask(promql.under(control, "5.0", window, fn=fn)) == 2
