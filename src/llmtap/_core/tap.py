"""The runtime: settings resolved once, the endpoint matcher, the sinks, and the per-attempt entry
and exit points used by both the patched clients and the explicit transports.

Data walks one way: :meth:`Tap._begin` turns a request into an :class:`Attempt` (an immutable
:class:`~llmtap.AttemptStart`, the pure observer, its span and the state each sink started with); the
shells feed the observer bytes and clock readings; :meth:`Tap._end` takes the one record the
observer returns and hands it to the span and every sink, then to the logical call, whose record (when
the call is over) goes to every sink too. Nothing below the tap calls back into it.

The tap builds no exporter (:func:`llmtap._exporters.build` does) and holds no global: which tap is
active is :mod:`llmtap._installation`'s to say. The methods with a leading underscore are the request
path, called by llmtap's hooks only.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from llmtap._core import attributes as _attributes
from llmtap._core import handoff as _handoff
from llmtap._core.bounds import RecordBounds, sanitize
from llmtap._core.calls import CURRENT_CALL, Call, call_record
from llmtap._core.endpoints import Endpoint, EndpointMatcher, UnobservedHosts, sdk_endpoint
from llmtap._core.metrics import CHUNK_GAP_BUCKETS, WINDOW_KEYS, resolve_names
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord, Usage
from llmtap._core.request import UNKNOWN, info_from_content, info_from_options
from llmtap._log import internal_error, log_once
from llmtap._providers._base import Provider, RequestInfo
from llmtap._providers._catalog import ENTRIES
from llmtap._settings import Settings

if TYPE_CHECKING:
    import weakref

    from llmtap._core.cost import Pricer
    from llmtap._core.sinks import Sink, SpanSink
    from llmtap._core.windows import ContextWindows

__all__ = ["Attempt", "Tap"]

_FAILED = object()
_NO_USAGE = Usage()
_SUPPRESS_LEGACY_KEY = "suppress_instrumentation"
_PRIVATE_SUPPRESS_KEY: str | None = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
"""What ``opentelemetry.instrumentation.utils.suppress_instrumentation()`` sets: the API's private context key
(and the plain one beside it, "for backward compatibility"), read here directly so the request path does not
import that package (about 1 MiB of modules). Read with a fallback: an API that no longer has it (moved,
renamed) costs llmtap no import error; :class:`Tap` then honours suppression through the public
``is_instrumentation_enabled()`` (see :func:`_public_suppression_check`)."""
_SUPPRESS_KEY: str = _PRIVATE_SUPPRESS_KEY or _SUPPRESS_LEGACY_KEY
_RETRY_HEADER = "x-stainless-retry-count"
_AWS_REQUEST_HEADER = "amz-sdk-request"
"""The AWS SDKs' ``attempt=N; max=M`` (botocore adds it to every attempt): the n-th attempt is resend n - 1."""
_AWS_ATTEMPT = re.compile(r"(?:^|;)\s*attempt=(\d{1,4})\s*(?:;|$)")


def _aws_resend(value: object) -> str | None:
    """The resend count an ``amz-sdk-request`` header value says, as ``x-stainless-retry-count`` spells it."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    match = _AWS_ATTEMPT.search(value)
    return None if match is None else str(max(int(match.group(1)) - 1, 0))


_WINDOW = AttemptRecord._fields.index("context_window")
_get_context = otel_context.get_current
_perf_counter = time.perf_counter
_time_ns = time.time_ns
_current_attributes = _attributes.CURRENT.get
_new = tuple.__new__


class Attempt:
    """One attempt in flight: the pure observer, the logical call it belongs to, its span and each sink's state."""

    __slots__ = ("call", "finalizer", "observer", "span", "states")

    def __init__(self, observer: AttemptObserver, call: Call | None, span: object, states: tuple[object, ...]) -> None:
        self.observer = observer
        self.call = call
        self.span = span
        """The span exporter's state (its span); ``None`` without one or when starting it failed."""
        self.states = states
        self.finalizer: weakref.finalize[Any, Any] | None = None
        """Ends the attempt when the garbage collector finds its response unclosed (set by the shell)."""


class Tap:
    """One configured llmtap: what to observe (``settings``) and where its records go (``sinks``, and
    ``spans``, the span exporter, whose span is current while the request is sent).

    Made by :func:`llmtap.instrument` (with the exporters the settings turn on); also usable directly with
    :func:`llmtap.wrap_transport`, with the sinks of your choice.

    .. versionchanged:: Unreleased
        The exporters are built outside the tap: ``Tap(settings, sinks, spans=...)`` replaces
        ``Tap(settings, registry=, tracer_provider=, meter_provider=, sinks=)``.
    """

    def __init__(
        self, settings: Settings | None = None, sinks: Sequence[Sink] = (), *, spans: SpanSink | None = None
    ) -> None:
        self.settings = settings = settings or Settings()
        self.sinks: tuple[Sink, ...] = tuple(sinks)
        self.spans = spans
        self._call_sinks: tuple[Sink, ...] = self.sinks if spans is None else (spans, *self.sinks)
        """Where a call's record goes: the span exporter, then every sink."""
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
        # checked only when set: str(url) costs
        self._excluded = re.compile("|".join(settings.excluded_urls)) if settings.excluded_urls else None
        self._bounds = RecordBounds(settings, ENTRIES)
        self._baggage_keys = settings.baggage_attributes
        self._get_baggage: Callable[[str], object] | None = None
        if self._baggage_keys:  # OpenTelemetry's baggage module only when asked for (Settings.baggage_attributes)
            from opentelemetry.baggage import get_baggage

            self._get_baggage = get_baggage
        self._no_labels = ("",) * len(settings.attribute_labels)
        self._pricer: Pricer | None = None
        if settings.cost:
            from llmtap._core.cost import Pricer

            self._pricer = Pricer(settings.prices)  # ImportError naming the extra when there is no price table
        self._windows: ContextWindows | None = None
        if WINDOW_KEYS - resolve_names(settings.excluded_metrics):  # not both utilisation instruments excluded
            from llmtap._core.windows import ContextWindows

            table = None if self._pricer is None else self._pricer.table  # cost's table, loaded already
            self._windows = ContextWindows(settings.context_windows, table)
        self._instrumentation_enabled = None if _PRIVATE_SUPPRESS_KEY is not None else _public_suppression_check()
        """Where the API's private key is gone: the public check of suppression, asked after the plain key."""
        # the span's context goes on the record for the sinks' exemplars: none without a span or a sink
        self._exemplars = settings.exemplars and spans is not None and bool(self.sinks)
        _handoff.start()

    def __repr__(self) -> str:  # the public name, not this module's path
        sinks = ", ".join(getattr(sink, "name", type(sink).__name__) for sink in self._call_sinks) or "no sinks"
        if self.metrics_address is not None:
            host, port = self.metrics_address
            served = f"/metrics on {f'[{host}]' if ':' in host else host}:{port}"
        else:
            served = "/metrics not served"
        return f"<llmtap.Tap: {served}; records to {sinks}>"

    # -- request path (llmtap's hooks only) ------------------------------------------------------

    def _begin(self, request: Any) -> Attempt | None:
        """Start observing ``request`` if it is LLM API traffic; ``None`` means pass through. The early
        exits come first: not an LLM API, instrumentation suppressed, an excluded URL. Then, in named steps:
        what the request asks for (:meth:`_request_info`), which resend it is (:meth:`_resend`), its
        immutable start (:meth:`_start`), and the sinks and observer that follow it (:meth:`_open`)."""
        _handoff.tend()  # attempts the garbage collector found dropped end here at the latest
        url = request.url
        port = url.port
        if port is None:
            port = 443 if url.scheme == "https" else 80
        path = url.path
        host = url.host
        endpoint = self._matcher.lookup(host, port, path)
        if endpoint is None:
            return None
        context = _get_context()
        if context.get(_SUPPRESS_KEY) or context.get(_SUPPRESS_LEGACY_KEY):
            return None
        if self._instrumentation_enabled is not None and not self._instrumentation_enabled():
            return None
        if self._excluded is not None and self._excluded.search(str(url)):
            return None
        call = CURRENT_CALL.get()
        if not endpoint.observed:
            if call is None or call.sdk is None:
                self._unobserved.note(url.scheme, host, port, path, endpoint.provider)
                return None
            # sent from inside an official SDK's call: an LLM request whatever the host
            endpoint = sdk_endpoint(endpoint, call.sdk)
        info = self._request_info(request, call, endpoint.provider, path)
        started_at = _perf_counter()
        resend, reason, call_id = self._resend(request, call, started_at)
        start = self._start(request, endpoint, info, host, port, path, resend, reason, call_id, started_at)
        return self._open(start, endpoint.provider, call)

    @staticmethod
    def _request_info(request: Any, call: Call | None, provider: Provider, path: str) -> RequestInfo:
        """What the request asks for (model, streaming, output limit): from its SDK call's options when one
        is open, else from its body; a model (and streaming) the URL path names fills what those lack."""
        info = call.info if call is not None else None
        if info is None:
            try:
                body = request.content
            except Exception:  # a streaming request body that was not read: nothing to learn
                body = b""
            info = info_from_content(body) if body else UNKNOWN
        if info.model is None:
            path_model = provider.model_from_path(path)
            if path_model is not None:
                stream = info.stream if info.stream is not None else provider.stream_from_path(path)
                info = RequestInfo(path_model, stream, info.max_tokens)
        return info

    @staticmethod
    def _resend(request: Any, call: Call | None, started_at: float) -> tuple[int, str | None, str | None]:
        """Which resend of its call the attempt is, why (``None``: the first), and the call's id: the SDK
        call's own count when one is open, else the SDK's retry header (or the AWS SDKs' attempt header)."""
        if call is not None:
            # the SDK's own count of this call's attempts; its retry header says the same
            reason = call.attempt_started(started_at)
            return call.attempts - 1, reason, call.call_id
        headers = request.headers
        header = headers.get(_RETRY_HEADER)
        if header is None and _AWS_REQUEST_HEADER in headers:
            header = _aws_resend(headers.get(_AWS_REQUEST_HEADER))
        if header is None:
            return 0, None, None
        try:
            resend = int(header)
        except ValueError:
            return 0, None, None
        return resend, ("unknown" if resend > 0 else None), None

    def _start(
        self,
        request: Any,
        endpoint: Endpoint,
        info: RequestInfo,
        host: str,
        port: int,
        path: str,
        resend: int,
        reason: str | None,
        call_id: str | None,
        started_at: float,
    ) -> AttemptStart:
        """The attempt's immutable start: every label value from the wire bounded, the app's attributes."""
        bounds = self._bounds
        model = info.model
        address, server_port = bounds.servers.get((host, port)) or bounds.server(host, port)
        values = _current_attributes()
        if values or self._baggage_keys:
            pairs, labels = self._attributes(values)
        else:
            pairs, labels = (), self._no_labels
        # a model seen before: its label value without a call
        model_label = (bounds.request_model.seen.get(model) or bounds.request_model(model)) if model else ""
        return _new(  # every field, in order (without the named tuple's Python-level __new__)
            AttemptStart,
            (
                endpoint.provider_name,
                endpoint.provider.operation,
                model_label,
                address,
                server_port,
                path,
                request.method,
                info.stream,
                info.max_tokens,
                resend,
                reason,
                call_id,
                pairs,
                labels,
                started_at,
                _time_ns(),
            ),
        )

    def _open(self, start: AttemptStart, provider: Provider, call: Call | None) -> Attempt:
        """The span and every sink told of ``start`` (each keeps its own state; one that fails is skipped at
        the end), and the pure observer that will make the record."""
        span: object = None
        if self.spans is not None:
            try:
                span = self.spans.start(start)
            except Exception as exc:
                internal_error("sink", "the %s exporter failed: %r", self.spans.name, exc)
        states: list[object] = []
        for sink in self.sinks:
            try:
                states.append(sink.start(start))
            except Exception as exc:
                states.append(_FAILED)
                internal_error("sink", "the %s exporter failed: %r", sink.name, exc)
        observer = AttemptObserver(start, provider, self._config)
        if self._exemplars and span is not None:
            # read once here, not copied into the record at its end (a 40-field replace per attempt)
            try:
                context = span.get_span_context()  # type: ignore[attr-defined]
                if context.trace_flags.sampled:
                    observer.span_context = context
            except Exception as exc:
                internal_error("sink", "the %s exporter failed: %r", "tracing", exc)
        return Attempt(observer, call, span, tuple(states))

    def _attributes(self, values: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
        """The app's attributes (``values``, and the baggage keys asked for: span attributes) and the
        bounded attribute labels, for one attempt."""
        get_baggage = self._get_baggage
        if get_baggage is not None:
            from_baggage = {}
            for key in self._baggage_keys:
                value = get_baggage(key)
                if value is not None:
                    from_baggage[key] = str(value)
            if from_baggage:
                values = {**from_baggage, **values}
        if not values:
            return (), self._no_labels
        pairs = tuple((key, sanitize(value)) for key, value in values.items())
        return pairs, self._bounds.attribute_labels(values)

    def _enter(self, attempt: Attempt) -> object | None:
        """Make the attempt's span current while the request is sent (so HTTP spans nest under it);
        returns the token to detach, if any."""
        span = attempt.span
        if span is None or self.spans is None:
            return None
        return self.spans.attach(span)

    def _end(self, attempt: Attempt, ending: Ending, now: float, exc: BaseException | None = None) -> None:
        """End ``attempt`` (the first call only): its record goes to the span and every sink, then to its call."""
        record = attempt.observer.end(ending, now, exc)
        if record is None:
            return
        if attempt.finalizer is not None:
            attempt.finalizer.detach()
            attempt.finalizer = None
        try:
            record = self._bounds.apply(record)  # every wire-valued label bounded before any sink
            if record.usage != _NO_USAGE and (self._pricer is not None or self._windows is not None):
                record = self._model_facts(record)
        except Exception as exc:
            internal_error("other", "internal error bounding labels, pricing or finding the context window: %r", exc)
        span, states = attempt.span, attempt.states
        # nothing of the ended span or of the sinks' states is read again: let them go now, not with the
        # attempt (which a response in its HTTP client's reference cycle, or a traceback the app keeps, can
        # hold until a collection of the oldest generation)
        attempt.span, attempt.states = None, ()
        if span is not None and self.spans is not None:
            try:
                self.spans.end(record, span)
            except Exception as exc:
                internal_error("sink", "the %s exporter failed: %r", self.spans.name, exc)
        # one state per sink, made together in _begin (strict=True checked that again on every attempt)
        for sink, state in zip(self.sinks, states, strict=False):
            if state is _FAILED:
                continue
            try:
                sink.end(record, state)
            except Exception as exc:
                internal_error("sink", "the %s exporter failed: %r", sink.name, exc)
        call = attempt.call
        if call is None:
            self._call_ended(call_record("", 1, record.started_at, record))
            return
        try:
            ended = call.attempt_ended(record)
        except Exception as exc:
            internal_error("call", "internal error ending a call: %r", exc)
            return
        if ended is not None:
            self._call_ended(ended)

    def _model_facts(self, record: AttemptRecord) -> AttemptRecord:
        """What the tables say of the attempt's model (the response's, else the requested one): its price
        (``Settings.cost``) and its context window, set on the record in one replace."""
        model = record.response_model or record.request_model
        window = None if self._windows is None else self._windows.window(record.provider, model)
        if self._pricer is None:
            if window is None:
                return record
            # a new tuple with the one field changed: a fifth of what _replace's keyword machinery costs (~1 µs)
            return _new(AttemptRecord, (*record[:_WINDOW], window, *record[_WINDOW + 1 :]))
        cost = self._pricer.price(record.provider, model, record.usage)
        return record._replace(cost=cost, context_window=window)

    # -- logical calls (the SDK hook) ------------------------------------------------------------

    def _new_call(self, options: Any, sdk: str | None = None) -> Call:
        """A logical call for the SDK request described by ``options`` (its ``FinalRequestOptions``);
        ``sdk`` is the provider name of the SDK that sends it (its requests are observed on any host)."""
        return Call(info_from_options(options), sdk)

    def _call_ended(self, record: CallRecord) -> None:
        """A logical call ended: its record goes to the span exporter and every sink."""
        for sink in self._call_sinks:
            try:
                sink.call_end(record)
            except Exception as exc:
                internal_error("sink", "the %s exporter failed: %r", sink.name, exc)

    def close(self) -> None:
        """Close the span exporter and every sink (the Prometheus metrics are unregistered, the OTel
        callbacks let go), after ending what the garbage collector handed off. Each is closed even if
        another fails."""
        _handoff.drain()
        spans = self.spans
        for sink in self.sinks if spans is None else (spans, *self.sinks):
            close = getattr(sink, "close", None)  # sinks written before close() joined the protocol
            if close is None:
                continue
            try:
                close()
            except Exception as exc:
                internal_error("sink", "closing the %s exporter failed: %r", sink.name, exc)


def _public_suppression_check() -> Callable[[], bool] | None:
    """``opentelemetry.instrumentation.utils.is_instrumentation_enabled`` (public; it reads the key wherever
    the API keeps it now, and the plain one), for an API without the private key :data:`_SUPPRESS_KEY` reads;
    ``None`` without that package (or where it does not import): only the plain key, which
    ``suppress_instrumentation()`` sets too, is read. Said once at DEBUG, at set-up."""
    try:
        from opentelemetry.instrumentation.utils import is_instrumentation_enabled
    except Exception as exc:  # not installed, or broken by the same move
        log_once(
            "suppress-key",
            "opentelemetry.context has no _SUPPRESS_INSTRUMENTATION_KEY and opentelemetry-instrumentation's "
            "is_instrumentation_enabled() is not available (%r): suppression is read from the plain "
            "'suppress_instrumentation' context key only",
            exc,
            level=logging.DEBUG,
        )
        return None
    log_once(
        "suppress-key",
        "opentelemetry.context has no _SUPPRESS_INSTRUMENTATION_KEY: suppression is read through "
        "opentelemetry-instrumentation's is_instrumentation_enabled()",
        level=logging.DEBUG,
    )
    return is_instrumentation_enabled
