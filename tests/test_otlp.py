"""Real OTLP bytes: llmtap's OpenTelemetry metrics exported by ``opentelemetry-exporter-otlp-proto-http``
to a receiver on 127.0.0.1 that decodes them with ``opentelemetry-proto``.

One known traffic mix goes through the real ``anthropic`` SDK to the simulator, with both exporters
on in the same tap. The decoded payload is checked against

* the contract (``llmtap._core.metrics.INSTRUMENTS``): every instrument's name, type, temporality,
  monotonicity, unit, bucket boundaries and attribute names;
* the simulator's truth (``Simulator.served``): attempts by status code, stream outcomes and tokens
  exactly, per model (each scenario uses its own model name, so series do not mix);
* the native Prometheus exporter, fed the very same records: after the OTel-to-Prometheus name
  translation, every non-zero counter, gauge and histogram series (bucket counts, count, sum) is equal.
  That includes the per-chunk gap histogram, which the OpenTelemetry exporter rebuilds from the
  core's pre-bucketed counts (``gaps.spread``).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

import llmtap
from llmtap import Outcome
from llmtap._core.gaps import spread
from llmtap._core.metrics import (
    BASE_ATTRIBUTES,
    CHUNK_GAP_BUCKETS,
    COUNTER,
    GAUGE,
    HISTOGRAM,
    INSTRUMENTS,
    SEMCONV_ATTRIBUTES,
    UP_DOWN,
    by_key,
    label_name,
)
from llmtap.simulator import Scenario, Simulator
from tests.support.otlp import Receiver, receiver, value_of
from tests.support.scripts import load_script

__all__ = ["receiver"]  # the fixture

# ---------------------------------------------------------------------------------------------
# The traffic mix
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    model: str
    action: str  # full | create | break
    scenario: Scenario
    outcomes: tuple[Outcome, ...]  # one per attempt
    times: int = 1

    @property
    def clean(self) -> bool:
        """The call completed (earlier attempts of this mix were refused with an error status, which
        carries no usage): the tokens llmtap counts must equal what the simulator sent."""
        return self.outcomes[-1] is Outcome.COMPLETED


MIX = (
    Mix("m-completed", "full", Scenario(tokens=6, gap=0.002, input=100, cache_read=30, cache_write=5),
        (Outcome.COMPLETED,), times=3),
    Mix("m-non-stream", "create", Scenario(tokens=4, input=50), (Outcome.COMPLETED,), times=2),
    Mix("m-max-tokens", "full", Scenario(tokens=5, stop_reason="max_tokens"), (Outcome.COMPLETED,)),
    Mix("m-retried", "full", Scenario(tokens=3, fail=1, fail_status=429, retry_after=0.01),
        (Outcome.REJECTED, Outcome.COMPLETED)),
    Mix("m-stall", "full", Scenario(tokens=4, stall_at=2, stall=0.25), (Outcome.COMPLETED,)),
    Mix("m-closed", "break", Scenario(tokens=40, gap=0.002), (Outcome.CLIENT_CLOSED,)),
    Mix("m-sse-error", "full", Scenario(tokens=6, error_event_at=2), (Outcome.SERVER_ERROR,)),
    Mix("m-dropped", "full", Scenario(tokens=6, drop_at=2), (Outcome.CONNECTION_ERROR,)),
    Mix("m-incomplete", "full", Scenario(tokens=6, no_stop=True), (Outcome.INCOMPLETE,)),
)  # fmt: skip


def run_mix(sim: Simulator) -> None:
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=2)
    try:
        for mix in MIX:
            for _ in range(mix.times):
                params: dict[str, Any] = {
                    "model": mix.model,
                    "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hi"}],
                    "extra_headers": mix.scenario.headers(),
                }
                try:
                    if mix.action == "create":
                        client.messages.create(**params)
                    elif mix.action == "full":
                        for _ in client.messages.create(stream=True, **params):
                            pass
                    else:
                        with client.messages.create(stream=True, **params) as stream:
                            for i, _ in enumerate(stream):
                                if i == 3:
                                    break
                except (anthropic.APIStatusError, anthropic.APIConnectionError, httpx2.TransportError):
                    pass  # the sse_error and dropped scenarios surface as SDK errors
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# Decoding helpers
# ---------------------------------------------------------------------------------------------


def attrs_of(point: Any) -> dict[str, str | int | float | bool]:
    return {kv.key: value_of(kv.value) for kv in point.attributes}


Key = tuple[str, frozenset[tuple[str, str]]]


def prom_key(family: str, attrs: dict[str, Any], drop: tuple[str, ...] = ()) -> Key:
    """``attrs`` as Prometheus labels (values as strings), ``drop``ped keys removed."""
    return family, frozenset((label_name(k), str(v)) for k, v in attrs.items() if k not in drop)


@dataclass
class Hist:
    count: int
    total: float
    buckets: tuple[int, ...]  # cumulative, as Prometheus stores them (le=+Inf last)


def otlp_series(metrics: dict[str, Metric]) -> tuple[dict[Key, float], dict[Key, Hist]]:
    """The OTLP points in Prometheus terms; semconv-only attributes dropped and their points merged."""
    scalars: dict[Key, float] = {}
    hists: dict[Key, Hist] = {}
    for spec in INSTRUMENTS:
        metric = metrics.get(spec.name)
        if metric is None:
            continue
        family = spec.prometheus()
        if spec.kind == HISTOGRAM:
            for hp in metric.histogram.data_points:
                key = prom_key(family, attrs_of(hp), SEMCONV_ATTRIBUTES)
                cumulative = tuple(sum(hp.bucket_counts[: i + 1]) for i in range(len(hp.bucket_counts)))
                seen = hists.get(key)
                if seen is not None:
                    cumulative = tuple(a + b for a, b in zip(seen.buckets, cumulative, strict=True))
                hists[key] = Hist(
                    hp.count + (seen.count if seen else 0), hp.sum + (seen.total if seen else 0.0), cumulative
                )
        else:
            points = metric.sum.data_points if spec.kind in (COUNTER, UP_DOWN) else metric.gauge.data_points
            for p in points:
                value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                key = prom_key(family, attrs_of(p), SEMCONV_ATTRIBUTES)
                scalars[key] = scalars.get(key, 0.0) + value
    return scalars, hists


def native_series(registry: CollectorRegistry) -> tuple[dict[Key, float], dict[Key, Hist]]:
    scalars: dict[Key, float] = {}
    parts: dict[Key, dict[str, Any]] = {}
    families = {i.prometheus().removesuffix("_total"): i for i in INSTRUMENTS}
    for metric in registry.collect():
        spec = families.get(metric.name)
        if spec is None:  # llmtap's own health counters (_exporters/_health.py): process-wide, not per attempt
            continue
        family = spec.prometheus()
        for s in metric.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le" and v != ""}
            key: Key = (family, frozenset(labels.items()))
            if spec.kind != HISTOGRAM:
                scalars[key] = s.value
                continue
            entry = parts.setdefault(key, {"buckets": []})
            if s.name.endswith("_bucket"):
                entry["buckets"].append((float(s.labels["le"]), int(s.value)))
            elif s.name.endswith("_count"):
                entry["count"] = int(s.value)
            elif s.name.endswith("_sum"):
                entry["sum"] = s.value
    hists = {
        k: Hist(e["count"], e["sum"], tuple(c for _, c in sorted(e["buckets"]))) for k, e in parts.items() if e["count"]
    }
    return scalars, hists


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------

Exported = tuple[dict[str, Metric], tuple[dict[Key, float], dict[Key, Hist]], list[Any]]


@pytest.fixture
def exported(sim: Simulator, receiver: Receiver) -> Iterator[Exported]:
    """Run the mix with both exporters on; yield (OTLP metrics by name, native series, served)."""
    sim.clear()
    registry = CollectorRegistry()
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=receiver.endpoint + "/v1/metrics", timeout=10), export_interval_millis=3_600_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "llmtap-otlp-test"}))
    settings = llmtap.Settings(
        base_urls=(sim.base_url,),
        traces=False,
        stall_threshold_seconds=0.15,
        otel_time_per_output_chunk=True,
        genai_semconv="both",  # every instrument on: both generations of the semconv token histograms,
        cost=True,  # one model priced (cache included), the others unpriced
        prices={"m-completed": llmtap.ModelPrice(input=3.0, output=15.0, cache_read=0.3)},
        context_windows={"m-completed": 100_000},  # one model's window known, the others' unknown
    )
    llmtap.instrument(settings, registry=registry, meter_provider=provider)
    try:
        run_mix(sim)
        attempts = sum(len(m.outcomes) * m.times for m in MIX)
        served = sim.wait_served(attempts, timeout=10)
        assert provider.force_flush(10_000)
        native = native_series(registry)  # before uninstrument() unregisters the families
    finally:
        llmtap.uninstrument()
        provider.shutdown()
    requests = receiver.metrics()
    assert requests, "the OTLP exporter sent nothing"
    request = requests[-1]  # cumulative: the last export holds the totals
    (rm,) = request.resource_metrics
    assert {kv.key: value_of(kv.value) for kv in rm.resource.attributes}["service.name"] == "llmtap-otlp-test"
    (sm,) = rm.scope_metrics
    assert sm.scope.name == "llmtap" and sm.scope.version == llmtap.__version__
    yield {m.name: m for m in sm.metrics}, native, served


def test_otlp_payload_matches_the_contract(exported: Exported) -> None:
    metrics, _, _ = exported
    missing = {i.name for i in INSTRUMENTS} - set(metrics)
    assert missing == set(), f"instruments never exported: {missing}"
    cumulative = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    for spec in INSTRUMENTS:
        metric = metrics[spec.name]
        assert metric.unit == spec.unit, spec.name
        assert metric.description == spec.description, spec.name
        kind = metric.WhichOneof("data")
        if spec.kind in (COUNTER, UP_DOWN):
            assert kind == "sum", spec.name
            assert metric.sum.is_monotonic == (spec.kind == COUNTER), spec.name
            assert metric.sum.aggregation_temporality == cumulative, spec.name
            points: Any = metric.sum.data_points
        elif spec.kind == HISTOGRAM:
            assert kind == "histogram", spec.name
            assert metric.histogram.aggregation_temporality == cumulative, spec.name
            points = metric.histogram.data_points
            for p in points:
                assert tuple(p.explicit_bounds) == tuple(float(b) for b in spec.buckets), spec.name
                assert len(p.bucket_counts) == len(spec.buckets) + 1
                assert sum(p.bucket_counts) == p.count
        else:
            assert spec.kind == GAUGE and kind == "gauge", spec.name
            points = metric.gauge.data_points
        assert points, spec.name
        allowed = set(BASE_ATTRIBUTES) | set(spec.attributes) | (set(SEMCONV_ATTRIBUTES) if spec.semconv else set())
        for p in points:
            keys = set(attrs_of(p))
            assert set(BASE_ATTRIBUTES) <= keys <= allowed, (spec.name, keys)


def _points(metric: Metric) -> list[tuple[dict[str, Any], float]]:
    return [
        (attrs_of(p), p.as_int if p.WhichOneof("value") == "as_int" else p.as_double) for p in metric.sum.data_points
    ]


def test_otlp_values_match_the_simulator(exported: Exported) -> None:
    metrics, _, served = exported
    # attempts: one per request the simulator served, by model and status code
    attempts: Counter[tuple[str, str]] = Counter()
    for attrs, value in _points(metrics["llmtap.attempts"]):
        attempts[(str(attrs["gen_ai.request.model"]), str(attrs.get("status_code", "")))] += int(value)
    truth = Counter((s.model, str(s.status)) for s in served)
    assert +attempts == truth
    assert sum(attempts.values()) == sum(len(m.outcomes) * m.times for m in MIX)

    # stream outcomes: exactly the mix's (every outcome exists per model, at 0 when unseen)
    streams: Counter[tuple[str, str]] = Counter()
    outcomes_per_model: dict[str, set[str]] = {}
    for attrs, value in _points(metrics["llmtap.streams"]):
        model = str(attrs["gen_ai.request.model"])
        streams[(model, str(attrs["outcome"]))] += int(value)
        outcomes_per_model.setdefault(model, set()).add(str(attrs["outcome"]))
    expected: Counter[tuple[str, str]] = Counter()
    for mix in MIX:
        if mix.action != "create":
            for outcome in mix.outcomes:
                expected[(mix.model, outcome.value)] += mix.times
    assert +streams == expected
    assert all(seen == {o.value for o in Outcome} for seen in outcomes_per_model.values())

    # tokens: what the simulator sent (Anthropic's input excludes the cache; llmtap's includes it)
    tokens: Counter[tuple[str, str]] = Counter()
    for attrs, value in _points(metrics["llmtap.tokens"]):
        tokens[(str(attrs["gen_ai.request.model"]), str(attrs["gen_ai.token.type"]))] += int(value)
    checked = 0
    for mix in MIX:
        if not mix.clean:
            continue
        sent = [s for s in served if s.model == mix.model]
        assert tokens[(mix.model, "input")] == sum(s.input_tokens + s.cache_read + s.cache_write for s in sent)
        assert tokens[(mix.model, "output")] == sum(s.output_tokens for s in sent)
        assert tokens[(mix.model, "cache_read")] == sum(s.cache_read for s in sent)
        assert tokens[(mix.model, "cache_write")] == sum(s.cache_write for s in sent)
        checked += 1
    assert checked >= 5 and tokens[("m-completed", "cache_read")] == 90  # positive control: the cache counted

    # retries and stalls, from the mix
    retries = {(str(a["gen_ai.request.model"]), str(a["reason"])): v for a, v in _points(metrics["llmtap.retries"])}
    assert retries[("m-retried", "429")] == 1
    assert sum(retries.values()) == 1
    stalls = {str(a["gen_ai.request.model"]): v for a, v in _points(metrics["llmtap.stream_stalls"])}
    assert stalls["m-stall"] == 1 and sum(stalls.values()) == 1
    in_flight = [v for _, v in _points(metrics["llmtap.streams_in_flight"])]
    assert in_flight and all(v == 0 for v in in_flight)


def test_otlp_equals_the_native_exporter(exported: Exported) -> None:
    """Same records, two exporters: after translation every non-zero series is the same."""
    metrics, (native_scalars, native_hists), _ = exported
    otlp_scalars, otlp_hists = otlp_series(metrics)
    assert {k: v for k, v in otlp_scalars.items() if v} == {k: v for k, v in native_scalars.items() if v}
    assert set(otlp_hists) == set(native_hists)
    for key, native in native_hists.items():
        otlp = otlp_hists[key]
        assert (otlp.count, otlp.buckets) == (native.count, native.buckets), key
        assert otlp.total == pytest.approx(native.total, rel=1e-9, abs=1e-12), key
    families = {k[0] for k in native_hists}
    gap = next(i for i in INSTRUMENTS if i.key == "gap").prometheus()
    assert gap in families  # positive control: the rebuilt gap histogram was compared


# ---------------------------------------------------------------------------------------------
# spread(): the gap histogram rebuilt from the core's pre-bucketed counts
# ---------------------------------------------------------------------------------------------


def test_spread_keeps_counts_sum_and_max() -> None:
    import random

    bounds = CHUNK_GAP_BUCKETS
    for seed in range(300):
        rng = random.Random(seed)
        values = [
            rng.choice((rng.uniform(0, 0.03), rng.expovariate(20), rng.uniform(0, 4), 0.0, 0.01, 2.5, 0.1))
            for _ in range(rng.randint(1, 400))
        ]
        counts = [0] * (len(bounds) + 1)
        for v in values:
            counts[bisect.bisect_left(bounds, v)] += 1
        pairs = spread(counts, sum(values), bounds, max(values))
        rebuilt = [0] * (len(bounds) + 1)
        for v, k in pairs:
            rebuilt[bisect.bisect_left(bounds, v)] += k
        assert rebuilt == counts, seed
        assert sum(v * k for v, k in pairs) == pytest.approx(sum(values), rel=1e-9, abs=1e-12), seed
        assert max(v for v, _ in pairs) == max(values), seed


def test_spread_of_nothing() -> None:
    assert spread([0] * 14, 0.0, CHUNK_GAP_BUCKETS, 0.0) == []


@pytest.mark.current_otel  # PrometheusMetricReader(registry=...)
@pytest.mark.parametrize("namespace", ["", "acme"])
def test_instrument_names_translate_to_the_native_names(namespace: str) -> None:
    """opentelemetry-exporter-prometheus turns every instrument into the native exporter's family,
    with ``Settings.metric_namespace`` too."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    from llmtap._exporters._health import HEALTH_METRIC_NAMES
    from llmtap._exporters.otel_metrics import OtelMetricsExporter
    from llmtap._exporters.prometheus import PrometheusExporter

    def families(registry: CollectorRegistry) -> set[str]:
        return {m.name + ("_total" if m.type == "counter" else "") for m in registry.collect()} - {"target"}

    native = CollectorRegistry()
    PrometheusExporter(native, namespace)
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    try:
        exporter = OtelMetricsExporter(provider, namespace=namespace)
        one = [  # one measurement of every instrument, its attributes all set
            (spec.key, 1.0, ("x",) * len(exporter.mapping.attributes[spec.key])) for spec in INSTRUMENTS
        ]
        exporter.write(("anthropic", "chat", "m"), one, None)
        translated = families(registry)
    finally:
        provider.shutdown()
    health = {f"{namespace}_{n}" if namespace else n for n in HEALTH_METRIC_NAMES}  # llmtap's own counters
    assert translated == families(native) == {i.prometheus(namespace) for i in INSTRUMENTS} | health
    assert ("acme_llmtap_attempts_total" in translated) == (namespace == "acme")


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [  # the otlptranslator's documented examples, and llmtap's own shapes
        ("http.server.request.duration", "s", HISTOGRAM, "http_server_request_duration_seconds"),
        ("requests.count", "1", COUNTER, "requests_count_total"),
        ("memory.usage", "By", GAUGE, "memory_usage_bytes"),
        ("cpu.utilization", "1", GAUGE, "cpu_utilization_ratio"),
        ("gen_ai.client.token.usage", "{token}", HISTOGRAM, "gen_ai_client_token_usage"),
        ("llmtap.total.things", "{thing}", COUNTER, "llmtap_things_total"),
        ("llmtap.wait_seconds", "s", HISTOGRAM, "llmtap_wait_seconds"),
        ("llmtap.streams_in_flight", "{stream}", UP_DOWN, "llmtap_streams_in_flight"),
    ],
)
def test_prometheus_name(name: str, unit: str, kind: str, expected: str) -> None:
    from llmtap._core.metrics import prometheus_name

    assert prometheus_name(name, unit, kind) == expected


@pytest.mark.current_otel  # counts record_counted's values (the fast path)
def test_gaps_are_recorded_at_collection_not_at_the_attempts_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The application's thread only merges bucket counts; the reader's collection records the gaps."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

    from llmtap._core.record import AttemptRecord, Usage
    from llmtap._exporters import _otel_bulk
    from llmtap._exporters.otel_metrics import OtelMetricsExporter

    counts = (3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)  # 6 gaps, one above the last bound
    fields: dict[str, object] = dict.fromkeys(AttemptRecord._fields)
    fields.update(attributes=(), attribute_labels=())
    fields.update(
        provider="anthropic", operation="chat", request_model="m", server_address="h", server_port=443,
        request_stream=True, outcome=Outcome.COMPLETED, status_code=200, streamed=True, started_at=0.0,
        first_chunk_at=0.1, first_token_at=0.2, ended_at=5.0, chunks=7, max_gap=3.0, stalls=0,
        gap_bucket_counts=counts, gap_sum=3.05, usage=Usage(), stop_reasons=(), rate_limit_headers=None, parse_errors=0,
    )  # fmt: skip
    record = AttemptRecord._make(fields[f] for f in AttemptRecord._fields)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        exporter = OtelMetricsExporter(provider)
        recorded: list[float] = []
        gap = exporter.instruments["gap"]
        original = gap.record

        def spy(value: float, attributes: Any = None, context: Any = None) -> None:
            recorded.append(value)
            original(value, attributes, context)

        gap.record = spy
        bulk, gap_instrument = _otel_bulk.record_counted, gap

        def bulk_spy(instrument: Any, attributes: Any, counted: Any, context: Any) -> None:
            if instrument is gap_instrument:  # values taken past record() (llmtap._exporters._otel_bulk)
                recorded.extend(value for value, count in counted for _ in range(count))
            bulk(instrument, attributes, counted, context)

        monkeypatch.setattr(_otel_bulk, "record_counted", bulk_spy)
        exporter.end(record, None)
        exporter.end(record, None)
        assert recorded == []  # nothing per gap on the application's thread
        data = reader.get_metrics_data()
        assert len(recorded) == 12  # positive control: the collection recorded every gap
        assert data is not None
        (gap,) = [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                  if m.name == "gen_ai.client.operation.time_per_output_chunk"]  # fmt: skip
        (point,) = gap.data.data_points
        assert isinstance(point, HistogramDataPoint)
        assert point.count == 12 and tuple(point.bucket_counts) == tuple(2 * c for c in counts)
        assert point.sum == pytest.approx(6.1) and point.max == 3.0
        names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        assert "llmtap.internal.gap_flush" not in names
    finally:
        provider.shutdown()


def _a_record(duration: float, span: Any = None) -> Any:
    """A finished non-stream attempt of ``duration`` seconds, without usage (one histogram value)."""
    from llmtap._core.record import AttemptRecord, Usage

    fields: dict[str, object] = dict.fromkeys(AttemptRecord._fields)
    fields.update(attributes=(), attribute_labels=())
    fields.update(
        provider="anthropic", operation="chat", request_model="m", server_address="h", server_port=443,
        request_stream=False, outcome=Outcome.COMPLETED, status_code=200, streamed=False, started_at=0.0,
        ended_at=duration, chunks=1, max_gap=0.0, stalls=0, gap_bucket_counts=(), gap_sum=0.0, usage=Usage(),
        stop_reasons=(), rate_limit_headers=None, parse_errors=0, span_context=span,
    )  # fmt: skip
    return AttemptRecord._make(fields[f] for f in AttemptRecord._fields)


@dataclass
class _Spied:
    exporter: Any
    reader: Any
    recorded: list[tuple[float, Any]]
    """(value, context) of every value recorded into the duration histogram."""

    def point(self) -> Any:
        """The duration histogram's data point of the next collection (None without one)."""
        data = self.reader.get_metrics_data()
        points = [
            p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == "gen_ai.client.operation.duration" for p in m.data.data_points
        ]  # fmt: skip
        assert len(points) <= 1
        return points[0] if points else None


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Spied]:
    """An OTel metrics exporter on a delta-temporality reader, its duration histogram's values spied on (through
    record() or past it, :mod:`llmtap._exporters._otel_bulk`)."""
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality as Temporality
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from llmtap._exporters import _otel_bulk
    from llmtap._exporters.otel_metrics import OtelMetricsExporter

    reader = InMemoryMetricReader(preferred_temporality={Histogram: Temporality.DELTA})
    provider = MeterProvider(metric_readers=[reader])
    exporter = OtelMetricsExporter(provider)
    recorded: list[tuple[float, Any]] = []
    duration = exporter.instruments["duration"]
    original = duration.record

    def spy(value: float, attributes: Any = None, context: Any = None) -> None:
        recorded.append((value, context))
        original(value, attributes, context)

    duration.record = spy
    bulk = _otel_bulk.record_many

    def bulk_spy(instrument: Any, attributes: Any, values: Any, context: Any) -> None:
        if instrument is not duration:
            return bulk(instrument, attributes, values, context)
        recorded.extend((value, context) for value in values)
        duration.record = original  # each value spied on once, whichever way it goes
        try:
            bulk(instrument, attributes, values, context)
        finally:
            duration.record = spy

    one = _otel_bulk.record_one

    def one_spy(instrument: Any, attributes: Any, value: float, context: Any) -> None:
        if instrument is not duration:
            return one(instrument, attributes, value, context)
        recorded.append((value, context))
        duration.record = original
        try:
            one(instrument, attributes, value, context)
        finally:
            duration.record = spy

    monkeypatch.setattr(_otel_bulk, "record_many", bulk_spy)
    monkeypatch.setattr(_otel_bulk, "record_one", one_spy)
    reader.get_metrics_data()  # a first collection: a reader exists, so ends wait for the next one
    try:
        yield _Spied(exporter, reader, recorded)
    finally:
        provider.shutdown()


def test_before_any_collection_nothing_waits() -> None:
    """With no reader yet (or ever: the API's no-op provider), an end is written at once and nothing is held."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from llmtap._exporters.otel_metrics import OtelMetricsExporter

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        exporter = OtelMetricsExporter(provider)
        shared = exporter._shared
        exporter.end(_a_record(0.5), None)
        exporter.end(_a_record(1.5), None)
        assert not shared._ended and shared._pending == 0  # nothing held
        assert sum(v for _, v in shared.totals["attempts"].values()) == 2  # written at once
        reader.get_metrics_data()
        exporter.end(_a_record(2.5), None)  # positive control: after a collection an end waits for the next
        assert len(shared._ended) == 1
        data: Any = reader.get_metrics_data()
        counts = [
            p.count for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == "gen_ai.client.operation.duration" for p in m.data.data_points
        ]  # fmt: skip
        assert counts == [3]  # cumulative: every value once
    finally:
        provider.shutdown()


def test_histogram_values_are_recorded_at_collection_not_at_the_attempts_end(spied: _Spied) -> None:
    """The application's thread only queues the record; the next collection writes and records it, into its
    own interval."""
    for duration in (0.5, 1.5, 2.5):
        spied.exporter.end(_a_record(duration), None)
    assert spied.recorded == []  # nothing on the application's thread
    point = spied.point()
    assert [v for v, _ in spied.recorded] == [0.5, 1.5, 2.5]  # positive control: the collection recorded them
    assert (point.count, point.sum, point.min, point.max) == (3, 4.5, 0.5, 2.5)
    spied.exporter.end(_a_record(4.0), None)
    point = spied.point()  # delta: the next interval holds only the value of its own attempt
    assert (point.count, point.sum) == (1, 4.0)
    assert spied.point() is None  # and an interval without attempts none


def test_queued_records_and_pending_values_are_bounded(spied: _Spied, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that does not collect costs no memory: past ENDED_MAX records an end writes the oldest, in one
    batch (their values pending, or recorded at once: the series' first); past PENDING_MAX values, they are
    recorded at once."""
    from llmtap._exporters import _otel_aggregation

    monkeypatch.setattr(_otel_aggregation, "ENDED_MAX", 2)
    monkeypatch.setattr(_otel_aggregation, "PENDING_MAX", 2)
    for duration in (0.5, 1.5, 2.5, 3.5, 4.5):
        spied.exporter.end(_a_record(duration), None)
        assert len(spied.exporter._shared._ended) <= 2
    # the third end writes the two queued (0.5: the series' first, recorded; 1.5 pending), the fifth the next two
    # (2.5 pending; 3.5 past PENDING_MAX, recorded)
    assert [v for v, _ in spied.recorded] == [0.5, 3.5]
    point = spied.point()
    assert [v for v, _ in spied.recorded] == [0.5, 3.5, 4.5, 1.5, 2.5]  # the queued two past PENDING_MAX
    assert (point.count, point.sum) == (5, 12.5)  # every value counted once
    spied.exporter.end(_a_record(0.5), None)
    assert len(spied.recorded) == 5  # control: the collection emptied the queue, 1 waits again
    assert spied.point().count == 1


def test_the_first_sampled_value_per_bucket_is_recorded_with_its_span(spied: _Spied) -> None:
    """Exemplars keep their trace and value: the first value of an interval per bucket that has a sampled
    span is recorded (at collection) with its span's context; the rest without."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanContext, TraceFlags

    spans = [SpanContext(i, i, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)) for i in (1, 2, 3)]
    spied.exporter.end(_a_record(0.5, spans[0]), None)
    spied.exporter.end(_a_record(0.5, spans[1]), None)  # the same bucket: without its span
    spied.exporter.end(_a_record(30.0, spans[2]), None)  # another bucket: with its span
    assert spied.recorded == []
    point = spied.point()
    traced = [(v, trace.get_current_span(c).get_span_context().trace_id) for v, c in spied.recorded]
    assert traced == [(0.5, 1), (30.0, 3), (0.5, 0)]
    assert point.count == 3
    assert sorted(e.trace_id for e in point.exemplars) == [1, 3]
    spied.exporter.end(_a_record(0.5, spans[1]), None)  # a new interval: its first value with its span again
    assert [e.trace_id for e in spied.point().exemplars] == [2]


def test_a_forked_child_does_not_report_its_parents_pending_values(spied: _Spied) -> None:
    """The parent reports the values pending at the fork; the child starts with none (and its lock free)."""
    import os

    spied.exporter.end(_a_record(0.5), None)
    assert spied.point().count == 1
    spied.exporter.end(_a_record(0.5), None)  # queued at the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            spied.exporter.end(_a_record(1.5), None)
            point = spied.point()
            os.write(write, f"{point.count} {point.sum}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as child:
        assert child.read() == "1 1.5"  # the child's own value only
    os.waitpid(pid, 0)
    point = spied.point()
    assert (point.count, point.sum) == (1, 0.5)  # control: the parent's pending value, once, in the parent


def test_chunk_gaps_are_recorded_over_otel_only_when_asked() -> None:
    """The per-chunk gap histogram costs one SDK record() per chunk on the OTel path: off by default,
    on with Settings.otel_time_per_output_chunk (the positive control), every other instrument either way."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from llmtap._core.observer import AttemptObserver, Ending
    from llmtap._exporters.otel_metrics import OtelMetricsExporter
    from llmtap._providers.anthropic import PROVIDER
    from tests.support.replay import CONFIG, START

    observer = AttemptObserver(START._replace(provider="anthropic"), PROVIDER, CONFIG)
    observer.on_response(200, [(b"content-type", b"text/event-stream")], 0.0)
    for i in range(5):
        observer.on_chunk(b"event: ping\ndata: {}\n\n", 0.1 * (i + 1))
    record = observer.end(Ending.EOF, 0.6)
    assert record is not None and record.chunks == 5
    seen = {}
    for chunk_gaps in (False, True):
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        exporter = OtelMetricsExporter(provider, chunk_gaps=chunk_gaps)
        exporter.end(record, exporter.start(START))
        data = reader.get_metrics_data()
        assert data is not None
        seen[chunk_gaps] = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        provider.shutdown()
    gap = "gen_ai.client.operation.time_per_output_chunk"
    assert gap not in seen[False] and gap in seen[True]
    assert seen[True] - {gap} == seen[False]


# ---------------------------------------------------------------------------------------------
# Delta temporality (Datadog, Dynatrace): the standard OTLP preference, exact per export
# ---------------------------------------------------------------------------------------------


def _delta_to_native(exports: list[dict[str, Metric]]) -> tuple[dict[Key, float], dict[Key, Hist]]:
    """Sum delta exports into the cumulative Prometheus view (up-down counters and gauges are not deltas:
    the last export's value stands)."""
    scalars: dict[Key, float] = {}
    hists: dict[Key, Hist] = {}
    cumulative_kinds = {spec.prometheus() for spec in INSTRUMENTS if spec.kind in (UP_DOWN, GAUGE)}
    for metrics in exports:
        export_scalars, export_hists = otlp_series(metrics)
        for key, value in export_scalars.items():
            scalars[key] = value if key[0] in cumulative_kinds else scalars.get(key, 0.0) + value
        for key, h in export_hists.items():
            seen = hists.get(key)
            hists[key] = (
                h
                if seen is None
                else Hist(
                    seen.count + h.count,
                    seen.total + h.total,
                    tuple(a + b for a, b in zip(seen.buckets, h.buckets, strict=True)),
                )
            )
    return scalars, hists


def test_delta_temporality_is_exact_per_export(
    sim: Simulator, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta``: counters and histograms arrive as
    deltas; each export carries exactly what happened since the one before (the native exporter's
    difference between two scrapes), and their sum is the native exporter's totals."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
    sim.clear()
    registry = CollectorRegistry()
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=receiver.endpoint + "/v1/metrics", timeout=10), export_interval_millis=3_600_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "llmtap-delta"}))
    settings = llmtap.Settings(
        base_urls=(sim.base_url,), traces=False, stall_threshold_seconds=0.15, otel_time_per_output_chunk=True
    )
    llmtap.instrument(settings, registry=registry, meter_provider=provider)
    natives = []
    try:
        for _ in range(2):
            run_mix(sim)
            assert provider.force_flush(10_000)
            natives.append(native_series(registry))
    finally:
        llmtap.uninstrument()
        provider.shutdown()
    exports = []
    for request in receiver.metrics()[-3:]:  # the two flushes, then the shutdown's (nothing new)
        (rm,) = request.resource_metrics
        if rm.resource.attributes and any(kv.value.string_value == "llmtap-delta" for kv in rm.resource.attributes):
            (sm,) = rm.scope_metrics
            exports.append({m.name: m for m in sm.metrics})
    first, second = exports[0], exports[1]
    attempts = first["llmtap.attempts"]
    assert attempts.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    assert attempts.sum.is_monotonic
    duration = first["gen_ai.client.operation.duration"]
    assert duration.histogram.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    # per export: the first equals the first scrape, the second the difference (counters, every series)
    counters = {spec.prometheus() for spec in INSTRUMENTS if spec.kind == COUNTER}
    (s1, _), (s2, h2) = natives
    e1, _ = otlp_series(first)
    e2, _ = otlp_series(second)
    assert {k: v for k, v in e1.items() if k[0] in counters and v} == {
        k: v for k, v in s1.items() if k[0] in counters and v
    }
    assert {k: v for k, v in e2.items() if k[0] in counters and v} == {
        k: s2[k] - s1.get(k, 0.0) for k in s2 if k[0] in counters and s2[k] - s1.get(k, 0.0)
    }
    assert sum(v for k, v in e2.items() if k[0] == "llmtap_attempts_total") == sum(
        len(m.outcomes) * m.times for m in MIX
    )
    # summed over the exports: the native totals, histograms included
    scalars, hists = _delta_to_native(exports)
    assert {k: v for k, v in scalars.items() if v} == {k: v for k, v in s2.items() if v}
    assert {k: (h.count, h.buckets) for k, h in hists.items() if h.count} == {
        k: (h.count, h.buckets) for k, h in h2.items()
    }


@pytest.mark.parametrize(
    ("generation", "present", "absent"),
    [
        ("legacy", {"gen_ai_client_token_usage"}, {"gen_ai_client_inference_operation_input_tokens"}),
        ("latest", {"gen_ai_client_inference_operation_input_tokens"}, {"gen_ai_client_token_usage"}),
        ("both", {"gen_ai_client_token_usage", "gen_ai_client_inference_operation_output_tokens"}, set()),
    ],
)
def test_genai_semconv_generations(sim: Simulator, generation: str, present: set[str], absent: set[str]) -> None:
    from llmtap.testing import capture

    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), traces=False, genai_semconv=generation)  # type: ignore[arg-type]
    with capture(settings) as cap:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
        client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        client.close()
        families = {m.name for m in cap.registry.collect() if any(s.value for s in m.samples)}
    assert present <= families
    assert not absent & families


def _attempts_total(spied: _Spied) -> float:
    """llmtap.attempts summed over the series of one collection (cumulative counters)."""
    data = spied.reader.get_metrics_data()
    return sum(
        float(p.value) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == "llmtap.attempts" for p in m.data.data_points
    )  # fmt: skip


def test_counters_of_queued_records_are_reported_by_the_same_collection(spied: _Spied) -> None:
    """The queue is written by the collection's first callback, before the counters are observed."""
    totals = spied.exporter._shared.totals["attempts"]
    spied.exporter.end(_a_record(0.5), None)
    assert sum(v for _, v in totals.values()) == 0  # queued: nothing folded on the application's thread
    assert _attempts_total(spied) == 1  # positive control: that collection reports it
    assert _attempts_total(spied) == 1  # once


def test_ends_racing_collections_are_each_counted_once(spied: _Spied, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ends on several threads (queued, and written past a small ENDED_MAX) while another thread collects."""
    from llmtap._exporters import _otel_aggregation
    from tests.support.race import ends_racing_reads

    monkeypatch.setattr(_otel_aggregation, "ENDED_MAX", 16)
    threads, each = 4, 500
    seen = ends_racing_reads(
        lambda: spied.exporter.end(_a_record(0.5), None), lambda: _attempts_total(spied), threads, each
    )
    assert seen == sorted(seen)  # never counted back
    assert _attempts_total(spied) == threads * each


def test_by_default_the_meter_path_is_on_only_with_a_meter_provider(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No meter provider (the API's stand-in): no OpenTelemetry metrics exporter, said once at INFO; a provider
    given, a global one set, or the setting made explicitly: on."""
    import logging

    from opentelemetry import metrics

    from llmtap import Settings
    from llmtap._exporters import otel_metrics_on
    from llmtap._log import _seen

    proxy = metrics.get_meter_provider()
    if type(proxy).__name__ != "_ProxyMeterProvider":
        pytest.skip("a global meter provider is set in this process")
    monkeypatch.setattr("llmtap._log._seen", set(_seen) - {"otel_metrics_off"})
    with caplog.at_level(logging.INFO, logger="llmtap"):
        assert otel_metrics_on(Settings(), None) is False
    assert "no OpenTelemetry meter provider is set" in caplog.text
    provider = MeterProvider()
    try:
        assert otel_metrics_on(Settings(), provider) is True  # positive control: one given
        assert otel_metrics_on(Settings(otel_metrics=True), None) is True  # explicit: through a later global one
        assert otel_metrics_on(Settings.from_env({"LLMTAP_OTEL_METRICS": "true"}), None) is True
        assert otel_metrics_on(Settings.from_env({"LLMTAP_OTEL_METRICS": "auto"}), None) is False  # the default
        assert otel_metrics_on(Settings.from_env({"LLMTAP_OTEL_METRICS": "Auto"}), provider) is True
        assert otel_metrics_on(Settings(otel_metrics=False), provider) is False
        monkeypatch.setattr(metrics, "get_meter_provider", lambda: provider)  # a global one set
        assert otel_metrics_on(Settings(), None) is True
    finally:
        provider.shutdown()


# ---------------------------------------------------------------------------------------------
# The OpenTelemetry SDK's version
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "warned"), [("1.30.0", True), ("1.43.0", True), ("1.44.0", False), (None, False)])
def test_an_sdk_older_than_the_floor_is_named_once_at_instrument(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, version: str | None, warned: bool
) -> None:
    """An SDK meter provider older than ``MIN_SDK`` (whose OTLP exporter gives llmtap's histograms the wrong
    buckets, and whose forked workers can export nothing) gets one warning naming the fix; the installed SDK
    (``None``: the version as it is, at or past the floor) gets none."""
    import opentelemetry.sdk.version

    from llmtap import _log

    if version is not None:
        monkeypatch.setattr(opentelemetry.sdk.version, "__version__", version)
    _log.reset()
    caplog.set_level("WARNING", logger="llmtap")
    for _ in range(2):  # two taps on two providers: still one warning
        llmtap.instrument(llmtap.Settings(prometheus=False, traces=False), meter_provider=MeterProvider())
        llmtap.uninstrument()
    lines = [r.getMessage() for r in caplog.records if "older than" in r.getMessage()]
    if warned:
        assert lines == [
            f"opentelemetry-sdk {version} is older than 1.44.0, which llmtap's OpenTelemetry metrics need: "
            "before 1.32 its OTLP exporter gives llmtap's histograms wrong buckets (its default ones, for "
            "milliseconds), and before 1.44 a worker forked while its parent exported can export no metric; "
            "upgrade it: pip install 'opentelemetry-sdk>=1.44.0'"
        ]
    else:
        assert lines == []


def test_the_extras_require_the_sdk_llmtap_s_metrics_are_right_on() -> None:
    """The ``otel``, ``probe`` and ``run`` extras' floor of the SDK is ``MIN_SDK``, the version the warning names;
    ``make compat`` runs on it and on the floor of every other package it pins (each as pyproject.toml states it)."""
    import re
    import tomllib
    from pathlib import Path

    from llmtap._exporters._otel_aggregation import MIN_SDK

    def version(text: str) -> tuple[int, ...]:
        numbers = tuple(int(n) for n in text.split("."))
        return numbers + (0,) * (3 - len(numbers))

    root = Path(__file__).parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    requirements = [*project["dependencies"], *(r for extra in extras for r in extra)]
    floors: dict[str, set[tuple[int, ...]]] = {}
    for requirement in requirements:
        found = re.fullmatch(r"([a-z0-9-]+)(?:\[[a-z,-]+\])?>=([\d.]+)", requirement)
        if found is not None:
            floors.setdefault(found.group(1), set()).add(version(found.group(2)))
    assert floors["opentelemetry-sdk"] == {MIN_SDK}
    pins = dict(re.findall(r"^COMPAT_([A-Z0-9_]+) \?= ([\w.]+)$", (root / "Makefile").read_text(), re.M))
    assert version(pins.pop("OTEL")) == MIN_SDK
    # every OpenTelemetry package's floor is the SDK's (1.x) or the contrib line's that make compat pins (0.x)
    contrib = pins.pop("OTEL_CONTRIB")
    otel_floors = {
        found.group(1): found.group(2)
        for requirement in requirements
        if (found := re.fullmatch(r"(opentelemetry-[a-z-]+)>=([\w.]+)", requirement))
    }
    assert otel_floors and "opentelemetry-exporter-prometheus" in otel_floors  # positive control
    for name, floor in otel_floors.items():
        assert floor == contrib if floor.startswith("0.") else version(floor) == MIN_SDK, (name, floor)
    # the legacy SDK line (make compat-legacy) lies below the extras' floors: it is tested as its own line
    legacy = {name: pins.pop(name) for name in [n for n in pins if n.startswith("LEGACY_")]}
    assert set(legacy) == {"LEGACY_ANTHROPIC", "LEGACY_OPENAI", "LEGACY_OPENAI_1"}
    assert version(legacy["LEGACY_ANTHROPIC"]) < version(pins["ANTHROPIC"])
    assert version(legacy["LEGACY_OPENAI_1"]) < version(legacy["LEGACY_OPENAI"]) < version(pins["OPENAI"])
    assert set(pins) == {
        "ANTHROPIC",
        "OPENAI",
        "PROMETHEUS_CLIENT",
        "HTTPX",
        "HTTPX2",
        "GENAI_PRICES",
        "AIOHTTP",
        "PYDANTIC",
    }
    for name, pinned in pins.items():
        assert floors[name.lower().replace("_", "-")] == {version(pinned)}, name


# ---------------------------------------------------------------------------------------------
# Exponential histograms (docs/guides/fleet.md): chosen where the meter provider is built
# ---------------------------------------------------------------------------------------------

EXPONENTIAL_INPUTS = (50, 120, 1000)
"""The input tokens of three calls of one model: 1,000/50 needs a coarser scale than the SDK's first (20)."""


def _exponential_index(value: float, scale: int) -> int:
    """The bucket of ``value`` at ``scale`` (OpenTelemetry's exponential histogram: bucket ``i`` holds
    ``(base**i, base**(i+1)]``, ``base = 2**(2**-scale)``); ``value`` not a power of two."""
    return math.ceil(math.log2(value) * 2.0**scale) - 1


def _exponential_scale(values: tuple[float, ...], max_size: int = 160) -> int:
    """The finest scale (at most 20, the SDK's start) at which ``values`` fit ``max_size`` buckets (the SDK's
    default), as the OpenTelemetry specification has the aggregation choose it."""
    for scale in range(20, -11, -1):
        indices = [_exponential_index(v, scale) for v in values]
        if max(indices) - min(indices) + 1 <= max_size:
            return scale
    raise AssertionError(values)


def _exponential_provider(route: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> MeterProvider:
    """A meter provider exporting OTLP to ``receiver``, llmtap's histograms made exponential by ``route``."""
    if route == "exporter variable":  # what the distro (llmtap run) and any OTLP exporter read
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "base2_exponential_bucket_histogram"
        )
        views: list[View] = []
    elif route == "view":  # llmtap's histograms only: the app's own keep their aggregation
        views = [
            View(instrument_type=Histogram, meter_name="llmtap", aggregation=ExponentialBucketHistogramAggregation())
        ]
    else:  # the fleet guide's mixed recipe: all but the histograms the shipped rules read
        exponential = ExponentialBucketHistogramAggregation()
        names = {i.name for i in INSTRUMENTS if i.kind == HISTOGRAM} - RULE_HISTOGRAMS
        views = [View(instrument_name=name, meter_name="llmtap", aggregation=exponential) for name in sorted(names)]
    exporter = OTLPMetricExporter(endpoint=receiver.endpoint + "/v1/metrics", timeout=10)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    return MeterProvider(metric_readers=[reader], views=views)


RULE_HISTOGRAMS: frozenset[str] = load_script("benchmarks/scale.py", "llmtap_bench_scale").RULE_HISTOGRAMS
"""What the shipped rules read of the histograms (kept explicit by the fleet guide's mixed recipe; checked
against the rules in ``test_scale.py``)."""


@pytest.mark.parametrize("route", ["exporter variable", "view", "mixed"])
def test_exponential_histograms_arrive_with_count_sum_and_scale(
    route: str, sim: Simulator, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the OTLP exporter's standard variable or a view on llmtap's meter, every llmtap histogram arrives
    as an exponential histogram (with the fleet guide's mixed views, every one but the three the rules read,
    which keep their buckets): the input tokens of three calls (known from the simulator) land in the
    buckets the specification's mapping gives them at the scale it chooses; count and sum of the duration
    equal the native exporter's, fed the same records; the counters stay counters."""
    sim.clear()
    registry = CollectorRegistry()
    provider = _exponential_provider(route, receiver, monkeypatch)
    llmtap.instrument(
        llmtap.Settings(base_urls=(sim.base_url,), traces=False), registry=registry, meter_provider=provider
    )
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    try:
        for n in EXPONENTIAL_INPUTS:
            client.messages.create(
                model="m-exp",
                max_tokens=16,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers=Scenario(tokens=4, input=n).headers(),
            )
        hi: Any = [{"role": "user", "content": "hi"}]
        for _ in client.messages.create(model="m-exp-stream", max_tokens=16, messages=hi, stream=True):
            pass  # a call's time to first token
        served = sim.wait_served(len(EXPONENTIAL_INPUTS) + 1, timeout=10)
        assert provider.force_flush(10_000)
        native = {  # before uninstrument() unregisters the families
            s.name: s.value
            for m in registry.collect()
            for s in m.samples
            if s.labels.get("gen_ai_request_model") == "m-exp" and s.name.startswith("gen_ai_client_operation_duration")
        }
    finally:
        client.close()
        llmtap.uninstrument()
        provider.shutdown()
    (rm,) = receiver.metrics()[-1].resource_metrics
    metrics = {m.name: m for sm in rm.scope_metrics for m in sm.metrics}
    histograms = {i.name for i in INSTRUMENTS if i.kind == HISTOGRAM} & set(metrics)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration", "llmtap.call.duration"} <= histograms
    kept = RULE_HISTOGRAMS & histograms if route == "mixed" else set()  # of those this traffic records
    assert {metrics[name].WhichOneof("data") for name in histograms - kept} == {"exponential_histogram"}
    assert {metrics[name].WhichOneof("data") for name in kept} <= {"histogram"}
    if kept:  # the rules' histograms keep the buckets the SLO and the alert count under
        (ttft,) = metrics["llmtap.call.time_to_first_token"].histogram.data_points
        assert list(ttft.explicit_bounds) == [float(b) for b in by_key()["call_ttft"].buckets]
    assert metrics["llmtap.attempts"].WhichOneof("data") == "sum"  # positive control: a view for histograms only

    inputs = tuple(float(s.input_tokens) for s in served if s.model == "m-exp")
    assert sorted(inputs) == sorted(EXPONENTIAL_INPUTS)  # the simulator's truth, what llmtap must have recorded
    (point,) = [
        p
        for p in metrics["gen_ai.client.token.usage"].exponential_histogram.data_points
        if attrs_of(p)["gen_ai.token.type"] == "input" and attrs_of(p)["gen_ai.request.model"] == "m-exp"
    ]
    scale = _exponential_scale(inputs)
    assert scale < 20  # the values made the aggregation rescale: the check below is not the trivial case
    assert (point.count, point.sum, point.min, point.max, point.zero_count) == (3, sum(inputs), 50, 1000, 0)
    assert point.scale == scale
    landed = {point.positive.offset + i: c for i, c in enumerate(point.positive.bucket_counts) if c}
    assert landed == Counter(_exponential_index(v, scale) for v in inputs)

    durations = [
        p for p in metrics["gen_ai.client.operation.duration"].exponential_histogram.data_points
        if attrs_of(p)["gen_ai.request.model"] == "m-exp"
    ]  # fmt: skip
    assert sum(p.count for p in durations) == native["gen_ai_client_operation_duration_seconds_count"] == 3
    assert math.isclose(sum(p.sum for p in durations), native["gen_ai_client_operation_duration_seconds_sum"])
