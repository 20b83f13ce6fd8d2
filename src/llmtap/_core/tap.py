"""The runtime: settings resolved once, the endpoint matcher, the sinks, and the per-attempt entry
and exit points used by both the patched clients and the explicit transports.

Data walks one way: :meth:`Tap.begin` turns a request into an :class:`Attempt` (an immutable
:class:`~llmtap.AttemptStart`, the pure observer, and the state each sink started with); the
shells feed the observer bytes and clock readings; :meth:`Tap.end` takes the one record the
observer returns and hands it to every sink, then to the logical call, whose record (when the call
is over) goes to every sink too. Nothing below the tap calls back into it.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

from llmtap._core import attributes as _attributes
from llmtap._core import handoff as _handoff
from llmtap._core.bounds import RecordBounds, sanitize
from llmtap._core.calls import CURRENT_CALL, Call, call_record
from llmtap._core.endpoints import PROVIDERS, EndpointMatcher, UnobservedHosts, sdk_endpoint
from llmtap._core.metrics import INSTRUMENTS, Instrument
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord, Usage
from llmtap._core.request import UNKNOWN, info_from_content, info_from_options
from llmtap._exporters._base import Sink
from llmtap._log import internal_error
from llmtap._providers._base import RequestInfo
from llmtap._settings import CHUNK_GAP_BUCKETS, Settings

if TYPE_CHECKING:
    import weakref

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from opentelemetry.util.http import ExcludeList
    from prometheus_client import CollectorRegistry

    from llmtap._core.cost import Pricer
    from llmtap._exporters.prometheus import PrometheusExporter
    from llmtap._exporters.tracing import TracingExporter

__all__ = ["Attempt", "Tap", "activate", "active"]

_FAILED = object()
_NO_USAGE = Usage()
# What ``opentelemetry.instrumentation.utils.suppress_instrumentation()`` sets (its key and the legacy plain
# one); read here directly so the request path does not import that package (about 1 MiB of modules).
_SUPPRESS_KEYS = (_SUPPRESS_INSTRUMENTATION_KEY, "suppress_instrumentation")
_RETRY_HEADER = "x-stainless-retry-count"

_active: Tap | None = None


def active() -> Tap | None:
    """The tap :func:`llmtap.instrument` activated (the one the patched clients use), if any."""
    return _active


def activate(tap: Tap | None) -> None:
    """Make ``tap`` the active one (``None``: none)."""
    global _active
    _active = tap


def _wanted(instrument: Instrument, settings: Settings) -> bool:
    """Whether the settings turn ``instrument`` on (its ``requires`` flag, its semconv version)."""
    if instrument.requires and not getattr(settings, instrument.requires):
        return False
    if instrument.semconv_version == "legacy":
        return settings.genai_semconv != "latest"
    if instrument.semconv_version == "latest":
        return settings.genai_semconv != "default"
    return True


class Attempt:
    """One attempt in flight: the pure observer, the logical call it belongs to, and each sink's state."""

    __slots__ = ("call", "finalizer", "observer", "states")

    def __init__(self, observer: AttemptObserver, call: Call | None, states: tuple[object, ...]) -> None:
        self.observer = observer
        self.call = call
        self.states = states
        self.finalizer: weakref.finalize[Any, Any] | None = None
        """Ends the attempt when the garbage collector finds its response unclosed (set by the shell)."""


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
        self.metrics_address: tuple[str, int] | None = None
        """``(address, port)`` of the ``/metrics`` server :func:`llmtap.instrument` started for this tap
        (``Settings.metrics_port``; port 0 picks a free one), ``None`` when it serves none."""
        self._matcher = EndpointMatcher(settings.base_urls, settings.provider_names, settings.match_any_host)
        self._unobserved = UnobservedHosts()
        self._config = ObserverConfig(
            stall_threshold=settings.stall_threshold_seconds,
            gap_bounds=CHUNK_GAP_BUCKETS,
            max_event_bytes=settings.max_event_bytes,
            max_json_bytes=settings.max_json_bytes,
        )
        # the OTel httpx instrumentation's exclusion settings, honoured when set (only then: str(url) costs)
        excluded_env = os.environ.get("OTEL_PYTHON_HTTPX_EXCLUDED_URLS") or os.environ.get("OTEL_PYTHON_EXCLUDED_URLS")
        self._excluded: ExcludeList | None = None
        if excluded_env:
            from opentelemetry.util.http import get_excluded_urls

            self._excluded = get_excluded_urls("HTTPX")
        self._bounds = RecordBounds(settings, PROVIDERS)
        self._baggage_keys = settings.baggage_attributes
        self._no_labels = ("",) * len(settings.attribute_labels)
        self._pricer: Pricer | None = None
        if settings.cost:
            from llmtap._core.cost import Pricer

            self._pricer = Pricer(settings.prices)  # ImportError naming the extra when there is no price table
        # instruments whose Settings flag is off are never created
        off = tuple(i.name for i in INSTRUMENTS if not _wanted(i, settings))
        exclude = (*settings.exclude_metrics, *off)
        self.prometheus: PrometheusExporter | None = None
        self._tracing: TracingExporter | None = None
        built: list[Sink] = []
        self._tracing_index = -1
        try:
            if settings.metrics:
                from llmtap._exporters.prometheus import PrometheusExporter

                self.prometheus = PrometheusExporter(
                    registry,
                    settings.metric_prefix_namespace,
                    exclude=exclude,
                    created_series=settings.prometheus_created_series,
                    attribute_labels=settings.attribute_labels,
                )
                built.append(self.prometheus)
            if settings.traces:
                from llmtap._exporters.tracing import TracingExporter

                self._tracing_index = len(built)
                self._tracing = TracingExporter(tracer_provider)
                built.append(self._tracing)
            if settings.otel_metrics:
                from llmtap._exporters.otel_metrics import OtelMetricsExporter

                built.append(
                    OtelMetricsExporter(
                        meter_provider,
                        namespace=settings.metric_prefix_namespace,
                        exclude=exclude,
                        chunk_gaps=settings.otel_chunk_gaps,
                        attribute_labels=settings.attribute_labels,
                    )
                )
        except BaseException:
            for sink in built:  # all or nothing: no metric stays registered, no callback bound
                sink.close()
            raise
        self.sinks: tuple[Sink, ...] = tuple(built + list(sinks or ()))
        self._exemplars = settings.exemplars and self._tracing is not None
        _handoff.start()

    # -- request path ----------------------------------------------------------------------------

    def begin(self, request: Any) -> Attempt | None:
        """Start observing ``request`` if it is LLM API traffic; ``None`` means pass through."""
        _handoff.tend()  # attempts the garbage collector found dropped end here at the latest
        url = request.url
        port = url.port
        if port is None:
            port = 443 if url.scheme == "https" else 80
        path = url.path
        endpoint = self._matcher.lookup(url.host, port, path)
        if endpoint is None or otel_context.get_value(_SUPPRESS_KEYS[0]) or otel_context.get_value(_SUPPRESS_KEYS[1]):
            return None
        if self._excluded is not None and self._excluded.url_disabled(str(url)):
            return None
        call = CURRENT_CALL.get()
        if not endpoint.observed:
            if call is None or call.sdk is None:
                self._unobserved.note(url.scheme, url.host, port, path, endpoint.provider)
                return None
            # sent from inside an official SDK's call: an LLM request whatever the host
            endpoint = sdk_endpoint(endpoint, call.sdk)
        info = call.info if call is not None else None
        if info is None:
            try:
                body = request.content
            except Exception:  # a streaming request body that was not read: nothing to learn
                body = b""
            info = info_from_content(body) if body else UNKNOWN
        provider = endpoint.provider
        if info.model is None:
            path_model = provider.model_from_path(path)
            if path_model is not None:
                stream = info.stream if info.stream is not None else provider.stream_from_path(path)
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
        start = AttemptStart(
            endpoint.provider_name,
            provider.operation,
            self._bounds.model_label(info.model),
            *self._bounds.server(url.host, port),
            path,
            request.method,
            info.stream,
            info.max_tokens,
            resend,
            reason,
            None if call is None else call.call_id,
            *self._attributes(),
            started_at,
            time.time_ns(),
        )
        states: list[object] = []
        for sink in self.sinks:
            try:
                states.append(sink.start(start))
            except Exception as exc:
                states.append(_FAILED)
                internal_error("sink", "llmtap: the %s exporter failed: %r", sink.name, exc)
        return Attempt(AttemptObserver(start, provider, self._config), call, tuple(states))

    def _attributes(self) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
        """The app's attributes (span attributes) and the bounded attribute labels, for one attempt."""
        values = _attributes.current()
        if self._baggage_keys:
            from_baggage = {}
            for key in self._baggage_keys:
                value = baggage.get_baggage(key)
                if value is not None:
                    from_baggage[key] = str(value)
            if from_baggage:
                values = {**from_baggage, **values}
        if not values:
            return (), self._no_labels
        pairs = tuple((key, sanitize(value)) for key, value in values.items())
        return pairs, self._bounds.attribute_labels(values)

    def enter(self, attempt: Attempt) -> object | None:
        """Make the attempt's span current while the request is sent (so HTTP spans nest under it);
        returns the token to detach, if any."""
        if self._tracing is None:
            return None
        span = attempt.states[self._tracing_index]
        return None if span is _FAILED else self._tracing.attach(span)

    def end(self, attempt: Attempt, ending: Ending, now: float, exc: BaseException | None = None) -> None:
        """End ``attempt`` (the first call only): its record goes to every sink, then to its call."""
        record = attempt.observer.end(ending, now, exc)
        if record is None:
            return
        if attempt.finalizer is not None:
            attempt.finalizer.detach()
            attempt.finalizer = None
        try:
            record = self._bounds.apply(record)  # every wire-valued label bounded before any sink
            if self._pricer is not None or self._exemplars:
                record = self._derive(attempt, record)
        except Exception as exc:
            internal_error("other", "llmtap: internal error bounding labels or pricing: %r", exc)
        for sink, state in zip(self.sinks, attempt.states, strict=True):
            if state is _FAILED:
                continue
            try:
                sink.end(record, state)
            except Exception as exc:
                internal_error("sink", "llmtap: the %s exporter failed: %r", sink.name, exc)
        call = attempt.call
        if call is None:
            self.call_ended(call_record("", 1, record.started_at, record))
            return
        try:
            ended = call.attempt_ended(record)
        except Exception as exc:
            internal_error("call", "llmtap: internal error ending a call: %r", exc)
            return
        if ended is not None:
            self.call_ended(ended)

    def _derive(self, attempt: Attempt, record: AttemptRecord) -> AttemptRecord:
        """What the record gains from the settings: its cost (``Settings.cost``) and its sampled span
        for exemplars (``Settings.exemplars``), in one replace."""
        changes: dict[str, Any] = {}
        if self._pricer is not None and record.usage != _NO_USAGE:
            model = record.response_model or record.request_model
            changes["cost"] = self._pricer.price(record.provider, model, record.usage)
        if self._exemplars:
            span = attempt.states[self._tracing_index]
            if span is not _FAILED:
                context = span.get_span_context()  # type: ignore[attr-defined]
                if context.trace_flags.sampled:
                    changes["span_context"] = context
        return record._replace(**changes) if changes else record

    # -- logical calls (the SDK hook) ------------------------------------------------------------

    def new_call(self, options: Any, sdk: str | None = None) -> Call:
        """A logical call for the SDK request described by ``options`` (its ``FinalRequestOptions``);
        ``sdk`` is the provider name of the SDK that sends it (its requests are observed on any host)."""
        return Call(info_from_options(options), sdk)

    def call_ended(self, record: CallRecord) -> None:
        """A logical call ended: its record goes to every sink."""
        for sink in self.sinks:
            try:
                sink.call_end(record)
            except Exception as exc:
                internal_error("sink", "llmtap: the %s exporter failed: %r", sink.name, exc)

    def close(self) -> None:
        """Close every sink (the Prometheus metrics are unregistered, the OTel callbacks let go), after
        ending what the garbage collector handed off. Each sink is closed even if another fails."""
        _handoff.drain()
        for sink in self.sinks:
            close = getattr(sink, "close", None)  # sinks written before close() joined the protocol
            if close is None:
                continue
            try:
                close()
            except Exception as exc:
                internal_error("sink", "llmtap: closing the %s exporter failed: %r", sink.name, exc)
