"""The runtime: settings resolved once, the endpoint matcher, the sinks, and the per-request entry
point :meth:`Tap.begin` used by both the patched clients and the explicit transports."""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from opentelemetry.util.http import ExcludeList, get_excluded_urls
from prometheus_client import CollectorRegistry

from llmtap._calls import CURRENT_CALL, Call, request_info_from_options
from llmtap._endpoints import EndpointMatcher
from llmtap._log import log_once
from llmtap._observer import AttemptObserver, ObserverConfig
from llmtap._record import AttemptRecord, CallRecord
from llmtap._settings import CHUNK_GAP_BUCKETS, Settings
from llmtap.exporters._base import Sink
from llmtap.providers._base import RequestInfo

__all__ = ["Tap"]

_FAILED = object()
_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')
_STREAM_RE = re.compile(rb'"stream"\s*:\s*(true|false)')
_MAX_TOKENS_RE = re.compile(rb'"max_(?:completion_|output_)?tokens"\s*:\s*(\d{1,9})')
_RETRY_HEADER = "x-stainless-retry-count"


def request_info_from_body(body: bytes) -> RequestInfo:
    """Model, stream and max_tokens from a JSON request body without a full parse when unambiguous.

    A JSON string cannot contain an unescaped quote, so ``"model":"..."`` only matches keys; if it
    occurs more than once (a nested object with a ``model`` key), the body is parsed properly.
    """
    models = _MODEL_RE.findall(body)
    if len(models) > 1:
        import json

        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict):
            model = data.get("model")
            stream = data.get("stream")
            max_tokens = data.get("max_tokens", data.get("max_completion_tokens"))
            return RequestInfo(
                model if isinstance(model, str) else None,
                stream if isinstance(stream, bool) else None,
                max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
            )
    stream_match = _STREAM_RE.search(body)
    tokens_match = _MAX_TOKENS_RE.search(body)
    return RequestInfo(
        models[0].decode("utf-8", "replace") if models else None,
        None if stream_match is None else stream_match.group(1) == b"true",
        None if tokens_match is None else int(tokens_match.group(1)),
    )


class Tap:
    """One configured llmtap: what to observe and where to export it.

    Created by :func:`llmtap.instrument`; also usable directly with :func:`llmtap.wrap_transport`.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        registry: CollectorRegistry | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        sinks: list[Sink] | None = None,
    ) -> None:
        self.settings = settings = settings or Settings()
        self._matcher = EndpointMatcher(settings.base_urls, settings.provider_names, settings.match_any_host)
        self._config = ObserverConfig(
            stall_threshold=settings.stall_threshold_seconds,
            gap_bounds=CHUNK_GAP_BUCKETS,
            max_event_bytes=settings.max_event_bytes,
            max_json_bytes=settings.max_json_bytes,
        )
        # the OTel httpx instrumentation's exclusion settings, honoured when set (only then: str(url) costs)
        excluded_env = os.environ.get("OTEL_PYTHON_HTTPX_EXCLUDED_URLS") or os.environ.get("OTEL_PYTHON_EXCLUDED_URLS")
        self._excluded: ExcludeList | None = get_excluded_urls("HTTPX") if excluded_env else None
        self._models: set[str] = set()
        self._models_lock = threading.Lock()
        self.prometheus: Any = None
        built: list[Sink] = []
        if settings.metrics:
            from llmtap.exporters.prometheus import PrometheusExporter

            self.prometheus = PrometheusExporter(
                registry,
                settings.metric_prefix_namespace,
                exclude=settings.exclude_metrics,
                created_series=settings.prometheus_created_series,
            )
            built.append(self.prometheus)
        self._tracing_index = -1
        if settings.traces:
            from llmtap.exporters.tracing import TracingExporter

            self._tracing_index = len(built)
            built.append(TracingExporter(tracer_provider))
        if settings.otel_metrics:
            from llmtap.exporters.otel_metrics import OtelMetricsExporter

            built.append(
                OtelMetricsExporter(
                    meter_provider, namespace=settings.metric_prefix_namespace, exclude=settings.exclude_metrics
                )
            )
        self.sinks: tuple[Sink, ...] = tuple(built + list(sinks or ()))

    # -- request path ----------------------------------------------------------------------------

    def begin(self, request: Any) -> AttemptObserver | None:
        """Start observing ``request`` if it is LLM API traffic; ``None`` means pass through."""
        url = request.url
        port = url.port
        if port is None:
            port = 443 if url.scheme == "https" else 80
        path = url.path
        endpoint = self._matcher.match(url.host, port, path)
        if endpoint is None or not is_instrumentation_enabled():
            return None
        if self._excluded is not None and self._excluded.url_disabled(str(url)):
            return None
        call = CURRENT_CALL.get()
        info = call.info if call is not None else None
        if info is None:
            try:
                body = request.content
            except Exception:  # a streaming request body that was not read: nothing to learn
                body = b""
            info = request_info_from_body(body) if body else RequestInfo(None, None, None)
        if info.model is None:
            path_model = endpoint.provider.model_from_path(path)
            if path_model is not None:
                stream = info.stream if info.stream is not None else path.endswith(":streamGenerateContent")
                info = RequestInfo(path_model, stream, info.max_tokens)
        started_at = time.perf_counter()
        if call is not None:
            # the SDK's own count of this call's attempts; its retry header says the same
            reason = call.attempt_started(started_at)
            resend = call.attempts - 1
        else:
            reason = None
            resend = 0
            header = request.headers.get(_RETRY_HEADER)
            if header is not None:
                try:
                    resend = int(header)
                except ValueError:
                    resend = 0
                if resend > 0:
                    reason = "unknown"
        observer = AttemptObserver(
            provider=endpoint.provider,
            provider_name=endpoint.provider_name,
            config=self._config,
            request=info,
            model_label=self._model_label(info.model),
            method=request.method,
            host=url.host,
            port=port,
            path=path,
            resend_count=resend,
            retry_reason=reason,
            call=call,
            on_finish=self._finish,
        )
        states: list[object] = []
        for sink in self.sinks:
            try:
                states.append(sink.start(observer))
            except Exception as exc:
                states.append(_FAILED)
                log_once(f"sink-start-{sink.name}", "llmtap: the %s exporter failed: %r", sink.name, exc)
        observer.sink_states = tuple(states)
        return observer

    def attach_span(self, observer: AttemptObserver) -> object | None:
        """Make the attempt's span current while the request is sent (so HTTP spans nest under it)."""
        if self._tracing_index < 0:
            return None
        span = observer.sink_states[self._tracing_index]
        if span is _FAILED:
            return None
        return otel_context.attach(trace.set_span_in_context(span))  # type: ignore[arg-type]

    def _model_label(self, model: str | None) -> str:
        if not model:
            return ""
        models = self._models
        if model in models:
            return model
        with self._models_lock:
            if model in models:
                return model
            if len(models) >= self.settings.max_models:
                log_once(
                    "models",
                    "llmtap: more than %d distinct models; further ones are labelled %r (Settings.max_models)",
                    self.settings.max_models,
                    self.settings.model_overflow,
                )
                return self.settings.model_overflow
            models.add(model)
            return model

    def _finish(self, observer: AttemptObserver, record: AttemptRecord) -> None:
        for sink, state in zip(self.sinks, observer.sink_states, strict=False):
            if state is _FAILED:
                continue
            try:
                sink.end(record, state)
            except Exception as exc:
                log_once(f"sink-end-{sink.name}", "llmtap: the %s exporter failed: %r", sink.name, exc)
        call = observer.call
        if call is not None:
            try:
                call.attempt_ended(record)
            except Exception as exc:
                log_once("call", "llmtap: internal error ending a call: %r", exc)
        else:
            self._call_end(
                CallRecord(
                    call_id="",
                    provider=record.provider,
                    operation=record.operation,
                    request_model=record.request_model,
                    attempts=1,
                    outcome=record.outcome,
                    started_at=record.started_at,
                    ended_at=record.ended_at,
                    first_token_at=record.first_token_at,
                )
            )

    # -- logical calls (the SDK hook) ------------------------------------------------------------

    def new_call(self, options: Any) -> Call:
        return Call(request_info_from_options(options), self._on_call_end)

    def _on_call_end(self, call: Call) -> None:
        record = call.to_record()
        if record is not None:
            self._call_end(record)

    def _call_end(self, record: CallRecord) -> None:
        for sink in self.sinks:
            try:
                sink.call_end(record)
            except Exception as exc:
                log_once(f"sink-call-{sink.name}", "llmtap: the %s exporter failed: %r", sink.name, exc)

    def close(self) -> None:
        """Unregister this tap's Prometheus metrics."""
        if self.prometheus is not None:
            self.prometheus.unregister()
