"""OpenTelemetry metrics exporter: every llmtap measurement through a meter provider.

For platform teams shipping telemetry over OTLP (to an OpenTelemetry Collector, Mimir, Prometheus'
OTLP receiver ...) instead of scraping. The instruments are the same as the Prometheus exporter's,
read from one table (``llmtap._core.metrics.INSTRUMENTS``), with the same meaning and bucket boundaries;
their names, units and attributes translate to exactly the Prometheus names the shipped dashboards
and alert rules query (README: "Metric names through OpenTelemetry").

Differences from the native exporter, all invisible to the shipped queries:

* attributes that have no value are left out instead of being ``""`` (``error.type`` on success,
  ``status_code`` when no response arrived); PromQL treats an empty label and a missing one alike;
* the GenAI semconv histograms also carry ``server.address``, ``server.port`` and, when known,
  ``gen_ai.response.model``, as the conventions recommend;
* the series the native exporter pre-creates at zero are started with ``add(0)`` when a
  (provider, operation, model) is first seen; histograms cannot be, they appear on first use;
* ``gen_ai.client.operation.time_per_output_chunk``: the core aggregates the gaps of an attempt into
  bucket counts and their sum, so nothing runs per chunk. The OpenTelemetry API can only record
  single values (the conventions ask for one per chunk), and one SDK ``record()`` costs microseconds,
  so an attempt's end only merges its counts into pending per-label-set totals (O(buckets)); the
  next metric collection, on the reader's thread, records one value per gap from them (see
  :func:`spread`). Bucket counts, count, sum and max (per collection interval) are exact; min and
  the individual values are representatives inside the right bucket. That is still one SDK
  ``record()`` per chunk (about 8 µs), so llmtap records it only with ``Settings.otel_chunk_gaps``.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import SpanContext

from llmtap._core.cost import COST_TYPES
from llmtap._core.metrics import (
    BASE_ATTRIBUTES,
    COUNTER,
    GAUGE,
    HISTOGRAM,
    INSTRUMENTS,
    TOKEN_TYPES,
    UP_DOWN,
    Instrument,
    resolve_names,
)
from llmtap._core.record import ALL_OUTCOMES, AttemptRecord, AttemptStart, CallRecord
from llmtap._exporters import _otel_fork
from llmtap._exporters._health import register_otel
from llmtap._version import __version__

__all__ = ["OtelMetricsExporter", "spread"]

Attributes = dict[str, str | int]


class _Off:
    """Stands in for an excluded instrument (``Settings.exclude_metrics``)."""

    def add(self, amount: float, attributes: Attributes | None = None) -> None:
        pass

    def record(self, amount: float, attributes: Attributes | None = None, context: Any = None) -> None:
        pass


_OFF: Any = _Off()

# rate-limit gauges: index into the stored (limit, remaining, reset) triple
_LIMIT, _REMAINING, _RESET = range(3)


class OtelMetricsExporter:
    """Records every llmtap measurement through an OpenTelemetry meter.

    Args:
        meter_provider: default: the global meter provider.
        namespace: prefixes the ``llmtap.*`` instrument names (``Settings.metric_prefix_namespace``).
        exclude: instruments not to create (``Settings.exclude_metrics``).
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
    ) -> None:
        shared = _shared(meter_provider, namespace)
        excluded = resolve_names(exclude)
        if not chunk_gaps:  # Settings.otel_chunk_gaps: one SDK record() per chunk is the price
            excluded = excluded | {"gap"}
        self._lock = threading.Lock()
        self._base_attrs: dict[tuple[str, ...], Attributes] = {}
        self._attribute_keys = attribute_labels
        # (provider, operation, model, resource) -> [limit, remaining, reset], last values seen
        self._rate_limits: dict[tuple[str, ...], list[float | None]] = {}
        m = {spec.key: _OFF if spec.key in excluded else shared.instrument(spec) for spec in INSTRUMENTS}
        self._duration = m["duration"]
        self._ttfc = m["ttfc"]
        self._gap = m["gap"]
        self._usage = m["usage"]
        self._ttft = m["ttft"]
        self._attempts = m["attempts"]
        self._retries = m["retries"]
        self._retry_after = m["retry_after"]
        self._streams = m["streams"]
        self._in_flight = m["in_flight"]
        self._stalls = m["stalls"]
        self._tokens = m["tokens"]
        self._stop_reasons = m["stop_reasons"]
        self._call_duration = m["call_duration"]
        self._call_ttft = m["call_ttft"]
        self._parse_errors = m["parse_errors"]
        self._cost = m["cost"]
        self._cost_savings = m["cost_savings"]
        self._unpriced = m["unpriced"]
        self._priced = self._cost is not _OFF
        self._inference_input = m["inference_input"]
        self._inference_output = m["inference_output"]
        self._latest = self._inference_input is not _OFF or self._inference_output is not _OFF
        self._track_rate_limits = not {"ratelimit_limit", "ratelimit_remaining", "ratelimit_reset"} <= excluded
        # per-chunk gaps waiting for the next collection: label set -> [attributes, counts, sum, max]
        self._pending_gaps: dict[frozenset[tuple[str, str | int]], list[Any]] = {}
        self._shared = shared
        shared.current = self  # the observable callbacks now read this exporter

    def close(self) -> None:
        """Nothing to release: the shared instruments stay with the meter provider, and their
        callbacks keep reading this exporter (the last rate-limit values seen, gaps still pending)
        until another exporter on the same provider takes over."""

    def _base(self, key: tuple[str, ...]) -> Attributes:
        """The base attributes of ``(provider, operation, model, *attribute labels)``, one shared (never
        mutated) dict per label set; attribute labels without a value are left out."""
        attrs = self._base_attrs.get(key)
        if attrs is not None:
            return attrs
        with self._lock:
            attrs = self._base_attrs.get(key)
            if attrs is not None:
                return attrs
            attrs = dict(zip(BASE_ATTRIBUTES, key[:3], strict=True))
            attrs.update((name, value) for name, value in zip(self._attribute_keys, key[3:], strict=True) if value)
            self._base_attrs[key] = attrs
        # Start at zero the series the native exporter pre-creates, so rate()-based rules and
        # "all outcomes" panels see them before the first event of each kind.
        self._attempts.add(0, {**attrs, "status_code": "200"})
        for reason in ("429", "529"):
            self._retries.add(0, {**attrs, "reason": reason})
        for outcome in ALL_OUTCOMES:
            self._streams.add(0, {**attrs, "outcome": outcome.value})
        for token_type in TOKEN_TYPES:
            self._tokens.add(0, {**attrs, "gen_ai.token.type": token_type})
        self._in_flight.add(0, attrs)
        self._stalls.add(0, attrs)
        self._parse_errors.add(0, attrs)
        if self._priced:
            self._unpriced.add(0, attrs)
        return attrs

    def _observe(self, index: int) -> list[Observation]:
        """The last rate-limit values seen, one of (limit, remaining, reset) by ``index``."""
        with self._lock:
            items = [(k, v[index]) for k, v in self._rate_limits.items()]
        return [
            Observation(value, {**self._base(k[:-1]), "resource": k[-1]}) for k, value in items if value is not None
        ]

    # -- Sink ------------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        base = self._base((attempt.provider, attempt.operation, attempt.request_model, *attempt.attribute_labels))
        if attempt.retry_reason is not None:
            self._retries.add(1, {**base, "reason": attempt.retry_reason})
        if attempt.request_stream:
            self._in_flight.add(1, base)
            return base
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        base = self._base((record.provider, record.operation, record.request_model, *record.attribute_labels))
        if state is not None:
            self._in_flight.add(-1, base)
        attempt: Attributes = dict(base)
        if record.status_code is not None:
            attempt["status_code"] = str(record.status_code)
        if record.error_type:
            attempt["error.type"] = record.error_type
        self._attempts.add(1, attempt)

        semconv: Attributes = {**base, "server.address": record.server_address, "server.port": record.server_port}
        if record.response_model:
            semconv["gen_ai.response.model"] = record.response_model
        context = None if record.span_context is None else _context_of(record.span_context)
        if record.error_type:
            self._duration.record(record.duration, {**semconv, "error.type": record.error_type}, context)
        else:
            self._duration.record(record.duration, semconv, context)
        if record.retry_after is not None:
            self._retry_after.record(record.retry_after, base)
        if record.parse_errors:
            self._parse_errors.add(record.parse_errors, base)
        if record.streamed or record.request_stream:
            self._streams.add(1, {**base, "outcome": record.outcome.value})
        if record.streamed:
            if record.first_chunk_at is not None:
                self._ttfc.record(record.first_chunk_at - record.started_at, semconv, context)
            if record.first_token_at is not None:
                self._ttft.record(record.first_token_at - record.started_at, base, context)
            if record.chunks > 1 and self._gap is not _OFF:
                self._add_gaps(semconv, record.gap_bucket_counts, record.gap_sum, record.max_gap)
            if record.stalls:
                self._stalls.add(record.stalls, base)
        usage = record.usage
        for token_type, tokens in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if tokens is None:
                continue
            if token_type in ("input", "output"):
                self._usage.record(tokens, {**semconv, "gen_ai.token.type": token_type})
                if self._latest:
                    histogram = self._inference_input if token_type == "input" else self._inference_output
                    histogram.record(
                        tokens, {**semconv, "error.type": record.error_type} if record.error_type else semconv
                    )
            if tokens:
                self._tokens.add(tokens, {**base, "gen_ai.token.type": token_type})
        for reason in record.stop_reasons:
            self._stop_reasons.add(1, {**base, "reason": reason})
        if self._priced:
            cost = record.cost
            if cost is not None:
                for token_type, usd in zip(COST_TYPES, cost, strict=False):  # the four priced types, in order
                    if usd:
                        self._cost.add(usd, {**base, "gen_ai.token.type": token_type})
                if cost.cache_savings:
                    self._cost_savings.add(cost.cache_savings, base)
            elif usage.input_tokens or usage.output_tokens:
                self._unpriced.add(1, base)
        if record.rate_limits and self._track_rate_limits:
            with self._lock:
                for rl in record.rate_limits:
                    key = (
                        record.provider,
                        record.operation,
                        record.request_model,
                        *record.attribute_labels,
                        rl.resource,
                    )
                    values = self._rate_limits.setdefault(key, [None, None, None])
                    for i, seen in ((_LIMIT, rl.limit), (_REMAINING, rl.remaining), (_RESET, rl.reset_seconds)):
                        if seen is not None:
                            values[i] = seen

    def _add_gaps(self, attrs: Attributes, counts: tuple[int, ...], total: float, largest: float) -> None:
        """Merge an attempt's pre-bucketed gaps into the pending ones: O(buckets), no per-chunk work."""
        key = frozenset(attrs.items())
        with self._lock:
            pending = self._pending_gaps.get(key)
            if pending is None:
                self._pending_gaps[key] = [attrs, list(counts), total, largest]
                return
            merged = pending[1]
            for i, count in enumerate(counts):
                merged[i] += count
            pending[2] += total
            if largest > pending[3]:
                pending[3] = largest

    def _flush_gaps(self) -> None:
        """At collection: record the pending gaps, one value per gap (see :func:`spread`)."""
        if self._gap is _OFF:
            return
        with self._lock:
            pending, self._pending_gaps = self._pending_gaps, {}
        for attrs, counts, total, largest in pending.values():
            for value, count in spread(counts, total, _GAP_BOUNDS, largest):
                for _ in range(count):
                    self._gap.record(value, attrs)

    def call_end(self, record: CallRecord) -> None:
        base = self._base((record.provider, record.operation, record.request_model, *record.attribute_labels))
        context = None if record.span_context is None else _context_of(record.span_context)
        attrs = {**base, "outcome": record.outcome.value}
        self._call_duration.record(record.ended_at - record.started_at, attrs, context)
        if record.first_token_at is not None:
            self._call_ttft.record(record.first_token_at - record.started_at, base, context)


def _context_of(span_context: SpanContext) -> Context:
    """A context holding the attempt's span, for the SDK's (trace-based) exemplar filter."""
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


_GAP_BOUNDS = next(i.buckets for i in INSTRUMENTS if i.key == "gap")
_GAUGE_INDEX = {"ratelimit_limit": _LIMIT, "ratelimit_remaining": _REMAINING, "ratelimit_reset": _RESET}


class _Shared:
    """llmtap's instruments on one meter provider under one namespace, each created once.

    The OpenTelemetry SDK hands back the first instrument of a name, with the first one's callbacks,
    so an exporter made after another on the same provider (``uninstrument(); instrument()``) must
    reuse them; the observable callbacks read whichever exporter is :attr:`current`.
    """

    def __init__(self, meter: Any, namespace: str) -> None:
        self.meter = meter
        self.namespace = namespace
        self.current: OtelMetricsExporter | None = None
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()
        register_otel(meter, namespace)  # llmtap.internal_errors, llmtap.label_overflows (observable counters)
        # An observable instrument's callback runs at every collection, on the reader's thread, before the
        # collection's snapshot; this one yields nothing, so nothing is exported under its name.
        meter.create_observable_gauge("llmtap.internal.gap_flush", callbacks=[self._flush_gaps])

    def instrument(self, spec: Instrument) -> Any:
        with self._lock:
            made = self._made.get(spec.key)
            if made is None:
                made = self._made[spec.key] = self._make(spec)
            return made

    def _make(self, spec: Instrument) -> Any:
        meter, namespace = self.meter, self.namespace
        name = spec.name if spec.semconv or not namespace else f"{namespace}.{spec.name}"
        unit, doc = spec.unit, spec.description
        if spec.kind == COUNTER:
            return meter.create_counter(name, unit=unit, description=doc)
        if spec.kind == UP_DOWN:
            return meter.create_up_down_counter(name, unit=unit, description=doc)
        if spec.kind == HISTOGRAM:
            bounds = [float(b) for b in spec.buckets]
            return meter.create_histogram(name, unit=unit, description=doc, explicit_bucket_boundaries_advisory=bounds)
        if spec.kind != GAUGE:
            raise ValueError(f"unknown instrument kind {spec.kind!r} of {spec.name}")
        return meter.create_observable_gauge(
            name, callbacks=[self._gauge(_GAUGE_INDEX[spec.key])], unit=unit, description=doc
        )

    def _gauge(self, index: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            current = self.current
            return () if current is None else current._observe(index)

        return observe

    def _flush_gaps(self, options: CallbackOptions) -> Iterable[Observation]:
        current = self.current
        if current is not None:
            current._flush_gaps()
        return ()


_shared_lock = threading.Lock()
_shared_by_provider: weakref.WeakKeyDictionary[Any, dict[str, _Shared]] = weakref.WeakKeyDictionary()


def _shared(meter_provider: MeterProvider | None, namespace: str) -> _Shared:
    """The instruments of ``meter_provider`` (default: the global one) under ``namespace``."""
    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    with _shared_lock:
        by_namespace = _shared_by_provider.setdefault(provider, {})
        shared = by_namespace.get(namespace)
        if shared is None:
            _otel_fork.guard(provider)  # no fork inside its collection or export (gunicorn --preload)
            meter = metrics.get_meter("llmtap", __version__, meter_provider=provider)
            shared = by_namespace[namespace] = _Shared(meter, namespace)
        return shared


def spread(counts: Sequence[int], total: float, bounds: Sequence[float], largest: float) -> list[tuple[float, int]]:
    """Values that, recorded one by one, give a histogram exactly these bucket ``counts``, this sum
    and this maximum: ``(value, how many times)`` pairs.

    ``counts[i]`` counts observations ``v`` with ``bounds[i-1] < v <= bounds[i]`` (the last one: above
    ``bounds[-1]``), ``total`` is their sum and ``largest`` their maximum, as the core aggregates the
    gaps of one attempt. The maximum is recorded as is; every other observation is placed inside its
    bucket at the same fraction of the bucket's width (capped at ``largest``), the fraction chosen
    so the values add up to ``total``. Such values exist because the real observations are some.
    """
    top = max((i for i, c in enumerate(counts) if c), default=-1)
    if top < 0:
        return []
    pairs: list[tuple[float, int]] = [(largest, 1)]
    rest = total - largest
    items: list[tuple[float, float, int]] = []
    for i, count in enumerate(counts):
        n = count - 1 if i == top else count
        if n <= 0:
            continue
        low = 0.0 if i == 0 else math.nextafter(bounds[i - 1], math.inf)
        high = min(bounds[i] if i < len(bounds) else math.inf, largest)
        items.append((low, max(low, high), n))
    room = sum(n * (high - low) for low, high, n in items)
    slack = rest - sum(n * low for low, _, n in items)
    fraction = 0.0 if room <= 0 else min(1.0, max(0.0, slack / room))
    pairs += [(min(high, low + fraction * (high - low)), n) for low, high, n in items]
    return pairs
