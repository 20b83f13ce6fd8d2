"""OpenTelemetry metrics exporter: the GenAI semconv client histograms through a meter provider.

For platform teams shipping telemetry through an OpenTelemetry Collector instead of scraping.
Records ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.time_to_first_chunk``; llmtap-specific series are Prometheus-only.
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.metrics import MeterProvider

from llmtap._record import AttemptRecord, AttemptStart, CallRecord
from llmtap._settings import DURATION_BUCKETS, TOKEN_BUCKETS
from llmtap._version import __version__
from llmtap.exporters._health import register_otel

__all__ = ["OtelMetricsExporter"]


class OtelMetricsExporter:
    name = "otel_metrics"

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = metrics.get_meter("llmtap", __version__, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._ttfc = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time to receive the first chunk of a streamed response.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=[float(b) for b in TOKEN_BUCKETS],
        )
        register_otel(meter)  # llmtap.internal_errors, llmtap.label_overflows (observable counters)

    def start(self, attempt: AttemptStart) -> object:
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        attrs: dict[str, str | int] = {
            "gen_ai.operation.name": record.operation,
            "gen_ai.provider.name": record.provider,
            "gen_ai.request.model": record.request_model,
            "server.address": record.server_address,
            "server.port": record.server_port,
        }
        if record.response_model:
            attrs["gen_ai.response.model"] = record.response_model
        if record.error_type:
            self._duration.record(record.duration, {**attrs, "error.type": record.error_type})
        else:
            self._duration.record(record.duration, attrs)
        if record.streamed and record.first_chunk_at is not None:
            self._ttfc.record(record.first_chunk_at - record.started_at, attrs)
        usage = record.usage
        if usage.input_tokens is not None:
            self._tokens.record(usage.input_tokens, {**attrs, "gen_ai.token.type": "input"})
        if usage.output_tokens is not None:
            self._tokens.record(usage.output_tokens, {**attrs, "gen_ai.token.type": "output"})

    def call_end(self, record: CallRecord) -> None:
        pass
