"""A stand-in for an OpenTelemetry Collector whose Prometheus exporter serves *native* histograms.

Why: Prometheus 2.42 (Debian's) has no OTLP receiver, and it ingests native histograms only from the protobuf
exposition format (with ``--enable-feature=native-histograms``), which prometheus-client cannot write. So this
module receives OTLP/HTTP metrics (``POST /v1/metrics``, protobuf, maybe gzip), keeps the latest point per
(metric name, data-point attributes) -- the SDK exports cumulative state, each export is the whole of it -- and
serves them at ``GET /metrics`` as length-delimited ``io.prometheus.client.MetricFamily`` messages, hand-encoded
from client_model v0.3.0's ``metrics.proto`` (proto2; the version Prometheus 2.42 vendors).

The translation is the Collector's ``prometheus`` exporter's (Prometheus' ``otlptranslator``): names by
:func:`llmtap._core.metrics.prometheus_name`, labels by :func:`~llmtap._core.metrics.label_name` plus
``otel_scope_name``/``otel_scope_version``, one ``target_info`` per resource; a monotonic Sum is a counter, a
non-monotonic Sum or a Gauge a gauge, an explicit-bucket Histogram a classic histogram, and an
ExponentialHistogram a native one:

* schema = the OTLP scale, downscaled to 8 first (OTLP index ``i`` -> ``i >> (scale - 8)``) when finer; a scale
  below -4 is refused (logged in :attr:`NativeCollector.errors`, the point not kept);
* OTLP bucket ``i`` covers ``(base**i, base**(i+1)]``, Prometheus' ``(base**(i-1), base**i]``: index + 1;
* the zero threshold is never 0 (at least 2**-128): Prometheus 2.42 takes a histogram with no buckets, zero
  count 0 and zero threshold 0 for a *classic* one -- and decides that for a whole family from its first metric.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # no stubs installed
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
)

from llmtap._core.metrics import COUNTER, GAUGE, HISTOGRAM, UP_DOWN, label_name, prometheus_name
from tests.support.otlp import posted_body, serving

__all__ = [
    "CONTENT_TYPE",
    "MAX_SCHEMA",
    "MIN_SCHEMA",
    "ZERO_THRESHOLD",
    "ClassicHistogram",
    "Kept",
    "MetricType",
    "NativeCollector",
    "NativeHistogram",
    "Series",
    "encode_family",
    "encode_histogram",
    "exposition",
    "native_collector",
    "native_histogram",
]

CONTENT_TYPE = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
MIN_SCHEMA = -4
MAX_SCHEMA = 8
ZERO_THRESHOLD = 2.0**-128
"""The smallest zero threshold written: > 0, so that even an empty histogram is taken for a native one."""


class MetricType:
    """client_model's ``MetricType`` enum (the values used here)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 4


# ---------------------------------------------------------------------------------------------
# The protobuf encoder (proto2: every field written is present; repeated scalars unpacked)
# ---------------------------------------------------------------------------------------------

_VARINT, _I64, _LEN = 0, 1, 2


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> int:
    return n * 2 if n >= 0 else -n * 2 - 1


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _uint(field: int, value: int) -> bytes:
    if value < 0:
        raise ValueError(f"field {field}: unsigned value {value} < 0")
    return _key(field, _VARINT) + _varint(value)


def _sint(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(_zigzag(value))


def _double(field: int, value: float) -> bytes:
    return _key(field, _I64) + struct.pack("<d", value)


def _bytes(field: int, value: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(value)) + value


def _string(field: int, value: str) -> bytes:
    return _bytes(field, value.encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# What is served, and its encoding
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NativeHistogram:
    """A native histogram as Prometheus stores it: spans of consecutive bucket indexes, delta-encoded counts."""

    count: int
    sum: float
    schema: int
    zero_threshold: float
    zero_count: int
    positive_spans: tuple[tuple[int, int], ...] = ()
    """(offset, length): the first offset is an absolute index, later ones the gap since the previous span."""
    positive_deltas: tuple[int, ...] = ()
    negative_spans: tuple[tuple[int, int], ...] = ()
    negative_deltas: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClassicHistogram:
    count: int
    sum: float
    buckets: tuple[tuple[float, int], ...]
    """(upper bound, cumulative count), increasing, ``+Inf`` last."""


@dataclass(frozen=True)
class Series:
    """One Prometheus metric (one label set) of a family."""

    family: str
    type: int
    help: str
    labels: tuple[tuple[str, str], ...]
    value: float | NativeHistogram | ClassicHistogram


def _spans(spans: Sequence[tuple[int, int]], deltas: Sequence[int], span_field: int, delta_field: int) -> bytes:
    out = [_bytes(span_field, _sint(1, offset) + _uint(2, length)) for offset, length in spans]
    return b"".join(out + [_sint(delta_field, d) for d in deltas])


def encode_histogram(h: NativeHistogram | ClassicHistogram) -> bytes:
    """A ``Histogram`` message, its fields in field-number order."""
    head = _uint(1, h.count) + _double(2, h.sum)
    if isinstance(h, ClassicHistogram):
        return head + b"".join(_bytes(3, _uint(1, count) + _double(2, bound)) for bound, count in h.buckets)
    return b"".join(
        [
            head,
            _sint(5, h.schema),
            _double(6, h.zero_threshold),
            _uint(7, h.zero_count),
            _spans(h.negative_spans, h.negative_deltas, 9, 10),
            _spans(h.positive_spans, h.positive_deltas, 12, 13),
        ]
    )


def _encode_metric(series: Series) -> bytes:
    out = [_bytes(1, _string(1, name) + _string(2, value)) for name, value in series.labels]
    if isinstance(series.value, NativeHistogram | ClassicHistogram):
        out.append(_bytes(7, encode_histogram(series.value)))
    elif series.type == MetricType.COUNTER:
        out.append(_bytes(3, _double(1, series.value)))
    else:
        out.append(_bytes(2, _double(1, series.value)))
    return b"".join(out)


def encode_family(name: str, help: str, type: int, metrics: Iterable[Series]) -> bytes:
    """A ``MetricFamily`` message."""
    head = _string(1, name) + (_string(2, help) if help else b"") + _key(3, _VARINT) + _varint(type)
    return head + b"".join(_bytes(4, _encode_metric(m)) for m in metrics)


def exposition(series: Iterable[Series]) -> bytes:
    """The delimited stream: each family (sorted by name, its metrics by labels) prefixed by its varint length."""
    families: dict[str, list[Series]] = {}
    for s in series:
        families.setdefault(s.family, []).append(s)
    out = []
    for name in sorted(families):
        members = sorted(families[name], key=lambda s: s.labels)
        body = encode_family(name, members[0].help, members[0].type, members)
        out.append(_varint(len(body)) + body)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# OTLP -> Prometheus
# ---------------------------------------------------------------------------------------------


def _buckets(offset: int, counts: Sequence[int], shift: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """OTLP buckets (from ``offset``) -> Prometheus spans and deltas, ``shift`` scales coarser; empty buckets
    are left out (one span per run of non-empty ones)."""
    merged: dict[int, int] = {}
    for k, count in enumerate(counts):
        if count:
            index = ((offset + k) >> shift) + 1
            merged[index] = merged.get(index, 0) + count
    spans: list[tuple[int, int]] = []
    deltas: list[int] = []
    end: int | None = None
    previous = 0
    for index in sorted(merged):
        if end == index:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((index if end is None else index - end, 1))
        end = index + 1
        deltas.append(merged[index] - previous)
        previous = merged[index]
    return tuple(spans), tuple(deltas)


def native_histogram(point: ExponentialHistogramDataPoint) -> NativeHistogram:
    """The native histogram of an OTLP exponential point; ValueError for a scale below -4."""
    if point.scale < MIN_SCHEMA:
        raise ValueError(f"scale {point.scale} is coarser than Prometheus' coarsest schema {MIN_SCHEMA}")
    shift = max(point.scale - MAX_SCHEMA, 0)
    positive = _buckets(point.positive.offset, point.positive.bucket_counts, shift)
    negative = _buckets(point.negative.offset, point.negative.bucket_counts, shift)
    return NativeHistogram(
        count=point.count,
        sum=point.sum,
        schema=point.scale - shift,
        zero_threshold=max(point.zero_threshold, ZERO_THRESHOLD),
        zero_count=point.zero_count,
        positive_spans=positive[0],
        positive_deltas=positive[1],
        negative_spans=negative[0],
        negative_deltas=negative[1],
    )


def _classic_histogram(point: HistogramDataPoint) -> ClassicHistogram:
    bounds = [*point.explicit_bounds, float("inf")]
    if len(point.bucket_counts) != len(bounds):
        raise ValueError(f"{len(point.bucket_counts)} bucket counts for {len(point.explicit_bounds)} bounds")
    cumulative, buckets = 0, []
    for bound, count in zip(bounds, point.bucket_counts, strict=True):
        cumulative += count
        buckets.append((bound, cumulative))
    return ClassicHistogram(point.count, point.sum, tuple(buckets))


def _plain(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_plain(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else ""


def _text(v: AnyValue) -> str:
    value = _plain(v)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _attributes(attributes: Iterable[KeyValue]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((kv.key, _text(kv.value)) for kv in attributes))


def _labels(attributes: Iterable[tuple[str, str]], extra: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """Prometheus labels; attributes that sanitize to one name are joined with ``;`` (as the translator does)."""
    merged: dict[str, list[str]] = {}
    for key, value in sorted(attributes):
        merged.setdefault(label_name(key), []).append(value)
    labels = {name: ";".join(values) for name, values in merged.items()}
    labels.update(extra or {})
    return tuple(sorted(labels.items()))


_CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


_Point = NumberDataPoint | HistogramDataPoint | ExponentialHistogramDataPoint
_Value = float | NativeHistogram | ClassicHistogram


@dataclass(frozen=True)
class _Translated:
    family: str
    type: int
    served: list[tuple[_Point, _Value]]
    refused: list[str]
    """One message per data point refused."""


def _value(point: _Point) -> _Value:
    if isinstance(point, NumberDataPoint):
        return point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)
    if isinstance(point, HistogramDataPoint):
        return _classic_histogram(point)
    return native_histogram(point)


def _translate(metric: Metric) -> _Translated:
    """One OTLP metric's points as Prometheus values, and why any of them cannot be served."""
    data = metric.WhichOneof("data")
    points: list[_Point]
    if data == "sum":
        kind = COUNTER if metric.sum.is_monotonic else UP_DOWN
        temporality, points = metric.sum.aggregation_temporality, list(metric.sum.data_points)
    elif data == "gauge":
        kind, temporality, points = GAUGE, _CUMULATIVE, list(metric.gauge.data_points)
    elif data == "histogram":
        kind, temporality = HISTOGRAM, metric.histogram.aggregation_temporality
        points = list(metric.histogram.data_points)
    elif data == "exponential_histogram":
        kind, temporality = HISTOGRAM, metric.exponential_histogram.aggregation_temporality
        points = list(metric.exponential_histogram.data_points)
    else:
        return _Translated("", 0, [], [f"{metric.name}: {data} is not served by this stand-in; not kept"])
    family = prometheus_name(metric.name, metric.unit, kind)
    type = {COUNTER: MetricType.COUNTER, HISTOGRAM: MetricType.HISTOGRAM}.get(kind, MetricType.GAUGE)
    if temporality != _CUMULATIVE:
        why = f"{metric.name}: {AggregationTemporality.Name(temporality)}, this stand-in keeps cumulative points only"
        return _Translated(family, type, [], [why] * len(points))
    served: list[tuple[_Point, _Value]] = []
    refused: list[str] = []
    for point in points:
        try:
            served.append((point, _value(point)))
        except ValueError as e:
            refused.append(f"{metric.name} {dict(_attributes(point.attributes))}: {e}; not kept")
    return _Translated(family, type, served, refused)


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """The latest point of one (metric name, data-point attributes), translated."""

    point: _Point
    series: Series
    resource: tuple[tuple[str, str], ...]
    """The resource's attributes."""
    scope: tuple[str, str]
    """The scope's name and version."""


class NativeCollector(ThreadingHTTPServer):
    """``POST /v1/metrics`` (OTLP/HTTP protobuf, maybe gzip) answered like a Collector, ``GET /metrics`` the
    latest point of every (metric name, attributes) in Prometheus' protobuf exposition."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.kept: dict[tuple[str, tuple[tuple[str, str], ...]], Kept] = {}
        self.errors: list[str] = []
        """What was not kept, and why (one message per metric refused)."""
        self.accepts: list[str] = []
        """The ``Accept`` header of every scrape."""

    @property
    def endpoint(self) -> str:
        """The base URL for OTLP (append ``/v1/metrics``)."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def metrics_url(self) -> str:
        return self.endpoint + "/metrics"

    @property
    def target(self) -> str:
        """``host:port``, for a scrape config."""
        return f"127.0.0.1:{self.server_address[1]}"

    def point(self, name: str, attributes: dict[str, str]) -> _Point | None:
        """The latest point kept for OTLP metric ``name`` with these (string) attributes."""
        with self.lock:
            kept = self.kept.get((name, tuple(sorted(attributes.items()))))
        return None if kept is None else kept.point

    def receive(self, request: ExportMetricsServiceRequest) -> tuple[int, list[str]]:
        """Keep the points of ``request``: (data points rejected, why)."""
        rejected, errors = 0, []
        for rm in request.resource_metrics:
            resource = _attributes(rm.resource.attributes)
            for sm in rm.scope_metrics:
                scope: InstrumentationScope = sm.scope
                for metric in sm.metrics:
                    translated = _translate(metric)
                    rejected += len(translated.refused)
                    errors.extend(translated.refused)
                    extra = {"otel_scope_name": scope.name, "otel_scope_version": scope.version}
                    with self.lock:
                        for point, value in translated.served:
                            attributes = _attributes(point.attributes)
                            labels = _labels(attributes, extra)
                            series = Series(translated.family, translated.type, metric.description, labels, value)
                            key = (metric.name, attributes)
                            self.kept[key] = Kept(point, series, resource, (scope.name, scope.version))
        with self.lock:
            self.errors.extend(errors)
        return rejected, errors

    def scrape(self) -> bytes:
        """Everything kept, plus one ``target_info`` per resource, encoded."""
        with self.lock:
            kept = list(self.kept.values())
        resources = {k.resource for k in kept}
        info = [Series("target_info", MetricType.GAUGE, "Target metadata", _labels(r), 1.0) for r in resources]
        return exposition([k.series for k in kept] + info)


class _Handler(BaseHTTPRequestHandler):
    server: NativeCollector

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != "/v1/metrics":
            self._reply(404, "text/plain", b"not found\n")
            return
        request = ExportMetricsServiceRequest()
        try:
            request.ParseFromString(posted_body(self))
        except (OSError, EOFError, DecodeError) as e:
            self._reply(400, "text/plain", f"undecodable ExportMetricsServiceRequest: {e!r}\n".encode())
            return
        rejected, errors = self.server.receive(request)
        response = ExportMetricsServiceResponse()
        if rejected:
            response.partial_success.CopyFrom(
                ExportMetricsPartialSuccess(rejected_data_points=rejected, error_message="; ".join(errors))
            )
        self._reply(200, "application/x-protobuf", response.SerializeToString())

    def do_GET(self) -> None:
        if self.path != "/metrics":
            self._reply(404, "text/plain", b"not found\n")
            return
        with self.server.lock:
            self.server.accepts.append(self.headers.get("Accept", ""))
        self._reply(200, CONTENT_TYPE, self.server.scrape())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def native_collector() -> Iterator[NativeCollector]:
    """A :class:`NativeCollector` serving on a thread for the duration of the block."""
    with serving(NativeCollector()) as server:
        yield server
