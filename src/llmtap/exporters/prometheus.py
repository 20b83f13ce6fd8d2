"""Prometheus exporter (prometheus-client).

Metric names are a contract: the shipped dashboards and alert rules query them. OpenTelemetry GenAI
semconv names (Prometheus-translated) where one exists, ``llmtap_`` otherwise. Every series carries
``gen_ai_provider_name``, ``gen_ai_operation_name`` and ``gen_ai_request_model`` (bounded by
``Settings.max_models``).

Writes are cheap: label children are cached per label set, and per-chunk gaps are aggregated in the
attempt and merged into the histogram once when it ends.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from llmtap._record import ALL_OUTCOMES, AttemptRecord, AttemptStart, CallRecord
from llmtap._settings import (
    CHUNK_GAP_BUCKETS,
    DURATION_BUCKETS,
    RETRY_AFTER_BUCKETS,
    TOKEN_BUCKETS,
)

__all__ = ["METRIC_NAMES", "PrometheusExporter"]

_BASE = ("gen_ai_provider_name", "gen_ai_operation_name", "gen_ai_request_model")

METRIC_NAMES: tuple[str, ...] = (
    "gen_ai_client_operation_duration_seconds",
    "gen_ai_client_operation_time_to_first_chunk_seconds",
    "gen_ai_client_operation_time_per_output_chunk_seconds",
    "gen_ai_client_token_usage",
    "llmtap_time_to_first_token_seconds",
    "llmtap_attempts_total",
    "llmtap_retries_total",
    "llmtap_retry_after_seconds",
    "llmtap_streams_total",
    "llmtap_streams_in_flight",
    "llmtap_stream_stalls_total",
    "llmtap_tokens_total",
    "llmtap_stop_reasons_total",
    "llmtap_ratelimit_limit",
    "llmtap_ratelimit_remaining",
    "llmtap_ratelimit_reset_seconds",
    "llmtap_call_duration_seconds",
    "llmtap_call_time_to_first_token_seconds",
    "llmtap_parse_errors_total",
)
"""Every metric family this exporter registers (histograms and counters by their family name)."""

_TOKEN_TYPES = ("input", "output", "cache_read", "cache_write", "reasoning")


class _Children:
    """Bound children for one (provider, operation, model) label set."""

    __slots__ = (
        "call_durations",
        "call_ttft",
        "gap",
        "in_flight",
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

    def __init__(self, exporter: PrometheusExporter, key: tuple[str, str, str]) -> None:
        self.ttfc = exporter.ttfc.labels(*key)
        self.gap = exporter.gap.labels(*key)
        self.ttft = exporter.ttft.labels(*key)
        self.in_flight = exporter.in_flight.labels(*key)
        self.stalls = exporter.stalls.labels(*key)
        self.usage_input = exporter.usage.labels(*key, "input")
        self.usage_output = exporter.usage.labels(*key, "output")
        self.tokens = {t: exporter.tokens.labels(*key, t) for t in _TOKEN_TYPES}
        self.streams = {o.value: exporter.streams.labels(*key, o.value) for o in ALL_OUTCOMES}
        self.call_ttft = exporter.call_ttft.labels(*key)
        self.parse_errors = exporter.parse_errors.labels(*key)
        self.retry_after = exporter.retry_after.labels(*key)
        self.call_durations: dict[str, Histogram] = {}
        # resource -> (limit, remaining, reset) gauges
        self.rate_limits: dict[str, tuple[Gauge, Gauge, Gauge]] = {}


class PrometheusExporter:
    """Registers the llmtap metrics in ``registry`` (default: the global one) and records into them."""

    name = "prometheus"

    def __init__(self, registry: CollectorRegistry | None = None, namespace: str = "") -> None:
        reg = REGISTRY if registry is None else registry
        ns = namespace
        self.registry = reg
        self._lock = threading.Lock()
        self._children: dict[tuple[str, str, str], _Children] = {}
        self._attempts: dict[tuple[str, str, str, str, str], Counter] = {}
        self._durations: dict[tuple[str, str, str, str], Histogram] = {}
        self._retries: dict[tuple[str, str, str, str], Counter] = {}
        self._stops: dict[tuple[str, str, str, str], Counter] = {}

        self.duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (one HTTP attempt, until its body ended).",
            (*_BASE, "error_type"),
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.ttfc = Histogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "Time from sending the request to the first response body chunk (streams).",
            _BASE,
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.gap = Histogram(
            "gen_ai_client_operation_time_per_output_chunk_seconds",
            "Time between consecutive response body chunks after the first (streams).",
            _BASE,
            buckets=CHUNK_GAP_BUCKETS,
            registry=None,
        )
        self.usage = Histogram(
            "gen_ai_client_token_usage",
            "Input and output tokens per attempt, as reported by the provider.",
            (*_BASE, "gen_ai_token_type"),
            buckets=TOKEN_BUCKETS,
            registry=None,
        )
        self.ttft = Histogram(
            "llmtap_time_to_first_token_seconds",
            "Time from sending the request to the first chunk carrying generated content.",
            _BASE,
            buckets=DURATION_BUCKETS,
            namespace=ns,
            registry=None,
        )
        self.attempts = Counter(
            "llmtap_attempts",
            "HTTP attempts to LLM APIs, by status code ('' when no response) and error type.",
            (*_BASE, "status_code", "error_type"),
            namespace=ns,
            registry=None,
        )
        self.retries = Counter(
            "llmtap_retries",
            "Attempts that were retries, by what the previous attempt failed with.",
            (*_BASE, "reason"),
            namespace=ns,
            registry=None,
        )
        self.retry_after = Histogram(
            "llmtap_retry_after_seconds",
            "Waits advised by the server (retry-after / retry-after-ms).",
            _BASE,
            buckets=RETRY_AFTER_BUCKETS,
            namespace=ns,
            registry=None,
        )
        self.streams = Counter(
            "llmtap_streams",
            "Streamed responses by how they ended.",
            (*_BASE, "outcome"),
            namespace=ns,
            registry=None,
        )
        self.in_flight = Gauge(
            "llmtap_streams_in_flight",
            "Streaming attempts sent and not yet ended.",
            _BASE,
            namespace=ns,
            registry=None,
            multiprocess_mode="livesum",
        )
        self.stalls = Counter(
            "llmtap_stream_stalls",
            "Gaps between stream chunks longer than the stall threshold.",
            _BASE,
            namespace=ns,
            registry=None,
        )
        self.tokens = Counter(
            "llmtap_tokens",
            "Tokens reported by the provider; input includes cache_read and cache_write.",
            (*_BASE, "gen_ai_token_type"),
            namespace=ns,
            registry=None,
        )
        self.stop_reasons = Counter(
            "llmtap_stop_reasons",
            "Why the model stopped generating (end_turn, max_tokens, tool_use, ...).",
            (*_BASE, "reason"),
            namespace=ns,
            registry=None,
        )
        rl_labels = (*_BASE, "resource")
        self.rl_limit = Gauge(
            "llmtap_ratelimit_limit",
            "Rate limit per resource, from the last response's headers.",
            rl_labels,
            namespace=ns,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.rl_remaining = Gauge(
            "llmtap_ratelimit_remaining",
            "Remaining rate-limit headroom per resource, from the last response's headers.",
            rl_labels,
            namespace=ns,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.rl_reset = Gauge(
            "llmtap_ratelimit_reset_seconds",
            "Seconds until the rate limit resets, from the last response's headers.",
            rl_labels,
            namespace=ns,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.call_duration = Histogram(
            "llmtap_call_duration_seconds",
            "Logical SDK call duration: first attempt start to last attempt end, backoff included.",
            (*_BASE, "outcome"),
            buckets=DURATION_BUCKETS,
            namespace=ns,
            registry=None,
        )
        self.call_ttft = Histogram(
            "llmtap_call_time_to_first_token_seconds",
            "Logical SDK call time to first content token, from the first attempt's start.",
            _BASE,
            buckets=DURATION_BUCKETS,
            namespace=ns,
            registry=None,
        )
        self.parse_errors = Counter(
            "llmtap_parse_errors",
            "Response data llmtap could not parse (malformed SSE, bad encoding, oversized events).",
            _BASE,
            namespace=ns,
            registry=None,
        )

        self._register()

    def _metrics(self) -> tuple[Counter | Gauge | Histogram, ...]:
        return (
            self.duration, self.ttfc, self.gap, self.usage, self.ttft, self.attempts, self.retries,
            self.retry_after, self.streams, self.in_flight, self.stalls, self.tokens, self.stop_reasons,
            self.rl_limit, self.rl_remaining, self.rl_reset, self.call_duration, self.call_ttft,
            self.parse_errors,
        )  # fmt: skip

    def _register(self) -> None:
        """Register every family, or none: a name already taken unregisters what this call added."""
        done: list[Counter | Gauge | Histogram] = []
        try:
            for metric in self._metrics():
                self.registry.register(metric)
                done.append(metric)
        except ValueError as exc:
            for metric in done:
                self.registry.unregister(metric)
            raise ValueError(
                f"llmtap could not register its Prometheus metrics: {exc}. Another llmtap (or library) "
                "already uses these names in this registry: uninstrument it first, or pass registry="
            ) from exc

    # -- label children, cached --------------------------------------------------------------

    def _base(self, key: tuple[str, str, str]) -> _Children:
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
            self.duration.labels(*key, "")
            self.retries.labels(*key, "429")
            self.retries.labels(*key, "529")
            self._children[key] = children
            return children

    # -- Sink ----------------------------------------------------------------------------------

    def start(self, attempt: AttemptStart) -> object:
        key = (attempt.provider, attempt.operation, attempt.request_model)
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
        key = (record.provider, record.operation, record.request_model)
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
        dkey = (*key, error_type)
        duration = self._durations.get(dkey)
        if duration is None:
            duration = self._durations[dkey] = self.duration.labels(*dkey)
        duration.observe(record.duration)
        if record.retry_after is not None:
            children.retry_after.observe(record.retry_after)
        if record.parse_errors:
            children.parse_errors.inc(record.parse_errors)
        if record.streamed or record.request_stream:
            children.streams[record.outcome.value].inc()
        if record.streamed:
            if record.first_chunk_at is not None:
                children.ttfc.observe(record.first_chunk_at - record.started_at)
            if record.first_token_at is not None:
                children.ttft.observe(record.first_token_at - record.started_at)
            if record.chunks > 1:
                _merge_histogram(children.gap, record.gap_bucket_counts, record.gap_sum)
            if record.stalls:
                children.stalls.inc(record.stalls)
        usage = record.usage
        if usage.input_tokens is not None:
            children.usage_input.observe(usage.input_tokens)
            children.tokens["input"].inc(usage.input_tokens)
        if usage.output_tokens is not None:
            children.usage_output.observe(usage.output_tokens)
            children.tokens["output"].inc(usage.output_tokens)
        if usage.cache_read_tokens:
            children.tokens["cache_read"].inc(usage.cache_read_tokens)
        if usage.cache_write_tokens:
            children.tokens["cache_write"].inc(usage.cache_write_tokens)
        if usage.reasoning_tokens:
            children.tokens["reasoning"].inc(usage.reasoning_tokens)
        for reason in record.stop_reasons:
            skey = (*key, reason[:64])
            stop = self._stops.get(skey)
            if stop is None:
                stop = self._stops[skey] = self.stop_reasons.labels(*skey)
            stop.inc()
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

    def call_end(self, record: CallRecord) -> None:
        children = self._base((record.provider, record.operation, record.request_model))
        outcome = record.outcome.value
        duration = children.call_durations.get(outcome)
        if duration is None:
            key = (record.provider, record.operation, record.request_model, outcome)
            duration = children.call_durations[outcome] = self.call_duration.labels(*key)
        duration.observe(record.ended_at - record.started_at)
        if record.first_token_at is not None:
            children.call_ttft.observe(record.first_token_at - record.started_at)

    def unregister(self) -> None:
        """Remove every llmtap metric from the registry."""
        for metric in self._metrics():
            with contextlib.suppress(KeyError):
                self.registry.unregister(metric)


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
