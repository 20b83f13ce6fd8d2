"""Prometheus exporter (prometheus-client).

Metric names are a contract: the shipped dashboards and alert rules query them. The families are
built from ``llmtap._core.metrics.INSTRUMENTS`` (shared with the OpenTelemetry exporter, whose translated
names are the same): OpenTelemetry GenAI semconv names where one exists, ``llmtap_`` otherwise. Every series carries
``gen_ai_provider_name``, ``gen_ai_operation_name`` and ``gen_ai_request_model`` (bounded by
``Settings.max_models``).

Writes are cheap: label children are cached per label set, and per-chunk gaps are aggregated in the
attempt and merged into the histogram once when it ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from llmtap._core import handoff as _handoff
from llmtap._core.cost import COST_TYPES
from llmtap._core.metrics import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    INSTRUMENTS,
    TOKEN_TYPES,
    Instrument,
    label_name,
    resolve_names,
)
from llmtap._core.record import ALL_OUTCOMES, AttemptRecord, AttemptStart, CallRecord, Usage
from llmtap._exporters._health import HEALTH_METRIC_NAMES, HealthCollector

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

__all__ = ["METRIC_NAMES", "PrometheusExporter", "exemplar_of"]

METRIC_NAMES: tuple[str, ...] = (*(i.prometheus() for i in INSTRUMENTS), *HEALTH_METRIC_NAMES)
"""Every metric family this exporter registers (histograms and counters by their family name)."""


class _NoCreated:
    """Mixin: no ``*_created`` sample per label set (see ``Settings.prometheus_created_series``).

    prometheus-client's own switch, ``disable_created_metrics()``, is process-wide; a library must
    not change how the application's own metrics are exposed.
    """

    def _child_samples(self) -> Iterable[Sample]:
        samples: Iterable[Sample] = super()._child_samples()  # type: ignore[misc]
        return tuple(s for s in samples if s.name != "_created")


class _LeanCounter(_NoCreated, Counter):
    pass


class _LeanHistogram(_NoCreated, Histogram):
    pass


class _Off:
    """Stands in for an excluded family (``Settings.exclude_metrics``): every write is a no-op."""

    def labels(self, *values: str) -> _Off:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        pass


_OFF: Any = _Off()


class _HandOff(Collector):
    """Exports nothing: each scrape first ends the attempts handed off by the garbage collector
    (:mod:`llmtap._core.handoff`), so an abandoned stream is counted by the next scrape at the latest."""

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        _handoff.drain()
        return iter(())


class _Children:
    """Bound children for one (provider, operation, model) label set.

    Counters and gauges are created with the label set, at zero, so rate()-based rules see them
    from the start. Histograms (14 to 17 series each) are created on their first observation: an
    empty one only costs series (a model that never streams has no time to first chunk).
    """

    __slots__ = (
        "call_durations",
        "call_ttft",
        "gap",
        "in_flight",
        "key",
        "parse_errors",
        "rate_limits",
        "retry_after",
        "stalls",
        "streams",
        "tokens",
        "ttfc",
        "ttft",
        "usage_input",
        "usage_output",
    )

    def __init__(self, exporter: PrometheusExporter, key: tuple[str, ...]) -> None:
        self.key = key
        self.in_flight = exporter.in_flight.labels(*key)
        self.stalls = exporter.stalls.labels(*key)
        self.tokens = {t: exporter.tokens.labels(*key, t) for t in TOKEN_TYPES}
        self.streams = {o.value: exporter.streams.labels(*key, o.value) for o in ALL_OUTCOMES}
        self.parse_errors = exporter.parse_errors.labels(*key)
        self.ttfc: Histogram | None = None
        self.gap: Histogram | None = None
        self.ttft: Histogram | None = None
        self.usage_input: Histogram | None = None
        self.usage_output: Histogram | None = None
        self.call_ttft: Histogram | None = None
        self.retry_after: Histogram | None = None
        self.call_durations: dict[str, Histogram] = {}
        # resource -> (limit, remaining, reset) gauges
        self.rate_limits: dict[str, tuple[Gauge, Gauge, Gauge]] = {}


class PrometheusExporter:
    """Registers the llmtap metrics in ``registry`` (default: the global one) and records into them.

    Args:
        registry: where to register (default: prometheus-client's global ``REGISTRY``).
        namespace: prepended to the ``llmtap_`` families (semconv names are kept).
        exclude: families not to register, by OpenTelemetry or Prometheus name (see
            ``Settings.exclude_metrics``).
        created_series: expose ``*_created`` series (``Settings.prometheus_created_series``).
    """

    name = "prometheus"

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        namespace: str = "",
        *,
        exclude: tuple[str, ...] = (),
        created_series: bool = False,
        attribute_labels: tuple[str, ...] = (),
    ) -> None:
        reg = REGISTRY if registry is None else registry
        self.registry = reg
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], _Children] = {}
        self._attempts: dict[tuple[str, ...], Counter] = {}
        self._durations: dict[tuple[str, ...], Histogram] = {}
        self._retries: dict[tuple[str, ...], Counter] = {}
        self._stops: dict[tuple[str, ...], Counter] = {}
        self._registered: list[Counter | Gauge | Histogram] = []
        excluded = resolve_names(exclude)
        self.excluded = excluded
        counter, histogram = (Counter, Histogram) if created_series else (_LeanCounter, _LeanHistogram)

        extra_labels = tuple(label_name(key) for key in attribute_labels)

        def make(spec: Instrument) -> Any:
            if spec.key in excluded:
                return _OFF
            ns = "" if spec.semconv else namespace
            name = spec.prometheus().removesuffix("_total")
            labels = spec.labels_with(extra_labels)
            if spec.kind == COUNTER:
                metric: Any = counter(name, spec.description, labels, namespace=ns, registry=reg)
            elif spec.kind == HISTOGRAM:
                metric = histogram(name, spec.description, labels, namespace=ns, registry=reg, buckets=spec.buckets)
            elif spec.kind == GAUGE:  # last value seen (rate-limit headers)
                metric = Gauge(
                    name, spec.description, labels, namespace=ns, registry=reg, multiprocess_mode="mostrecent"
                )
            else:  # the in-flight up-down counter
                metric = Gauge(name, spec.description, labels, namespace=ns, registry=reg, multiprocess_mode="livesum")
            self._registered.append(metric)
            return metric

        self.health: HealthCollector | None = None
        self._handoff = _HandOff()
        reg.register(self._handoff)  # first, so a scrape ends handed-off attempts before it reads the rest
        try:
            m = {spec.key: make(spec) for spec in INSTRUMENTS}
            self.health = HealthCollector(namespace).register(reg)  # llmtap_internal_errors / _label_overflows
        except ValueError as exc:  # a name already taken: register all or none
            self.unregister()
            raise ValueError(
                f"llmtap could not register its Prometheus metrics: {exc}. Another llmtap (or library) "
                "already uses these names in this registry: uninstrument it first, or pass registry="
            ) from exc
        self.duration = m["duration"]
        self.ttfc = m["ttfc"]
        self.gap = m["gap"]
        self.usage = m["usage"]
        self.ttft = m["ttft"]
        self.attempts = m["attempts"]
        self.retries = m["retries"]
        self.retry_after = m["retry_after"]
        self.streams = m["streams"]
        self.in_flight = m["in_flight"]
        self.stalls = m["stalls"]
        self.tokens = m["tokens"]
        self.stop_reasons = m["stop_reasons"]
        self.rl_limit = m["ratelimit_limit"]
        self.rl_remaining = m["ratelimit_remaining"]
        self.rl_reset = m["ratelimit_reset"]
        self.call_duration = m["call_duration"]
        self.call_ttft = m["call_ttft"]
        self.parse_errors = m["parse_errors"]
        self.cost = m["cost"]
        self.cost_savings = m["cost_savings"]
        self.unpriced = m["unpriced"]
        self.priced = self.cost is not _OFF
        self.inference_input = m["inference_input"]
        self.inference_output = m["inference_output"]
        self.latest = self.inference_input is not _OFF or self.inference_output is not _OFF
        self._inference_children: dict[tuple[str, ...], tuple[Histogram, Histogram]] = {}

    # -- label children, cached --------------------------------------------------------------

    def _base(self, key: tuple[str, ...]) -> _Children:
        children = self._children.get(key)
        if children is not None:
            return children
        with self._lock:
            children = self._children.get(key)
            if children is not None:
                return children
            children = _Children(self, key)
            # pre-create the series alert rules divide by, so rates start at zero
            self.attempts.labels(*key, "200", "")
            self.retries.labels(*key, "429")
            self.retries.labels(*key, "529")
            if self.priced:
                self.unpriced.labels(*key)  # at 0: an unknown model shows up as a rate, not as "no data"
            self._children[key] = children
            return children

    # -- Sink ----------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key = (attempt.provider, attempt.operation, attempt.request_model, *attempt.attribute_labels)
        children = self._base(key)
        if attempt.retry_reason is not None:
            rkey = (*key, attempt.retry_reason)
            counter = self._retries.get(rkey)
            if counter is None:
                counter = self._retries[rkey] = self.retries.labels(*rkey)
            counter.inc()
        if attempt.request_stream:
            children.in_flight.inc()
            return children
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        key = (record.provider, record.operation, record.request_model, *record.attribute_labels)
        children = self._base(key)
        if state is not None:
            children.in_flight.dec()
        status = "" if record.status_code is None else str(record.status_code)
        error_type = record.error_type or ""
        akey = (*key, status, error_type)
        counter = self._attempts.get(akey)
        if counter is None:
            counter = self._attempts[akey] = self.attempts.labels(*akey)
        counter.inc()
        exemplar = None if record.span_context is None else exemplar_of(record.span_context)
        dkey = (*key, error_type)
        duration = self._durations.get(dkey)
        if duration is None:
            duration = self._durations[dkey] = self.duration.labels(*dkey)
        duration.observe(record.duration, exemplar)
        if record.retry_after is not None:
            retry_after = children.retry_after
            if retry_after is None:
                retry_after = children.retry_after = self.retry_after.labels(*key)
            retry_after.observe(record.retry_after)
        if record.parse_errors:
            children.parse_errors.inc(record.parse_errors)
        if record.streamed or record.request_stream:
            children.streams[record.outcome.value].inc()
        if record.streamed:
            if record.first_chunk_at is not None:
                ttfc = children.ttfc
                if ttfc is None:
                    ttfc = children.ttfc = self.ttfc.labels(*key)
                ttfc.observe(record.first_chunk_at - record.started_at, exemplar)
            if record.first_token_at is not None:
                ttft = children.ttft
                if ttft is None:
                    ttft = children.ttft = self.ttft.labels(*key)
                ttft.observe(record.first_token_at - record.started_at, exemplar)
            if record.chunks > 1:
                gap = children.gap
                if gap is None:
                    gap = children.gap = self.gap.labels(*key)
                _merge_histogram(gap, record.gap_bucket_counts, record.gap_sum)
            if record.stalls:
                children.stalls.inc(record.stalls)
        usage = record.usage
        if usage.input_tokens is not None:
            usage_input = children.usage_input
            if usage_input is None:
                usage_input = children.usage_input = self.usage.labels(*key, "input")
            usage_input.observe(usage.input_tokens)
            children.tokens["input"].inc(usage.input_tokens)
        if usage.output_tokens is not None:
            usage_output = children.usage_output
            if usage_output is None:
                usage_output = children.usage_output = self.usage.labels(*key, "output")
            usage_output.observe(usage.output_tokens)
            children.tokens["output"].inc(usage.output_tokens)
        if self.latest and (usage.input_tokens is not None or usage.output_tokens is not None):
            self._inference(dkey, usage)
        if usage.cache_read_tokens:
            children.tokens["cache_read"].inc(usage.cache_read_tokens)
        if usage.cache_write_tokens:
            children.tokens["cache_write"].inc(usage.cache_write_tokens)
        if usage.reasoning_tokens:
            children.tokens["reasoning"].inc(usage.reasoning_tokens)
        for reason in record.stop_reasons:
            skey = (*key, reason)
            stop = self._stops.get(skey)
            if stop is None:
                stop = self._stops[skey] = self.stop_reasons.labels(*skey)
            stop.inc()
        if self.priced:
            self._cost(key, record)
        for rl in record.rate_limits:
            gauges = children.rate_limits.get(rl.resource)
            if gauges is None:
                labels = (*key, rl.resource)
                gauges = children.rate_limits[rl.resource] = (
                    self.rl_limit.labels(*labels),
                    self.rl_remaining.labels(*labels),
                    self.rl_reset.labels(*labels),
                )
            if rl.limit is not None:
                gauges[0].set(rl.limit)
            if rl.remaining is not None:
                gauges[1].set(rl.remaining)
            if rl.reset_seconds is not None:
                gauges[2].set(rl.reset_seconds)

    def _inference(self, dkey: tuple[str, ...], usage: Usage) -> None:
        """``Settings.genai_semconv`` latest/both: the per-direction token histograms."""
        pair = self._inference_children.get(dkey)
        if pair is None:
            pair = self._inference_children[dkey] = (
                self.inference_input.labels(*dkey),
                self.inference_output.labels(*dkey),
            )
        if usage.input_tokens is not None:
            pair[0].observe(usage.input_tokens)
        if usage.output_tokens is not None:
            pair[1].observe(usage.output_tokens)

    def _cost(self, key: tuple[str, ...], record: AttemptRecord) -> None:
        """``Settings.cost``: USD by token type and the cache's savings, or one unpriced attempt."""
        cost = record.cost
        if cost is None:
            usage = record.usage
            if usage.input_tokens or usage.output_tokens:
                self.unpriced.labels(*key).inc()
            return
        for token_type, usd in zip(COST_TYPES, cost, strict=False):  # the four priced types, in order
            if usd:
                self.cost.labels(*key, token_type).inc(usd)
        if cost.cache_savings:
            self.cost_savings.labels(*key).inc(cost.cache_savings)

    def call_end(self, record: CallRecord) -> None:
        children = self._base((record.provider, record.operation, record.request_model, *record.attribute_labels))
        outcome = record.outcome.value
        duration = children.call_durations.get(outcome)
        if duration is None:
            key = (*children.key, outcome)
            duration = children.call_durations[outcome] = self.call_duration.labels(*key)
        exemplar = None if record.span_context is None else exemplar_of(record.span_context)
        duration.observe(record.ended_at - record.started_at, exemplar)
        if record.first_token_at is not None:
            call_ttft = children.call_ttft
            if call_ttft is None:
                call_ttft = children.call_ttft = self.call_ttft.labels(*children.key)
            call_ttft.observe(record.first_token_at - record.started_at, exemplar)

    def close(self) -> None:
        """Remove every llmtap metric from the registry."""
        self.unregister()

    def unregister(self) -> None:
        """Remove every llmtap metric from the registry."""
        with contextlib.suppress(KeyError):
            self.registry.unregister(self._handoff)
        for metric in self._registered:
            with contextlib.suppress(KeyError):
                self.registry.unregister(metric)
        if self.health is not None:
            with contextlib.suppress(KeyError):
                self.registry.unregister(self.health)


def exemplar_of(context: SpanContext) -> dict[str, str]:
    """The OpenMetrics exemplar labels of a span: ``trace_id`` and ``span_id`` in W3C hex, the names
    Grafana links to a trace by."""
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def _merge_histogram(child: Histogram, counts: tuple[int, ...], total: float) -> None:
    """Add pre-bucketed observations (same bounds as the histogram) in one step per bucket."""
    buckets = getattr(child, "_buckets", None)
    sum_value = getattr(child, "_sum", None)
    if buckets is None or sum_value is None or len(buckets) != len(counts):
        return  # prometheus-client internals changed: skip rather than mis-record
    for value, count in zip(buckets, counts, strict=True):
        if count:
            value.inc(count)
    sum_value.inc(total)
