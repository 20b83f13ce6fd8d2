"""The interface between the attempt observer and one provider's wire format.

A provider is one module exporting a :class:`Provider`. The observer owns the bytes (content
decoding, SSE framing, timing) and hands the provider whole events or whole JSON bodies; the
provider writes what it learns into the attempt's :class:`Facts`. Nothing here does I/O.
"""

from __future__ import annotations

import abc
import enum
import re
from typing import Any, NamedTuple
from urllib.parse import unquote

__all__ = [
    "MAX_COUNT",
    "SERVER_TIMES",
    "Facts",
    "Header",
    "Output",
    "Provider",
    "RequestInfo",
    "ServerTime",
    "Until",
    "as_int",
    "model_in_path",
]

MAX_COUNT = (1 << 63) - 1
"""The largest token count accepted: an OTLP int attribute is a signed 64-bit integer."""


class Header(enum.IntEnum):
    """What a response header carries; the observer parses these, so providers only declare them."""

    LIMIT = 0
    """A rate limit (number)."""
    REMAINING = 1
    """What is left of it (number)."""
    RESET_AT = 2
    """When it resets: an RFC 3339 timestamp (Anthropic)."""
    RESET_IN = 3
    """When it resets: a duration like ``6m0s`` or ``20ms`` (OpenAI)."""
    REQUEST_ID = 4
    """The provider's request id."""
    SERVER_TIME_MS = 5
    """Server processing time in milliseconds (``openai-processing-ms``)."""
    ERROR_TYPE = 6
    """The error's type, up to the first ``:`` (Bedrock's ``x-amzn-errortype``); the body's word wins."""
    UPSTREAM_TIME_MS = 7
    """A proxy's time for the upstream's answer in milliseconds (Envoy's ``x-envoy-upstream-service-time``): a
    server-reported time (:data:`SERVER_TIMES`), not the provider's own processing time."""


class Until(enum.IntEnum):
    """Where the client's counterpart of a server-reported time ends: the client interval runs from sending the
    request to the moment the bytes the server's number speaks of arrived."""

    HEADERS = 0
    """The response headers arrived (the number came in them: the server had written it before sending them)."""
    FIRST_CHUNK = 1
    """The first bytes of the body arrived (a time to the server's first byte)."""
    END = 2
    """The attempt ended (the number came in the body's last event or in a whole body)."""


class ServerTime(NamedTuple):
    """One server-reported latency llmtap reads: the client interval it pairs with, and what it measures."""

    until: Until
    measures: str


SERVER_TIMES: dict[str, ServerTime] = {
    "openai-processing-ms": ServerTime(
        Until.HEADERS, "OpenAI's processing time (header): from receiving the request to sending the headers"
    ),
    "x-envoy-upstream-service-time": ServerTime(
        Until.HEADERS,
        "the provider's Envoy proxy (header, sent by Anthropic and OpenAI): the upstream's time to its response "
        "headers, the hop from Envoy to it included",
    ),
    "x-amzn-bedrock-invocation-latency": ServerTime(
        Until.HEADERS, "Bedrock InvokeModel, not streamed (header): the invocation's latency"
    ),
    "invocationLatency": ServerTime(
        Until.END, "Bedrock InvokeModelWithResponseStream (the last chunk's invocation metrics): the invocation"
    ),
    "firstByteLatency": ServerTime(
        Until.FIRST_CHUNK,
        "Bedrock InvokeModelWithResponseStream (the last chunk's invocation metrics): the time to its first byte",
    ),
    "latencyMs": ServerTime(Until.END, "Bedrock Converse and ConverseStream (metrics.latencyMs): the whole call"),
    "total_duration": ServerTime(
        Until.END, "ollama (the final object's total_duration, in ns): the whole request, model load included"
    ),
}
"""The ``source`` values of ``llmtap.server_reported`` and ``llmtap.client_observed``, each the name of the header
or field it is read from: a fixed set (a label value is never taken from the wire)."""


class Output(enum.Enum):
    """The kind of generated output one streamed event carries, as its provider's parser classifies it.

    The time to first token is the arrival of the first event carrying output of *any* of these kinds,
    whatever the provider: decided once, by the observer, from what :meth:`Provider.on_event` returns.
    Events that carry none (``ping``, ``message_start``, a role-only or usage-only chunk, an empty
    delta, a signature) return ``None``.
    """

    TEXT = "text"
    """Answer text (or a refusal)."""
    REASONING = "reasoning"
    """Reasoning / thinking text (redacted thinking included)."""
    TOOL_NAME = "tool_name"
    """A tool call begins: the event names the tool (or is a server-side tool call)."""
    TOOL_ARGUMENTS = "tool_arguments"
    """A piece of a tool call's arguments."""
    OTHER = "other"
    """Other generated content: audio, images, code, server tool results."""


def as_int(value: object) -> int | None:
    """``value`` if it is a JSON integer (not a bool) in ``0..MAX_COUNT``, else ``None`` (request values)."""
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


class Facts:
    """What a provider parser has learned about one attempt so far (mutable, one per attempt)."""

    __slots__ = (
        "cache_read_tokens",
        "cache_write_tokens",
        "error_type",
        "final",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "rejected",
        "request_id",
        "response_id",
        "response_model",
        "server_error",
        "server_time",
        "server_times",
        "stop_reasons",
    )

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cache_read_tokens: int | None = None
        self.cache_write_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self.stop_reasons: dict[int, str] = {}
        """Why generation stopped, per choice index (one entry unless the request asked for n > 1)."""
        self.server_time: float | None = None
        """Server-reported processing time in seconds (e.g. ``openai-processing-ms``)."""
        self.server_times: dict[str, float] | None = None
        """Every server-reported time read, in seconds, by source (a key of :data:`SERVER_TIMES`)."""
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.request_id: str | None = None
        self.error_type: str | None = None
        self.final = False
        """The provider's terminal success event (or a whole success body) was parsed."""
        self.server_error = False
        """An in-band error (SSE ``error`` event, failed terminal event) was parsed."""
        self.rejected = 0
        """Values from the wire refused by :meth:`count` (each one is a parse error of the attempt)."""

    def count(self, value: object) -> int | None:
        """A token count from the wire: a JSON integer in ``0..MAX_COUNT``, else ``None``.

        Counts are never guessed nor clamped: a negative, huge (beyond 64 bits), fractional, boolean
        or string value is refused and counted in :attr:`rejected`, so no sink ever sees it. An
        absent value (``None``) is not an error.
        """
        if type(value) is int and 0 <= value <= MAX_COUNT:
            return value
        if value is not None:
            self.rejected += 1
        return None

    def take_counts(self, source: dict[str, Any], fields: tuple[tuple[str, str], ...]) -> None:
        """For each ``(key, attribute)`` of ``fields``: ``source[key]``, when present, checked as :meth:`count`
        checks it and set as ``attribute`` if valid (an absent or refused value leaves the attribute as it was).
        One call for a whole usage object."""
        count = self.count
        for key, attribute in fields:
            value = source.get(key)
            if value is not None and (value := count(value)) is not None:
                setattr(self, attribute, value)

    def input_total(self, includes_cache: bool) -> int | None:
        """Input tokens including cache reads and writes (added when the provider reports them apart)."""
        total = self.input_tokens
        if total is None or includes_cache:
            return total
        total += (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0)
        if total > MAX_COUNT:
            self.rejected += 1
            return None
        return total

    def report_time(self, source: str, seconds: float, *, processing: bool = True) -> None:
        """A server-reported time read from ``source`` (a key of :data:`SERVER_TIMES`); ``processing``: it is also
        the provider's processing time (:attr:`server_time`, the span's ``llmtap.server.processing_time``)."""
        if self.server_times is None:
            self.server_times = {source: seconds}
        else:
            self.server_times[source] = seconds
        if processing:
            self.server_time = seconds

    def set_stop_reason(self, reason: str, index: int = 0) -> None:
        self.stop_reasons[index] = reason


class RequestInfo(NamedTuple):
    """What is known about the request before it is sent (a tuple: made once per call, cheaply)."""

    model: str | None
    stream: bool | None
    max_tokens: int | None


class Provider(abc.ABC):
    """One provider API (e.g. Anthropic Messages). Instances are stateless and shared."""

    name: str
    """``gen_ai.provider.name`` value."""
    operation: str = "chat"
    """``gen_ai.operation.name`` value."""
    markers: tuple[bytes, ...] = ()
    """Byte strings at least one of which appears in every SSE event the parser needs once the first
    content token has been seen (the terminal and error events among them). Chunks containing none
    of them are only framed, never parsed: this is what keeps the per-event cost near zero."""
    quiet_events: tuple[bytes, ...] = ()
    """Beginnings of SSE events the parser never needs once the first content token has been seen (the
    ``event:`` line and the start of the ``data:`` payload up to its type): a read that is exactly one
    such event (one ``data:`` line) is skipped with one prefix test instead of the search for
    :attr:`markers`. Each must leave no room for a marker that matters in the rest of the event."""
    quiet_frames: tuple[bytes, ...] = ()
    """The AWS event-stream twin of :attr:`quiet_events` (Bedrock): beginnings of the payloads of messages
    the parser never needs once the first content token has been seen. A read that is exactly whole
    messages, each intact and with the header block of the last message read, whose payloads all begin
    so, is consumed without decoding (:meth:`llmtap._core.eventstream.EventStreamFramer.skip`)."""
    input_includes_cache: bool = True
    """Whether the provider's reported input tokens already include cache reads and writes (OpenAI)
    or not (Anthropic). The record always carries the total."""
    headers: dict[bytes, tuple[Header, str]] = {}  # noqa: RUF012 (read-only class data)
    """Lower-case response header name -> what it carries and, for rate limits, the resource
    (``requests``, ``tokens``, ``input_tokens``, ``output_tokens``)."""
    stop_reasons: frozenset[str] = frozenset()
    """The stop reasons the provider documents: always passed as label values (others are bounded)."""
    error_types: frozenset[str] = frozenset()
    """The error types (``error.type`` values) the provider documents: always passed as label values."""
    path_suffixes: tuple[str, ...] = ()
    """URL path endings that identify this API (``/messages``, ``/chat/completions`` ...)."""

    def model_from_path(self, path: str) -> str | None:
        """The model when the API carries it in the URL path (Gemini, Azure deployments)."""
        return None

    def accepts_path(self, path: str) -> bool:
        """Whether a path ending in one of :attr:`path_suffixes` is really this API (decided once per path)."""
        return True

    def stream_from_path(self, path: str) -> bool | None:
        """Whether the request streams, when the API says so in the URL path (``None``: the body says)."""
        return None

    def event_from_frame(self, headers: dict[str, str], payload: bytes) -> tuple[bytes | None, bytes] | None:
        """One AWS event-stream message as the ``(event, data)`` pair :meth:`on_event` takes (``None``: no
        event). Only providers whose streams are event-stream framed (Bedrock) implement it."""
        return None

    @abc.abstractmethod
    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        """One complete SSE event (``event:`` name or None, joined ``data:`` payload): what it teaches
        goes into ``facts``; returns the kind of generated output it carries, ``None`` for none."""

    @abc.abstractmethod
    def on_body(self, facts: Facts, body: object, status: int) -> None:
        """A whole non-streaming JSON body (success or error), already decoded."""


MAX_PATH_MODEL = 256
"""Characters kept of a model a URL path names (the label bounds cut further)."""


def model_in_path(pattern: re.Pattern[str], path: str) -> str | None:
    """The model a URL path names in ``pattern``'s first group (Bedrock's ``/model/{id}/...``, Vertex's
    ``/models/{id}:...``): URL-decoded (a path may come decoded already: decoding it again changes nothing an id
    holds), cut to :data:`MAX_PATH_MODEL`; ``None`` when the path names none."""
    match = pattern.search(path)
    return None if match is None else unquote(match.group(1))[:MAX_PATH_MODEL] or None
