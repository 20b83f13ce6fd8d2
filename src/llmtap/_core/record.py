"""The immutable record of one HTTP attempt, and the outcome classes a stream can end with.

No ``from __future__ import annotations`` here: ``typing.NamedTuple`` turns each string annotation into a
``ForwardRef`` holding a compiled code object (~0.35 KiB a field; ~30 KiB of every instrumented process
for these ~90 fields), so the fields are annotated with the types themselves.
"""

import enum
from typing import TYPE_CHECKING, NamedTuple

from llmtap._core.headers import RawRateLimits
from llmtap._core.headers import rate_limits as _convert_rate_limits

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

__all__ = [
    "ALL_OUTCOMES",
    "FAILED",
    "AttemptRecord",
    "AttemptStart",
    "CallRecord",
    "Cost",
    "Outcome",
    "RateLimit",
    "Usage",
]


class Outcome(enum.StrEnum):
    """How one attempt ended, as seen from the client side of the wire.

    Refused before any answer: ``REJECTED`` (an HTTP error status; the SDKs retry 408, 409, 429 and 5xx).
    Service-side interruptions of an answer: ``SERVER_ERROR``, ``CONNECTION_ERROR``, ``TIMEOUT``,
    ``INCOMPLETE``. App-side causes: ``CLIENT_CLOSED``, ``CANCELLED``, ``ABANDONED``.

    ``REJECTED`` is new since llmtap 0.1, which counted an HTTP error status as ``SERVER_ERROR``.
    """

    COMPLETED = "completed"
    """The provider's final event (or a whole JSON body) was received."""
    CLIENT_CLOSED = "client_closed"
    """The app closed the response before the final event (``break`` then ``close()``, leaving a ``with``)."""
    CANCELLED = "cancelled"
    """The task reading the body was cancelled (``asyncio.CancelledError``, ``KeyboardInterrupt``)."""
    ABANDONED = "abandoned"
    """The response was dropped unread or half-read and only the garbage collector (or exit) ended it."""
    REJECTED = "rejected"
    """The server answered with an HTTP error status (non-2xx: 400, 401, 429, 500, 529 ...), so no answer
    started; stream or not. The status and the provider's error type stay on the record."""
    SERVER_ERROR = "server_error"
    """An error inside an answer that started: an in-band ``error`` event (SSE or JSON) after a 2xx."""
    CONNECTION_ERROR = "connection_error"
    """The connection failed or was dropped by the peer."""
    TIMEOUT = "timeout"
    """A connect, read, write or pool timeout."""
    INCOMPLETE = "incomplete"
    """The body ended cleanly but without the provider's final event."""


ALL_OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)
SERVICE_SIDE: frozenset[Outcome] = frozenset(
    {Outcome.SERVER_ERROR, Outcome.CONNECTION_ERROR, Outcome.TIMEOUT, Outcome.INCOMPLETE}
)
"""Service-side interruptions: the provider or the network ended an attempt that was not rejected."""
APP_SIDE: frozenset[Outcome] = frozenset({Outcome.CLIENT_CLOSED, Outcome.CANCELLED, Outcome.ABANDONED})
"""The app (or the garbage collector on its behalf) ended the attempt."""
FAILED: frozenset[Outcome] = SERVICE_SIDE | {Outcome.REJECTED}
"""The attempt failed (span status ERROR); a call whose last attempt ended so failed after its retries."""


class Usage(NamedTuple):
    """Token usage as reported by the provider. ``None`` means the provider did not report it.

    ``input_tokens`` is the total prompt size *including* cached tokens, whatever the provider's own
    convention; ``cache_read_tokens`` and ``cache_write_tokens`` are parts of it.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


class RateLimit(NamedTuple):
    """One rate-limit resource (``requests``, ``tokens``, ``input_tokens``, ``output_tokens``)."""

    resource: str
    limit: float | None
    remaining: float | None
    reset_seconds: float | None


class Cost(NamedTuple):
    """USD an attempt cost, per token type (``input`` is uncached input), and what its cache reads saved
    against plain input (``Settings.cost``)."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_savings: float

    @property
    def total(self) -> float:
        return self.input + self.output + self.cache_read + self.cache_write


class AttemptStart(NamedTuple):
    """What is known when an attempt is sent: the immutable value every sink starts from.

    Times are ``time.perf_counter()`` readings; ``start_unix_ns`` is the wall clock at the same moment.
    """

    provider: str
    """``gen_ai.provider.name``."""
    operation: str
    """``gen_ai.operation.name`` (``chat``, ``generate_content``)."""
    request_model: str
    """The requested model as a label value: bounded by ``Settings.max_models``, ``""`` when unknown."""
    server_address: str
    server_port: int
    url_path: str
    method: str
    request_stream: bool | None
    """Whether the request asked for a stream (``None``: could not tell)."""
    request_max_tokens: int | None
    resend_count: int
    """0 for a first attempt, n for the n-th retry of one logical call."""
    retry_reason: str | None
    """For a retry: what the previous attempt of the call failed with (``429``, ``timeout`` ...)."""
    call_id: str | None
    """The logical SDK call this attempt belongs to (``None`` outside an SDK call)."""
    attributes: tuple[tuple[str, str], ...]
    """What :func:`llmtap.attributes` (and ``Settings.baggage_attributes``) attached: span attributes."""
    attribute_labels: tuple[str, ...]
    """The values of ``Settings.attribute_labels``, in that order, bounded (``""``: not set)."""
    started_at: float
    start_unix_ns: int


class AttemptRecord(NamedTuple):
    """Everything llmtap learned about one HTTP attempt: the :class:`AttemptStart` fields, then how it ended.

    Times are ``time.perf_counter()`` readings. ``None`` marks what did not happen (no headers, no first
    token) or was not reported. Records are immutable named tuples: cheap to build on the request path,
    safe to hand to any sink.
    """

    provider: str
    operation: str
    request_model: str
    server_address: str
    server_port: int
    url_path: str
    method: str
    request_stream: bool | None
    request_max_tokens: int | None
    resend_count: int
    retry_reason: str | None
    call_id: str | None
    attributes: tuple[tuple[str, str], ...]
    attribute_labels: tuple[str, ...]
    started_at: float
    start_unix_ns: int
    # -- how it ended
    outcome: Outcome
    status_code: int | None
    error_type: str | None
    """``error.type``: the provider's error type, the HTTP status, or the exception class name."""
    streamed: bool
    """The response was an event stream (``text/event-stream``, Bedrock's event-stream, ollama's JSON lines)."""
    headers_at: float | None
    first_chunk_at: float | None
    """When the first bytes of the body arrived, whatever they carried (Anthropic's ``message_start``, sent
    with the headers, counts): a transport fact, not a time to first chunk in the GenAI conventions' sense."""
    first_token_at: float | None
    """The first generated output: text, reasoning, a tool's name or arguments (a service notification such as
    ``message_start``, ``ping``, ``response.created`` or a role-only chunk is not). The conventions' first
    chunk (the span's ``gen_ai.response.time_to_first_chunk``) and ``llmtap.time_to_first_token``."""
    ended_at: float
    chunks: int
    max_gap: float
    """Longest gap between two body chunks, seconds."""
    stalls: int
    """Gaps longer than ``Settings.stall_threshold_seconds``."""
    gap_bucket_counts: tuple[int, ...]
    """Gaps between consecutive chunks, counted per ``CHUNK_GAP_BUCKETS`` bucket (last: +Inf)."""
    gap_sum: float
    usage: Usage
    stop_reasons: tuple[str, ...]
    response_id: str | None
    response_model: str | None
    request_id: str | None
    rate_limit_headers: RawRateLimits | None
    """The rate-limit header values as they came (checked, not converted): read :attr:`rate_limits`."""
    retry_after: float | None
    """Seconds the server advised to wait (``retry-after-ms`` / ``retry-after``)."""
    server_time: float | None
    """Server-reported processing time, seconds (``openai-processing-ms``)."""
    parse_errors: int
    cost: Cost | None = None
    """What the attempt cost (``Settings.cost``; ``None``: off, no usage, or the model has no price)."""
    span_context: "SpanContext | None" = None
    """The attempt's sampled span (``Settings.exemplars``): the metric exporters attach it to their
    histograms as an exemplar, so a dashboard jumps from a latency spike to the trace."""
    server_times: tuple[tuple[str, float, float], ...] = ()
    """Every server-reported time the response carried, as ``(source, server seconds, client seconds)``: the
    source names the header or field (``openai-processing-ms``, ``latencyMs`` ...), the client seconds are this
    attempt's own time over the interval the source covers (from sending the request to the headers, the first
    body chunk or the end: ``llmtap._providers._base.SERVER_TIMES``). Their difference is the path: network,
    proxies, gateways and queues between the app and the provider's timer."""
    context_window: int | None = None
    """The model's context window in tokens (``Settings.context_windows``, then genai-prices' table; ``None``:
    unknown, or the attempt reported no usage): :attr:`context_utilization` is measured against it."""

    @property
    def rate_limits(self) -> tuple[RateLimit, ...]:
        """The rate limits the response headers reported, per resource: converted from
        :attr:`rate_limit_headers` on every read (so the request path never pays for it)."""
        global _last_converted
        raw = self.rate_limit_headers
        if not raw:
            return ()
        at_unix = self.start_unix_ns / 1e9 + ((self.headers_at or self.started_at) - self.started_at)
        last = _last_converted  # one read of the global: a consistent triple whatever other threads do
        if last[0] is raw and last[1] == at_unix:
            return last[2]  # the same record read again (each exporter reads it)
        limits = tuple(RateLimit(resource, *values) for resource, values in _convert_rate_limits(raw, at_unix))
        _last_converted = (raw, at_unix, limits)
        return limits

    @property
    def context_utilization(self) -> float | None:
        """Input tokens (cache reads and writes included) over :attr:`context_window`; ``None`` when either
        is unknown (or no input tokens were reported)."""
        window = self.context_window
        tokens = self.usage.input_tokens
        return tokens / window if window and tokens else None

    @property
    def stop_reason(self) -> str | None:
        """The (first choice's) stop reason, ``None`` when the provider did not say."""
        return self.stop_reasons[0] if self.stop_reasons else None

    @property
    def duration(self) -> float:
        """Seconds from sending the request to the end of the attempt."""
        return self.ended_at - self.started_at

    @property
    def time_to_headers(self) -> float | None:
        return None if self.headers_at is None else self.headers_at - self.started_at

    @property
    def time_to_first_chunk(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started_at

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started_at

    @property
    def is_error(self) -> bool:
        """A rejection or a service-side failure (the span gets status ERROR); app-side aborts are not errors."""
        return self.outcome in FAILED


_last_converted: tuple[object, float, tuple[RateLimit, ...]] = ((), 0.0, ())
"""The last :attr:`AttemptRecord.rate_limits` converted, by the identity of its raw values."""


class CallRecord(NamedTuple):
    """One logical SDK call: its attempts (retries included), timed from the first attempt's start."""

    call_id: str
    provider: str
    operation: str
    request_model: str
    attempts: int
    outcome: Outcome
    started_at: float
    ended_at: float
    first_token_at: float | None
    span_context: "SpanContext | None" = None
    """The last attempt's sampled span (``Settings.exemplars``)."""
    attribute_labels: tuple[str, ...] = ()
    """The call's ``Settings.attribute_labels`` values (its last attempt's)."""

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started_at


# A record starts with its attempt's start value (``AttemptRecord._make(start + ending)``): keep them in step.
if AttemptRecord._fields[: len(AttemptStart._fields)] != AttemptStart._fields:  # pragma: no cover
    raise ImportError("llmtap: AttemptRecord must begin with the fields of AttemptStart")
