"""The fences around llmtap's fast paths into other packages' private state (``llmtap._fences``): each fast path
is taken on the versions it is tested on and nowhere else, decided once at set-up; the public API's path
exports the same data; and ``import llmtap`` survives a private name of OpenTelemetry's moving.

The version a fence reads is faked where ``importlib.metadata`` reports it (the input), not in the fence.
The fast paths: values past the OpenTelemetry SDK's ``Histogram.record()``, slimmed spans, chunk-gap buckets
merged into prometheus-client's histogram values (multiprocess mode), httpx's and httpx2's header items; and
the private suppression key.
The tests that take a fast path on the SDK installed now are marked ``current_otel`` where that path is
tested only on the newest SDK; the fallback tests run everywhere, ``make compat`` (SDK 1.44.0) included.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2
import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry

import llmtap
from llmtap import _fences
from llmtap._core.mapping import Buckets, Mapping, base_key
from llmtap._core.metrics import CHUNK_GAP_BUCKETS
from llmtap._core.observer import AttemptObserver
from llmtap._core.record import AttemptRecord, Outcome, Usage
from llmtap._core.stream import shells_for
from llmtap._exporters import _otel_bulk, _prometheus_multiprocess, _span_memory, build
from llmtap._exporters._prometheus_common import Family
from llmtap._exporters._prometheus_multiprocess import Objects
from llmtap._exporters.otel_metrics import OtelMetricsExporter
from llmtap._fences import HEADER_ITEMS, OTEL_BULK, PROMETHEUS_BUCKETS, SPAN_SLIM, parse
from llmtap._hooks.httpx_transport import _transport_classes
from llmtap.testing import RecordingSink
from tests.support.records import attempt_record
from tests.support.spans import Spans

ROOT = Path(__file__).resolve().parents[1]
SDK = "opentelemetry-sdk"

SetVersion = Callable[[str | None], None]


@pytest.fixture
def sdk_version(monkeypatch: pytest.MonkeyPatch) -> SetVersion:
    """Make ``importlib.metadata`` report this version of the OpenTelemetry SDK (``None``: not installed);
    every fence says its choice again."""
    real = metadata.version
    monkeypatch.setattr(_fences, "_said", set())

    def set_version(version: str | None) -> None:
        def fake(name: str) -> str:
            if name != SDK:
                return real(name)
            if version is None:
                raise metadata.PackageNotFoundError(name)
            return version

        monkeypatch.setattr(metadata, "version", fake)

    return set_version


# -- the fences themselves ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "bulk", "slim"),
    [
        ("1.45.2", True, True),  # the newest the suite runs: both fast paths
        ("1.44.0", False, True),  # make compat's floor: the bulk path's layout is not there yet
        ("1.45.1", False, True),
        ("1.43.0", False, False),
        ("1.45.3", False, False),
        ("1.46.0", False, False),
        ("2.0.0", False, False),
        ("1.45.2rc1", False, False),  # not a release the suite ran
        ("1.45.2.dev0", False, False),
        ("1.45.2+local", False, False),
        (None, False, False),  # not installed
    ],
)
def test_a_fence_is_open_on_its_tested_versions_only(
    sdk_version: SetVersion, version: str | None, bulk: bool, slim: bool
) -> None:
    sdk_version(version)
    assert (OTEL_BULK.open(), SPAN_SLIM.open()) == (bulk, slim)


def test_a_fence_says_once_at_debug_which_path_it_chose_and_why(
    sdk_version: SetVersion, caplog: pytest.LogCaptureFixture
) -> None:
    sdk_version("1.46.0")
    with caplog.at_level(logging.DEBUG, "llmtap"):
        assert not SPAN_SLIM.open() and not SPAN_SLIM.open()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "llmtap"]
    assert SPAN_SLIM.public in said and "opentelemetry-sdk 1.46.0 is outside the tested 1.44.0 to 1.45.2" in said
    caplog.clear()
    sdk_version("1.45.2")  # the control: the other way, said too (a fresh process's first word)
    with caplog.at_level(logging.DEBUG, "llmtap"):
        assert OTEL_BULK.open()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "llmtap"]
    assert OTEL_BULK.fast in said and "1.45.2 is within the tested 1.45.2 to 1.45.2" in said


def test_version_parsing_takes_final_releases_only() -> None:
    assert parse("1.45.2") == (1, 45, 2) and parse(" 1.44.0\n") == (1, 44, 0)
    assert [parse(v) for v in ("1.45", "1.45.2b1", "1.45.2.post1", "x", None)] == [None] * 5


def test_the_ranges_begin_at_the_floor_make_compat_runs() -> None:
    pins = dict(re.findall(r"^COMPAT_([A-Z0-9_]+) \?= ([\d.]+)$", (ROOT / "Makefile").read_text(), re.M))
    assert parse(pins["OTEL"]) == SPAN_SLIM.lowest
    assert parse(pins["PROMETHEUS_CLIENT"]) == PROMETHEUS_BUCKETS.lowest
    assert (
        parse(pins["HTTPX"]) == HEADER_ITEMS["httpx"].lowest and parse(pins["HTTPX2"]) == HEADER_ITEMS["httpx2"].lowest
    )
    assert OTEL_BULK.lowest == OTEL_BULK.highest == SPAN_SLIM.highest  # the bulk path: the newest only
    tested = re.search(r"^COMPAT_TESTS = .*?(?<!\\)$", (ROOT / "Makefile").read_text(), re.M | re.S)
    assert tested is not None and "tests/test_fences.py" in tested.group(0)  # the fallbacks run on the floor


@pytest.mark.current_otel  # the development venv's versions (make compat's venv holds the floors)
def test_the_ranges_end_at_the_versions_the_suite_runs_now() -> None:
    """Fails when a package of the development venv moves past its ranges: check the fast paths on it (this
    file, ``test_otel_bulk.py``, ``test_span_memory.py``, ``test_multiprocess.py``), then extend
    ``llmtap._fences``."""
    assert parse(metadata.version(SDK)) == OTEL_BULK.highest == SPAN_SLIM.highest
    assert parse(metadata.version("prometheus-client")) == PROMETHEUS_BUCKETS.highest
    assert all(parse(metadata.version(name)) == fence.highest for name, fence in HEADER_ITEMS.items())


# -- the bulk histogram path (_exporters/_otel_bulk.py) ----------------------------------------------


def _gaps(values: list[float]) -> dict[str, Any]:
    counts = [0] * (len(CHUNK_GAP_BUCKETS) + 1)
    for value in values:
        counts[bisect.bisect_left(CHUNK_GAP_BUCKETS, value)] += 1
    return {
        "gap_bucket_counts": tuple(counts),
        "gap_sum": sum(values),
        "max_gap": max(values),
        "chunks": len(values) + 1,
    }


def _records(batch: int, n: int = 12) -> list[AttemptRecord]:
    """Attempts whose every histogram has values: durations, first chunk and token, gaps, tokens, retry-after
    and errors vary; every other one has a sampled span (an exemplar), one an unsampled one."""
    out = []
    for i in range(n):
        k = batch * n + i
        span = None
        if i % 2 == 0:
            span = SpanContext(0x1000 + k, 0x2000 + k, is_remote=False, trace_flags=TraceFlags(1))
        elif i == 3:
            span = SpanContext(0x3000 + k, 0x4000 + k, is_remote=False, trace_flags=TraceFlags(0))
        failed = i % 5 == 4
        out.append(
            attempt_record(
                provider="anthropic",
                request_model="m-fence" if i % 3 else "m-other",
                started_at=0.0,
                ended_at=0.05 + 0.37 * k % 9.0,
                first_chunk_at=0.01 + 0.013 * k,
                first_token_at=0.02 + 0.017 * k,
                outcome=Outcome.REJECTED if failed else Outcome.COMPLETED,
                status_code=429 if failed else 200,
                error_type="rate_limit_error" if failed else None,
                retry_after=1.5 * i if failed else None,
                usage=Usage(input_tokens=10 * k + 1, output_tokens=3 * k),
                span_context=span,
                **_gaps([0.004 * (j + 1) + 0.03 * (k % 4) for j in range(i + 2)]),
            )
        )
    return out


class _Recorded:
    """An OTel metrics exporter on its own SDK meter provider, counting its histograms' ``record()`` calls."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.exporter = OtelMetricsExporter(self.provider)  # asks OTEL_BULK
        self.record_calls = 0
        for instrument in self.exporter.instruments.values():
            if hasattr(instrument, "record"):  # the histograms (counters and gauges are observable)
                self._count(instrument)

    def _count(self, instrument: Any) -> None:
        original = instrument.record

        def counted(value: float, attributes: Any = None, context: Any = None) -> None:
            self.record_calls += 1
            original(value, attributes, context)

        instrument.record = counted

    def feed(self, records: list[AttemptRecord]) -> None:
        for record in records:
            self.exporter.end(record, None)

    def collect(self) -> dict[tuple[str, frozenset[Any]], tuple[Any, ...]]:
        """Every data point of a collection: histograms (count, sum, min, max, buckets, exemplars without their
        time) and the rest (value), by metric name and attributes."""
        data = self.reader.get_metrics_data()
        points: dict[tuple[str, frozenset[Any]], tuple[Any, ...]] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        p = cast(Any, p)
                        key = (metric.name, frozenset((p.attributes or {}).items()))
                        if not hasattr(p, "bucket_counts"):
                            points[key] = (p.value,)
                            continue
                        exemplars = sorted(
                            (e.value, e.trace_id, e.span_id, tuple(sorted((e.filtered_attributes or {}).items())))
                            for e in p.exemplars
                        )
                        points[key] = (p.count, p.sum, p.min, p.max, tuple(p.bucket_counts), tuple(exemplars))
        return points

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def recorded() -> Iterator[Callable[[], _Recorded]]:
    made: list[_Recorded] = []

    def make() -> _Recorded:
        made.append(_Recorded())
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.fixture
def bulk_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the bulk path's functions called (they still do their work)."""
    calls: list[str] = []
    monkeypatch.setattr(_otel_bulk, "_disabled", False)  # a test elsewhere may have tripped the layout guard
    for name in ("record_many", "record_one", "record_counted"):
        original = getattr(_otel_bulk, name)

        def spy(*args: Any, _name: str = name, _original: Any = original) -> None:
            calls.append(_name)
            _original(*args)

        monkeypatch.setattr(_otel_bulk, name, spy)
    return calls


def _histograms(points: dict[tuple[str, frozenset[Any]], tuple[Any, ...]]) -> int:
    return sum(point[0] for point in points.values() if len(point) == 6)


@pytest.mark.current_otel  # the bulk path is tested on the newest SDK only (OTEL_BULK)
def test_histogram_values_go_past_record_on_the_tested_sdk(
    recorded: Callable[[], _Recorded], bulk_calls: list[str], sdk_version: SetVersion, caplog: pytest.LogCaptureFixture
) -> None:
    # (the SDK installed now: sdk_version is not called, its fixture only has the fence say its choice again)
    with caplog.at_level(logging.DEBUG, "llmtap"):
        made = recorded()
    assert made.exporter._shared.bulk  # chosen at set-up
    assert any(OTEL_BULK.fast in r.getMessage() for r in caplog.records)
    for batch in range(2):  # the first batch is written as it ends, the second at the collection
        made.feed(_records(batch))
        points = made.collect()
    assert _histograms(points) > 0  # the control: values were recorded
    assert made.record_calls == 0 and {"record_one", "record_many", "record_counted"} <= set(bulk_calls)


def test_histogram_values_go_through_record_outside_the_tested_sdk(
    recorded: Callable[[], _Recorded], bulk_calls: list[str], sdk_version: SetVersion, caplog: pytest.LogCaptureFixture
) -> None:
    sdk_version("1.46.0")
    with caplog.at_level(logging.DEBUG, "llmtap"):
        made = recorded()
    assert not made.exporter._shared.bulk
    assert any(OTEL_BULK.public in r.getMessage() and "1.46.0" in r.getMessage() for r in caplog.records)
    for batch in range(2):
        made.feed(_records(batch))
        points = made.collect()
    assert bulk_calls == []
    assert made.record_calls == _histograms(points) > 0  # every value through record(), and there were some


@pytest.mark.current_otel  # takes the bulk path on one side
def test_the_bulk_path_and_record_export_the_same(
    recorded: Callable[[], _Recorded], bulk_calls: list[str], sdk_version: SetVersion
) -> None:
    """The same attempts through the fast path and through ``record()``: every collection's data points equal,
    histograms' buckets, count, sum, min, max and exemplars included."""
    fast = recorded()
    sdk_version("1.46.0")
    public = recorded()
    assert fast.exporter._shared.bulk and not public.exporter._shared.bulk
    for batch in range(3):
        records = _records(batch)
        fast.feed(records)
        public.feed(records)
        fast_points, public_points = fast.collect(), public.collect()
        assert fast_points == public_points, batch
        assert any(point[5] for point in public_points.values() if len(point) == 6)  # exemplars were compared
    assert _histograms(public_points) > 0 and public.record_calls > 0 and fast.record_calls == 0
    assert {"record_one", "record_many", "record_counted"} <= set(bulk_calls)  # both paths were taken


# -- the span slimmer (_exporters/_span_memory.py, Settings.slim_spans) -------------------------------


def _is_slim(span: ReadableSpan) -> bool:
    return span._events == () and type(span._attributes) is _span_memory._Attributes


def _is_the_sdk_s(span: ReadableSpan) -> bool:
    return type(span._events) is BoundedList and type(span._attributes) is BoundedAttributes


def _attempts(spans: Spans) -> tuple[ReadableSpan, ...]:
    spans.attempt(operation="chat", request_model="claude", request_stream=True, first_chunk_at=0.2)
    spans.attempt(call_id="c-1", outcome=Outcome.REJECTED, status_code=429, error_type="rate_limit_error")
    spans.attempt(call_id="c-1", resend_count=1, attributes=(("feature", "search"),))  # links to the first
    spans.attempt(usage=Usage(input_tokens=7, output_tokens=2, cache_read_tokens=3), stop_reasons=("end_turn",))
    return spans.finished()


def test_spans_are_slimmed_only_when_asked() -> None:
    """Off by default: llmtap's spans reach the span processors as the SDK made them."""
    assert llmtap.Settings().slim_spans is False
    assert llmtap.Settings.from_env({"LLMTAP_SLIM_SPANS": "true"}).slim_spans is True
    for slim_spans in (False, True):
        exporters = build(llmtap.Settings(prometheus=False, otel_metrics=False, slim_spans=slim_spans))
        try:
            assert exporters.spans is not None and (exporters.spans._slimmer is not None) is slim_spans
        finally:
            exporters.close()
    default, asked = Spans(), Spans(slim=True)
    try:
        assert all(_is_the_sdk_s(span) for span in _attempts(default))
        assert any(_is_slim(span) for span in _attempts(asked))  # the control: asked for, on a tested SDK
    finally:
        default.provider.shutdown()
        asked.provider.shutdown()


def test_spans_are_slimmed_on_the_tested_sdk(sdk_version: SetVersion, caplog: pytest.LogCaptureFixture) -> None:
    """The fast path taken on the SDK installed now (1.45.2, or 1.44.0 in ``make compat``: both ends; the
    ``sdk_version`` fixture only has the fence say its choice again)."""
    with caplog.at_level(logging.DEBUG, "llmtap"):
        spans = Spans(slim=True)
    try:
        assert spans.exporter._slimmer is not None
        assert any(SPAN_SLIM.fast in r.getMessage() for r in caplog.records)
        assert all(_is_slim(span) for span in _attempts(spans))
    finally:
        spans.provider.shutdown()


def test_spans_keep_the_sdk_s_containers_outside_the_tested_sdk(
    sdk_version: SetVersion, caplog: pytest.LogCaptureFixture
) -> None:
    sdk_version("1.46.0")
    with caplog.at_level(logging.DEBUG, "llmtap"):
        spans = Spans(slim=True)
    try:
        assert spans.exporter._slimmer is None
        assert any(SPAN_SLIM.public in r.getMessage() and "1.46.0" in r.getMessage() for r in caplog.records)
        done = _attempts(spans)
        assert len(done) == 4 and all(_is_the_sdk_s(span) for span in done)
    finally:
        spans.provider.shutdown()


def _read(span: ReadableSpan, names: dict[int, str]) -> tuple[Any, ...]:
    """What a span processor reads of ``span`` through the public API (ids as the names of the spans in
    ``names``), and its OTLP encoding without the ids."""
    proto = encode_spans([span]).resource_spans[0].scope_spans[0].spans[0]
    for field in ("trace_id", "span_id", "parent_span_id"):
        proto.ClearField(field)
    for link in proto.links:
        link.ClearField("trace_id")
        link.ClearField("span_id")
    as_json = {key: value for key, value in json.loads(span.to_json()).items() if key not in ("context", "links")}
    links = [(names[link.context.span_id], dict(link.attributes or {})) for link in span.links]
    return (
        span.name, span.kind, span.start_time, span.end_time, span.status.status_code, span.status.description,
        type(span.attributes), dict(span.attributes or {}), type(span.events), span.events, links,
        span.dropped_attributes, span.dropped_events, span.dropped_links, as_json,
        proto.SerializeToString(deterministic=True),
    )  # fmt: skip


def test_slimmed_and_untouched_spans_read_the_same() -> None:
    """The same attempts through a slimming exporter and a default one: every span reads and encodes the same."""
    slim, plain = Spans(slim=True), Spans()
    try:
        slimmed, untouched = _attempts(slim), _attempts(plain)
        assert any(_is_slim(span) for span in slimmed) and all(_is_the_sdk_s(span) for span in untouched)
        for done in (slimmed, untouched):
            assert any(span.links for span in done) and any(span.status.description for span in done)
        names_of = [{span.context.span_id: span.name for span in done if span.context} for done in (slimmed, untouched)]
        assert [_read(span, names_of[0]) for span in slimmed] == [_read(span, names_of[1]) for span in untouched]
    finally:
        slim.provider.shutdown()
        plain.provider.shutdown()


# -- chunk-gap histograms in prometheus-client's multiprocess mode (_exporters/_prometheus_multiprocess.py) --


class _Store:
    """The multiprocess mode's store (its metric objects, here on plain values in a registry of their own),
    written the records of :func:`_records`; the spies count which way the gaps went."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        mapping = Mapping(())
        families = {i.key: Family(i, "", ()) for i in mapping.instruments}
        self.gap_family = families["gap"].name
        self.gap_labels = families["gap"].labels
        self.objects = Objects(families, mapping, self.registry, created_series=False)  # asks PROMETHEUS_BUCKETS
        self.mapping = mapping

    def write(self, records: list[AttemptRecord]) -> None:
        for record in records:
            self.objects.write(base_key(record), self.mapping.end(record), None)

    def gaps(self) -> dict[tuple[str, frozenset[Any]], float]:
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in self.registry.collect()
            if family.name == self.gap_family
            for sample in family.samples
        }


@pytest.fixture
def gap_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("_merge_histogram", "_observe_each"):
        original = getattr(_prometheus_multiprocess, name)

        def spy(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(_prometheus_multiprocess, name, spy)
    return calls


def test_gap_buckets_are_merged_on_the_tested_prometheus_client(
    gap_calls: list[str], sdk_version: SetVersion, caplog: pytest.LogCaptureFixture
) -> None:
    """The fast path on the prometheus-client installed now (0.26.0, or 0.20.0 in ``make compat``: both ends;
    ``sdk_version`` only has the fences say their choice again)."""
    with caplog.at_level(logging.DEBUG, "llmtap"):
        store = _Store()
    assert store.objects._merge and any(PROMETHEUS_BUCKETS.fast in r.getMessage() for r in caplog.records)
    store.write(_records(0))
    assert set(gap_calls) == {"_merge_histogram"}
    assert sum(v for (name, _), v in store.gaps().items() if name.endswith("_count")) > 0  # the control


def test_gap_buckets_are_observed_one_by_one_outside_the_tested_prometheus_client(
    gap_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = metadata.version
    monkeypatch.setattr(_fences, "_said", set())
    monkeypatch.setattr(metadata, "version", lambda name: "0.27.0" if name == "prometheus-client" else real(name))
    store = _Store()
    assert not store.objects._merge
    store.write(_records(0))
    assert set(gap_calls) == {"_observe_each"}
    assert sum(v for (name, _), v in store.gaps().items() if name.endswith("_count")) > 0  # the control


def test_merged_and_observed_gap_buckets_expose_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same attempts' gaps merged and observed one by one: the same bucket counts and count, the same sum
    (the observed values add up to it, to the last bits of a float)."""
    merged = _Store()
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.27.0" if name == "prometheus-client" else real(name))
    observed = _Store()
    assert merged.objects._merge and not observed.objects._merge
    for batch in range(2):
        merged.write(_records(batch))
        observed.write(_records(batch))
    merged_gaps, observed_gaps = merged.gaps(), observed.gaps()
    assert merged_gaps.keys() == observed_gaps.keys()
    sums = [key for key in merged_gaps if key[0].endswith("_sum")]
    assert sums and all(merged_gaps[key] == pytest.approx(observed_gaps[key], rel=1e-12) for key in sums)
    assert {k: v for k, v in merged_gaps.items() if k not in sums} == {
        k: v for k, v in observed_gaps.items() if k not in sums
    }
    assert sum(v for (name, _), v in observed_gaps.items() if name.endswith("_count")) > 0  # the control


def test_a_histogram_laid_out_otherwise_is_observed_one_by_one() -> None:
    """The second guard, inside the range: a histogram without the values the merge adds to."""
    store = _Store()
    child = store.objects._metrics["gap"].labels(*("x" for _ in store.gap_labels))
    counts = (2,) + (0,) * len(CHUNK_GAP_BUCKETS)
    assert _prometheus_multiprocess._merge_histogram(child, Buckets(counts, 0.01, 0.006))  # the control
    assert not _prometheus_multiprocess._merge_histogram(object(), Buckets(counts, 0.01, 0.006))  # type: ignore[arg-type]


# -- httpx / httpx2 response headers (_core/stream.py) ----------------------------------------------------

CLIENTS = {"httpx": httpx, "httpx2": httpx2}
HEADER_FIELDS = (
    "status_code", "outcome", "error_type", "request_id", "response_id", "response_model", "retry_after",
    "server_time", "rate_limit_headers", "rate_limits", "usage", "stop_reasons", "streamed", "parse_errors",
)  # fmt: skip
"""What a record takes from the response's headers (and what follows from reading them right)."""


@pytest.fixture
def fresh_shells() -> Iterator[None]:
    """The stream shells (which ask the fence, once per client module) and ``wrap_transport``'s classes made
    anew for the test, and after it."""
    _fresh_shells()
    yield
    _fresh_shells()


def _fresh_shells() -> None:
    shells_for.cache_clear()
    _transport_classes.cache_clear()


@pytest.fixture
def header_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``on_response`` per public read (the raw pairs), ``on_header_items`` per read at all."""
    calls: list[str] = []
    for name in ("on_response", "on_header_items"):
        original = getattr(AttemptObserver, name)

        def spy(self: Any, *args: Any, _name: str = name, _original: Any = original) -> None:
            calls.append(_name)
            _original(self, *args)

        monkeypatch.setattr(AttemptObserver, name, spy)
    return calls


_BASE = "http://llm.test"
_MESSAGE = {
    "id": "msg_fixed", "type": "message", "role": "assistant", "model": "m-headers",
    "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 2},
}  # fmt: skip
_LIMITS = {
    "Anthropic-RateLimit-Requests-Limit": "4000",
    "anthropic-ratelimit-requests-remaining": "3999",
    "anthropic-ratelimit-requests-reset": "2026-12-06T00:00:00Z",
    "anthropic-ratelimit-tokens-remaining": "garbage",
}
"""Mixed-case names (the raw and lower-case forms differ) and a value the check refuses."""


def _answer(request: Any) -> tuple[int, dict[str, str], dict[str, Any]]:
    if request.headers.get("x-answer") == "429":
        error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        return 429, {"Request-Id": "req_429", "Retry-After": "2", **_LIMITS}, error
    return 200, {"Request-Id": "req_200", **_LIMITS}, _MESSAGE


def _headers_of(client: str) -> list[tuple[Any, ...]]:
    """A completed and a rate-limited request through ``wrap_transport`` of ``client`` (fixed answers: the same
    bytes each time): what their records took from the headers."""
    module = CLIENTS[client]

    class Fixed(module.BaseTransport):  # type: ignore[name-defined,misc]
        def handle_request(self, request: Any) -> Any:
            status, headers, body = _answer(request)
            return module.Response(status, headers=headers, json=body)

    sink = RecordingSink()
    tap = llmtap.Tap(llmtap.Settings(base_urls=(_BASE,)), [sink])
    body = {"model": "m-headers", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    with module.Client(transport=llmtap.wrap_transport(Fixed(), tap)) as http:
        for answer in ("200", "429"):
            http.post(_BASE + "/v1/messages", json=body, headers={"x-answer": answer}).read()
    sink.wait(2)
    return [tuple(getattr(record, field) for field in HEADER_FIELDS) for record in sink.records]


@pytest.mark.parametrize("client", CLIENTS)
def test_headers_are_read_as_the_client_keeps_them_on_its_tested_versions(
    client: str, fresh_shells: None, header_calls: list[str], sdk_version: SetVersion
) -> None:
    """The fast path on the client installed now (both ends of its range in the two venvs; ``sdk_version`` only
    has the fences say their choice again)."""
    assert all(shell.header_items for shell in shells_for(CLIENTS[client]))  # type: ignore[attr-defined]
    records = _headers_of(client)
    assert len(records) == 2 and header_calls == ["on_header_items"] * 2


@pytest.mark.parametrize(("client", "newer"), [("httpx", "0.30.0"), ("httpx2", "2.18.0")])
def test_headers_are_read_from_the_raw_pairs_outside_the_tested_versions(
    client: str,
    newer: str,
    fresh_shells: None,
    header_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = metadata.version
    monkeypatch.setattr(_fences, "_said", set())
    monkeypatch.setattr(metadata, "version", lambda name: newer if name == client else real(name))
    assert not any(shell.header_items for shell in shells_for(CLIENTS[client]))  # type: ignore[attr-defined]
    records = _headers_of(client)
    assert len(records) == 2 and header_calls == ["on_response", "on_header_items"] * 2


@pytest.mark.parametrize(("client", "newer"), [("httpx", "0.30.0"), ("httpx2", "2.18.0")])
def test_headers_read_either_way_give_the_same_records(
    client: str,
    newer: str,
    fresh_shells: None,
    header_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = _headers_of(client)
    _fresh_shells()
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: newer if name == client else real(name))
    public = _headers_of(client)
    assert "on_response" in header_calls and header_calls[0] == "on_header_items"  # each way was taken
    assert fast == public
    completed, failed = public  # the control: the headers were read
    assert (completed[HEADER_FIELDS.index("request_id")], failed[HEADER_FIELDS.index("request_id")]) == (
        "req_200",
        "req_429",
    )
    assert failed[HEADER_FIELDS.index("retry_after")] == 2.0 and failed[HEADER_FIELDS.index("status_code")] == 429
    assert completed[HEADER_FIELDS.index("rate_limit_headers")] and completed[HEADER_FIELDS.index("parse_errors")]


# -- the private suppression key (_core/tap.py) -------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import json, sys

    import opentelemetry.sdk.trace.export  # these hold the key they imported, as an SDK moved with the API would
    import opentelemetry.sdk.trace.export.in_memory_span_exporter
    from opentelemetry import context
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    private = context._SUPPRESS_INSTRUMENTATION_KEY
    mode = sys.argv[1]
    if mode != "present":
        del context._SUPPRESS_INSTRUMENTATION_KEY  # the API moved it
    if mode == "gone":
        sys.modules["opentelemetry.instrumentation.utils"] = None  # and no public check to fall back on

    import httpx2

    import llmtap
    from llmtap._core import tap
    from llmtap.simulator import Scenario, Simulator
    from llmtap.testing import capture

    body = {"max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
    headers = {"x-api-key": "k", **Scenario(tokens=2).headers()}

    def send(model):
        with httpx2.Client() as client:
            assert client.post(sim.base_url + "/v1/messages", json={**body, "model": model}, headers=headers).is_success

    def under(key, model):
        token = context.attach(context.set_value(key, True))
        try:
            send(model)
        finally:
            context.detach(token)

    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap:
        if mode != "gone":
            with suppress_instrumentation():
                send("m-suppressed")
        under("suppress_instrumentation", "m-plain-key")
        under(private, "m-private-key")
        send("m-observed")
        cap.wait(1)
        models = sorted(record.request_model for record in cap.records)
    print(json.dumps({"fallback": tap._SUPPRESS_KEY != private, "models": models}))
    """
)


@pytest.mark.parametrize(
    ("mode", "fallback", "models"),
    [
        ("present", False, ["m-observed"]),  # the control: the key where it is today
        ("moved", True, ["m-observed"]),  # the public is_instrumentation_enabled() reads the key it moved to
        ("gone", True, ["m-observed", "m-private-key"]),  # no public check: the plain key alone
    ],
)
def test_import_and_instrument_survive_the_private_suppress_key_moving(
    mode: str, fallback: bool, models: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"fallback": fallback, "models": models}


def test_make_test_installs_the_top_of_each_range() -> None:
    """``tests/constraints.txt`` pins what ``make test`` installs of each fenced package at its range's top, so
    CI runs every fast path where it is taken whatever upstream releases meanwhile."""
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "tests" / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert parse(pins[SDK]) == OTEL_BULK.highest == SPAN_SLIM.highest
    assert parse(pins["prometheus-client"]) == PROMETHEUS_BUCKETS.highest
    assert all(parse(pins[name]) == fence.highest for name, fence in HEADER_ITEMS.items())
