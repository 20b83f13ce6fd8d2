"""OpenTelemetry span exporter: one CLIENT span per HTTP attempt, GenAI semantic conventions.

The span starts when the request is sent and ends when the body ends (not when the headers
arrive), as a child of the current context: the Anthropic SDK's own call span when that is on.
Retries of one logical call carry the same ``llmtap.call.id`` and link to the previous attempt (the
exporter remembers each open call's last span context itself, until the call ends).
No prompt or completion content and no request headers are ever recorded.

The OpenTelemetry SDK checks and copies every attribute of every span (about 1 µs each inside an SDK
call, on top of a span floor of ~30 µs), so by default a span carries what says what happened to this
attempt and nothing a metric already says: the GenAI semantic conventions' client-span attributes, its
outcome and its ids. ``Settings.span_detail`` adds the rest (the HTTP method, path and status code, and
the values that repeat a metric: timings, stream statistics, retry-after, parse errors). What is known at
the start goes in one mapping to ``start_span`` (samplers see it), the rest in one ``set_attributes``.
``Settings.slim_spans`` (off by default) hands the span processors ended spans that hold less memory
(:mod:`llmtap._exporters._span_memory`), on the SDK versions that is tested on (:data:`llmtap._fences.SPAN_SLIM`).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TracerProvider

from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._exporters._span_memory import Slimmer
from llmtap._fences import SPAN_SLIM
from llmtap._version import __version__

__all__ = ["TracingExporter"]

_MAX_NAMES = 256


class TracingExporter:
    """Creates attempt spans with the tracer of ``tracer_provider`` (default: the global one); ``detail``
    adds the HTTP attributes and those that repeat a metric (``Settings.span_detail``); ``slim`` slims ended
    spans (``Settings.slim_spans``) where the installed SDK is one that is tested on."""

    name = "tracing"

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, detail: bool = False, slim: bool = False
    ) -> None:
        self._detail = detail
        self._tracer = trace.get_tracer(
            "llmtap",
            __version__,
            tracer_provider=tracer_provider,
            schema_url="https://opentelemetry.io/schemas/1.37.0",
        )
        self._last_span: dict[str, SpanContext] = {}
        """Open logical calls -> their latest attempt's span, for the next retry's link."""
        self._names: dict[tuple[str, str], str] = {}
        """(operation, model) -> the span name, one string shared by the spans of that pair (a span holds
        its name until exported); at most :data:`_MAX_NAMES`, further pairs get their own string."""
        self._slimmer = Slimmer() if slim and SPAN_SLIM.open() else None
        """Set up once, here: ``None`` unless asked for and the installed SDK is within the tested range."""

    def start(self, attempt: AttemptStart) -> object:
        model = attempt.request_model
        operation = attempt.operation
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": attempt.provider,
            "server.address": attempt.server_address,
            "server.port": attempt.server_port,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        if attempt.request_max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = attempt.request_max_tokens
        if self._detail:
            attributes["http.request.method"] = attempt.method
            attributes["url.path"] = attempt.url_path
            if attempt.request_stream is not None:
                attributes["gen_ai.request.stream"] = attempt.request_stream
        elif attempt.request_stream:  # by default only the streams say so
            attributes["gen_ai.request.stream"] = True
        if attempt.resend_count:
            attributes["http.request.resend_count"] = attempt.resend_count
        if attempt.attributes:  # llmtap.attributes(...): the app's own, always on the span
            attributes.update(attempt.attributes)
        call_id = attempt.call_id
        links = None
        if call_id is not None:
            attributes["llmtap.call.id"] = call_id
            previous = self._last_span.get(call_id)
            if previous is not None:
                links = [Link(previous, {"llmtap.link": "previous_attempt"})]
        if model:
            name = self._names.get((operation, model))
            if name is None:
                name = f"{operation} {model}"
                if len(self._names) < _MAX_NAMES:
                    self._names[operation, model] = name
        else:
            name = operation
        span = self._tracer.start_span(
            name,
            # read once here: the SDK reads the current context three times when it is not given
            context=otel_context.get_current(),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            links=links,
            start_time=attempt.start_unix_ns,
        )
        if call_id is not None:
            self._last_span[call_id] = span.get_span_context()
        return span

    def attach(self, state: object) -> object:
        """Make the span started by :meth:`start` current; returns the context token to detach."""
        return otel_context.attach(trace.set_span_in_context(state))  # type: ignore[arg-type]

    def end(self, record: AttemptRecord, state: object) -> None:
        span: trace.Span = state  # type: ignore[assignment]
        end_ns = record.start_unix_ns + int(record.duration * 1e9)
        if not span.is_recording():
            span.end(end_time=end_ns)
            return
        attrs: dict[str, Any] = {"llmtap.outcome": record.outcome.value}
        if record.error_type:
            attrs["error.type"] = record.error_type
        if record.response_id:
            attrs["gen_ai.response.id"] = record.response_id
        if record.response_model:
            attrs["gen_ai.response.model"] = record.response_model
        if record.stop_reasons:
            attrs["gen_ai.response.finish_reasons"] = record.stop_reasons
        usage = record.usage
        if usage.input_tokens is not None:
            attrs["gen_ai.usage.input_tokens"] = usage.input_tokens
        if usage.output_tokens is not None:
            attrs["gen_ai.usage.output_tokens"] = usage.output_tokens
        # the parts of those totals only when there are some: most calls read, write and reason nothing
        # (the providers still report 0), and each attribute costs the SDK as much as the counts are worth
        if usage.cache_read_tokens:
            attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_write_tokens:
            attrs["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.reasoning_tokens:
            attrs["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        if record.streamed and record.first_token_at is not None:  # the first generated output, not message_start
            attrs["gen_ai.response.time_to_first_chunk"] = record.first_token_at - record.started_at
        if record.request_id:
            attrs["llmtap.request_id"] = record.request_id
        cost = record.cost
        if cost is not None:  # Settings.cost: llmtap's price of the attempt, in the conventions' names
            attrs["gen_ai.usage.cost.amount"] = cost.total
            attrs["gen_ai.usage.cost.currency"] = "USD"
            attrs["gen_ai.usage.cost.source"] = "local"
        if self._detail:
            _add_detail(attrs, record)
        span.set_attributes(attrs)
        if record.is_error:
            span.set_status(Status(StatusCode.ERROR, record.error_type or record.outcome.value))
        if self._slimmer is not None:
            self._slimmer.slim(span)  # it waits in the application's span processor until exported: held slim
        span.end(end_time=end_ns)

    def call_end(self, record: CallRecord) -> None:
        self._last_span.pop(record.call_id, None)

    def close(self) -> None:
        self._last_span.clear()


def _add_detail(attrs: dict[str, Any], record: AttemptRecord) -> None:
    """The attributes a metric (or the GenAI ones) already say (``Settings.span_detail``)."""
    if record.status_code is not None:
        attrs["http.response.status_code"] = record.status_code
    if record.headers_at is not None:
        attrs["llmtap.time_to_headers"] = record.headers_at - record.started_at
    if record.retry_after is not None:
        attrs["llmtap.retry_after"] = record.retry_after
    if record.server_time is not None:
        attrs["llmtap.server.processing_time"] = record.server_time
    if record.streamed:
        attrs["llmtap.stream.chunks"] = record.chunks
        attrs["llmtap.stream.max_gap"] = record.max_gap
        if record.stalls:
            attrs["llmtap.stream.stalls"] = record.stalls
    if record.parse_errors:
        attrs["llmtap.parse_errors"] = record.parse_errors
    utilization = record.context_utilization  # llmtap_context_window_utilization's observation
    if utilization is not None:
        attrs["llmtap.context_window.utilization"] = utilization
