"""The attempt observer: a pure state machine fed response bytes and clock readings.

It does no I/O and calls nobody back. The stream shells (``_stream.py``) call
:meth:`AttemptObserver.on_chunk` with each raw body chunk and a ``perf_counter()`` reading, and
:meth:`AttemptObserver.end` with how the body ended (an :class:`Ending`); the first ``end`` returns
the attempt's one immutable :class:`~llmtap.AttemptRecord`, later ones return ``None``. How an
attempt ended is decided in one place, :meth:`AttemptObserver._decide`.

The per-chunk path is the hot path. Once the first content token has been seen, SSE events are
only *framed* (a C-level ``rfind`` for the event boundary and a marker search); they are parsed
only when a chunk contains one of the provider's markers (``message_delta``, ``error`` ...).
AWS event-stream bodies (Bedrock) are framed by :mod:`llmtap._core.eventstream` instead, by content type.
Memory per stream is bounded by ``max_event_bytes`` (one partial SSE event or event-stream message) or
``max_json_bytes`` (one non-streaming body), whichever applies.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmtap._core.body import BodyDecodeError, Decoder, make_decoder
from llmtap._core.eventstream import EventStreamFramer
from llmtap._core.headers import duration, finite, reset_at, retry_after_seconds
from llmtap._core.record import APP_SIDE, AttemptRecord, AttemptStart, Outcome, RateLimit, Usage
from llmtap._log import internal_error, log_once
from llmtap._providers._base import Facts, Header, Provider

__all__ = ["AttemptObserver", "Ending", "ObserverConfig", "classify_exception"]


class Ending(enum.Enum):
    """What ended an attempt's body, as the shells see it. :meth:`AttemptObserver.end` turns it into an
    :class:`~llmtap.Outcome` together with what the parsed events said."""

    TERMINAL = "terminal"
    """The provider's terminal event (``message_stop``, ``[DONE]``, ``response.completed``, Gemini's
    ``finishReason`` chunk) or an in-band error event was parsed: the attempt ends there, whatever the
    SDK does next (reads on, closes, raises, or leaves the response to the garbage collector)."""
    EOF = "eof"
    """The body was read to its end."""
    CLOSED = "closed"
    """The app (or the SDK on its behalf) closed the response."""
    DROPPED = "dropped"
    """The response was closed only because the app dropped it (its generator was finalised), or the
    garbage collector found it unclosed."""
    RAISED = "raised"
    """An exception came out of the transport (before the headers or while reading the body)."""
    INTERNAL = "internal"
    """llmtap itself failed mid-attempt: the books are closed with what is known so far."""


@dataclass(frozen=True, slots=True)
class ObserverConfig:
    """Everything the observer needs from the settings, resolved once at setup."""

    stall_threshold: float
    gap_bounds: tuple[float, ...]
    max_event_bytes: int
    max_json_bytes: int


def classify_exception(exc: BaseException) -> tuple[Outcome, str]:
    """Map an exception out of the HTTP stack to an outcome and an ``error.type`` value."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return Outcome.CANCELLED, type(exc).__name__
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return Outcome.TIMEOUT, type(exc).__name__
    if "Cancelled" in names:  # trio / anyio cancellation
        return Outcome.CANCELLED, type(exc).__name__
    return Outcome.CONNECTION_ERROR, type(exc).__name__


# Header kinds as plain ints: enum member lookups cost more than the whole comparison on this path
_RESET_AT, _RESET_IN, _REQUEST_ID, _SERVER_TIME_MS, _ERROR_TYPE = (
    int(Header.RESET_AT),
    int(Header.RESET_IN),
    int(Header.REQUEST_ID),
    int(Header.SERVER_TIME_MS),
    int(Header.ERROR_TYPE),
)
# generic headers, after the provider's Header kinds in the same table
_CONTENT_TYPE, _CONTENT_ENCODING, _RETRY_AFTER_MS, _RETRY_AFTER = range(100, 104)
_GENERIC_HEADERS: dict[bytes, tuple[int, str]] = {
    b"content-type": (_CONTENT_TYPE, ""),
    b"content-encoding": (_CONTENT_ENCODING, ""),
    b"retry-after-ms": (_RETRY_AFTER_MS, ""),
    b"retry-after": (_RETRY_AFTER, ""),
}


@functools.cache
def _header_table(provider: Provider) -> dict[bytes, tuple[int, str]]:
    """Lower-case header name -> (what it is, resource): one dict lookup per response header."""
    declared = {name: (int(kind), resource) for name, (kind, resource) in provider.headers.items()}
    return {**declared, **_GENERIC_HEADERS}


def _ignore(data: bytes) -> None:
    """The feed of a body llmtap does not parse (and of an ended attempt)."""


class AttemptObserver:
    """State of one HTTP attempt, from its start value to the single record :meth:`end` returns."""

    __slots__ = (
        "_body_parts",
        "_body_size",
        "_crlf",
        "_decoder",
        "_discarding",
        "_fast",
        "_feed",
        "_framer",
        "_gap_bounds",
        "_gap_counts",
        "_gap_first",
        "_gap_sum",
        "_markers",
        "_max_event",
        "_max_json",
        "_now",
        "_pending",
        "_scan_all",
        "_stall",
        "chunks",
        "done",
        "facts",
        "first_chunk_at",
        "first_token_at",
        "headers_at",
        "last_chunk_at",
        "max_gap",
        "parse_errors",
        "provider",
        "retry_after",
        "said_end",
        "stalls",
        "start",
        "status",
        "streamed",
    )

    def __init__(self, start: AttemptStart, provider: Provider, config: ObserverConfig) -> None:
        self.start = start
        self.provider = provider
        self.facts = Facts()
        self.done = False
        self.status: int | None = None
        self.streamed = False
        self.headers_at: float | None = None
        self.first_chunk_at: float | None = None
        self.first_token_at: float | None = None
        self.last_chunk_at = 0.0
        self.max_gap = 0.0
        self.stalls = 0
        self.chunks = 0
        self.parse_errors = 0
        self.retry_after: float | None = None
        self.said_end = False
        """The provider's terminal event (or an in-band error) was parsed from the stream."""
        self._gap_bounds = bounds = config.gap_bounds
        self._gap_counts = [0] * (len(bounds) + 1)
        self._gap_first = bounds[0] if bounds else float("inf")
        self._gap_sum = 0.0
        self._stall = config.stall_threshold
        self._max_event = config.max_event_bytes
        self._max_json = config.max_json_bytes
        self._markers = provider.markers
        self._now = 0.0
        self._decoder: Decoder | None = None
        self._feed: Callable[[bytes], None] = _ignore
        self._framer: EventStreamFramer | None = None
        self._pending = b""
        self._discarding = False
        self._scan_all = True
        self._fast = False
        self._crlf = False
        self._body_parts: list[bytes] = []
        self._body_size = 0

    # -- response headers ---------------------------------------------------------------------

    def on_response(self, status: int, raw_headers: Sequence[tuple[bytes, bytes]], now: float) -> None:
        """The status line and headers arrived."""
        self.headers_at = now
        self.status = status
        provider = self.provider
        content_type = b""
        encoding = b""
        retry_after = retry_after_ms = None
        now_unix = time.time()
        table = _header_table(provider)
        facts = self.facts
        limits = facts.rate_limits
        for raw_name, value in raw_headers:
            spec = table.get(raw_name.lower())
            if spec is None:
                continue
            kind, resource = spec
            try:
                if kind <= _RESET_IN:
                    slot = limits.get(resource)
                    if slot is None:
                        slot = limits[resource] = [None, None, None]
                    if kind == _RESET_AT:
                        slot[2] = max(reset_at(value) - now_unix, 0.0)
                    elif kind == _RESET_IN:
                        slot[2] = duration(value)
                    else:
                        slot[kind] = finite(value)
                elif kind == _CONTENT_TYPE:
                    content_type = value.lower()
                elif kind == _CONTENT_ENCODING:
                    encoding = encoding + b"," + value if encoding else value  # as the client joins them
                elif kind == _REQUEST_ID:
                    facts.request_id = value.decode("ascii", "replace")
                elif kind == _SERVER_TIME_MS:
                    facts.server_time = finite(value) / 1000.0
                elif kind == _ERROR_TYPE:
                    facts.error_type = value.partition(b":")[0].decode("ascii").strip() or None
                elif kind == _RETRY_AFTER_MS:
                    retry_after_ms = finite(value) / 1000.0
                else:
                    retry_after = retry_after_seconds(value, now_unix)
            except (ValueError, UnicodeDecodeError):
                self.parse_errors += 1
                log_once(
                    "header",
                    "llmtap: could not parse response header %r from %s; ignored",
                    raw_name.decode("latin-1"),
                    provider.name,
                )
        # every value is parsed (a garbage one is a parse error); retry-after-ms is the more precise
        wait = retry_after_ms if retry_after_ms is not None else retry_after
        if wait is not None:
            self.retry_after = max(wait, 0.0)
        if encoding:
            try:
                self._decoder = make_decoder(encoding)
            except BodyDecodeError as exc:
                self.parse_errors += 1
                log_once("encoding", "llmtap: %s; response bodies with it are not parsed", exc)
                self._feed = _ignore
                self.streamed = b"text/event-stream" in content_type
                return
        if b"text/event-stream" in content_type:
            self.streamed = True
            self._feed = self._feed_sse
        elif b"application/vnd.amazon.eventstream" in content_type:
            self.streamed = True
            self._framer = EventStreamFramer(self._max_event)
            self._feed = self._feed_frames
        else:
            self._feed = self._feed_json

    # -- body: the hot path -------------------------------------------------------------------

    def on_chunk(self, chunk: bytes, now: float) -> bool:
        """One raw body chunk as read from the transport, before content decoding; returns True once
        the provider's terminal event has been parsed (the shell then ends the attempt:
        :attr:`Ending.TERMINAL`).

        After the first content token of an LF-framed SSE stream, the whole work per chunk is timing
        arithmetic, inflating it if compressed, one ``rfind`` for the event boundary and one ``find``
        per provider marker; events are parsed only when a marker is present.
        """
        if self.first_chunk_at is None:
            self.first_chunk_at = now
        else:
            gap = now - self.last_chunk_at
            self._gap_sum += gap
            if gap <= self._gap_first:  # most gaps of a fast stream: no search needed
                self._gap_counts[0] += 1
            else:
                self._gap_counts[bisect_left(self._gap_bounds, gap)] += 1
            if gap > self.max_gap:
                self.max_gap = gap
            if gap > self._stall:
                self.stalls += 1
        self.last_chunk_at = self._now = now
        self.chunks += 1
        try:
            if self._decoder is not None:
                chunk = self._decoder(chunk)
            self._feed(chunk)
        except BodyDecodeError as exc:
            self._undecodable(exc)
        except Exception as exc:
            self.parse_errors += 1
            internal_error("parser", "llmtap: internal error parsing a %s body: %r", self.provider.name, exc)
        return self.said_end

    def _undecodable(self, exc: BodyDecodeError) -> None:
        self.parse_errors += 1
        self._decoder = None
        self._feed = _ignore
        log_once("decode", "llmtap: %s (%s); the rest of this body is not parsed", exc, self.provider.name)

    def on_content(self, content: bytes, now: float) -> None:
        """The whole body, already read and content-decoded by the client (no transport stream); an
        :attr:`Ending.EOF` follows."""
        self._decoder = None
        if content:
            self.on_chunk(content, now)

    def _feed_sse(self, data: bytes) -> None:
        """The one SSE framer: dispatches whole events, keeps at most one partial event."""
        if self._pending:
            data = self._pending + data
        if self._fast:
            # LF framing, past the first token: frame, and parse only regions holding a marker
            end = data.rfind(b"\n\n")
            if end >= 0:
                self._pending = data[end + 2 :]
                for marker in self._markers:
                    if data.find(marker) != -1:
                        self._parse_events(data[:end])
                        break
                return
            if len(data) <= self._max_event and data.find(b"\r") == -1:
                self._pending = data
                return
            # an oversized event or CR framing: the general framing below takes over for good
            self._fast = False
            self._pending = b""
        if data.find(b"\r") != -1:
            self._crlf = True
            carry = data.endswith(b"\r")  # a CRLF may be split across reads
            data = data.replace(b"\r\n", b"\n")
            if carry:
                data = data[:-1]
            data = data.replace(b"\r", b"\n")
            if carry:
                data += b"\r"
        end = data.rfind(b"\n\n")
        if end < 0:
            if self._discarding:
                self._pending = data[-1:]  # the first half of a split boundary, at most
            elif len(data) > self._max_event:
                self._overflow()
            else:
                self._pending = data
            return
        self._pending = data[end + 2 :]
        if len(self._pending) > self._max_event:
            self._overflow()
        start = 0
        if self._discarding:
            # the bytes up to the first boundary belong to an oversized event already dropped
            start = data.find(b"\n\n") + 2
            self._discarding = False
            if start > end:
                return
        if self._scan_all or any(data.find(marker) != -1 for marker in self._markers):
            self._parse_events(data[start:end])
        if not (self._scan_all or self._discarding or self._crlf):
            self._fast = True

    def _overflow(self) -> None:
        self._pending = b""
        if self._discarding:
            return
        self._discarding = True
        self.parse_errors += 1
        log_once(
            "overflow",
            "llmtap: an SSE event from %s exceeded max_event_bytes=%d; it was dropped unparsed",
            self.provider.name,
            self._max_event,
        )

    def _feed_frames(self, data: bytes) -> None:
        """The AWS event-stream framer's messages, as the provider turns them into events (Bedrock)."""
        framer = self._framer
        if framer is None:
            return
        for headers, payload in framer.feed(data):
            try:
                converted = self.provider.event_from_frame(headers, payload)
            except (ValueError, RecursionError) as exc:
                self.parse_errors += 1
                log_once("frame", "llmtap: unreadable event-stream message from %s (%s)", self.provider.name, exc)
                continue
            if converted is None:
                continue
            event, body = converted
            if self._scan_all or event is not None:
                self._dispatch(event, body)
                continue
            for marker in self._markers:
                if body.find(marker) != -1:
                    self._dispatch(event, body)
                    break
        if framer.errors:
            self.parse_errors += framer.take_errors()
            log_once(
                "frame-error",
                "llmtap: an event-stream message from %s was dropped (longer than max_event_bytes=%d, bad CRC or "
                "bad headers); counted in parse_errors",
                self.provider.name,
                self._max_event,
            )

    def _parse_events(self, region: bytes) -> None:
        for block in region.split(b"\n\n"):
            if not block:
                continue
            event: bytes | None = None
            data_lines: list[bytes] = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[5:]
                    data_lines.append(value[1:] if value[:1] == b" " else value)
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
            if event is None and not data_lines:
                continue  # comments only
            self._dispatch(event, data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines))

    def _dispatch(self, event: bytes | None, data: bytes) -> None:
        """One whole event to the provider, whatever framed it (SSE, AWS event-stream)."""
        provider = self.provider
        facts = self.facts
        try:
            output = provider.on_event(facts, event, data)
        except (ValueError, RecursionError) as exc:  # not JSON (or nested beyond what json parses)
            self.parse_errors += 1
            log_once(
                "event",
                "llmtap: could not parse an event %r from %s (%s); counted in parse_errors",
                (event or b"").decode("ascii", "replace")[:64],
                provider.name,
                type(exc).__name__,
            )
        except Exception as exc:  # a parser bug: counted as llmtap's own failure too
            self.parse_errors += 1
            internal_error("parser", "llmtap: internal error parsing a %s event: %r", provider.name, exc)
        else:
            # the one time-to-first-token rule: the first event carrying generated output of any kind
            if output is not None and self.first_token_at is None:
                self.first_token_at = self._now
                self._scan_all = False
        if facts.final or facts.server_error:
            self.said_end = True  # the provider's terminal event (or an in-band error) was parsed

    def _feed_json(self, data: bytes) -> None:
        if self._body_size < 0:
            return
        self._body_size += len(data)
        if self._body_size > self._max_json:
            self._body_parts.clear()
            self._body_size = -1
            self.parse_errors += 1
            log_once(
                "json-size",
                "llmtap: a %s JSON body exceeded max_json_bytes=%d; not parsed",
                self.provider.name,
                self._max_json,
            )
            return
        self._body_parts.append(data)

    def _parse_json_body(self) -> None:
        if not self._body_parts or self.status is None:
            return
        body = b"".join(self._body_parts) if len(self._body_parts) > 1 else self._body_parts[0]
        self._body_parts.clear()
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            if 200 <= self.status < 300:
                self.parse_errors += 1
                log_once("json", "llmtap: a %s response body was not valid JSON", self.provider.name)
            return
        try:
            self.provider.on_body(self.facts, parsed, self.status)
        except Exception as exc:
            self.parse_errors += 1
            internal_error("parser", "llmtap: internal error reading a %s body: %r", self.provider.name, exc)

    # -- the ending: decided once, finalised once ------------------------------------------------

    def end(self, ending: Ending, now: float, exc: BaseException | None = None) -> AttemptRecord | None:
        """Finalise the attempt: its record the first time, ``None`` every later time.

        ``exc`` is the exception for :attr:`Ending.RAISED`; a ``GeneratorExit`` is not an ending by
        itself (the close that follows it is).
        """
        if self.done or isinstance(exc, GeneratorExit):
            return None
        self.done = True
        if ending is Ending.EOF:
            if self._decoder is not None or self.streamed:
                self._finish_sse_tail()
            if not self.streamed:
                self._parse_json_body()
        elif not self.streamed and self._failed():
            self._parse_json_body()  # an error body read whole before the close
        outcome, error_type = self._decide(ending, exc)
        return self._record(outcome, error_type, now)

    def _failed(self) -> bool:
        status = self.status
        return (status is not None and not 200 <= status < 300) or self.facts.server_error

    def _decide(self, ending: Ending, exc: BaseException | None) -> tuple[Outcome, str | None]:
        """How the attempt ended, from what ended it and what the response said. The only place."""
        raised: Outcome | None = None
        error_type: str | None = None
        if ending is Ending.RAISED and exc is not None:
            raised, error_type = classify_exception(exc)
        status = self.status
        if status is not None and not 200 <= status < 300:
            outcome = Outcome.REJECTED  # refused before any answer, whatever the status and however it ended
        elif self.facts.server_error:
            outcome = Outcome.SERVER_ERROR  # an error inside an answer that started
        elif self.facts.final and raised is not Outcome.CANCELLED:
            outcome = Outcome.COMPLETED
        elif raised is not None:
            outcome = raised
        elif ending is Ending.EOF:
            if self.streamed:
                outcome, error_type = Outcome.INCOMPLETE, "incomplete_stream"
            else:
                outcome = Outcome.COMPLETED
        elif ending is Ending.CLOSED:
            outcome = Outcome.CLIENT_CLOSED
        elif ending is Ending.DROPPED:
            outcome = Outcome.ABANDONED
        else:  # INTERNAL: what is known so far
            outcome = Outcome.CONNECTION_ERROR if self.status is None else Outcome.COMPLETED
        # error.type: the provider's own word, else the status, else the exception (never for app-side ends)
        if outcome is Outcome.COMPLETED:
            return outcome, None
        if self.facts.error_type:
            return outcome, self.facts.error_type
        if outcome is Outcome.REJECTED:
            return outcome, str(status)
        if outcome in APP_SIDE:
            return outcome, None
        return outcome, error_type

    def _finish_sse_tail(self) -> None:
        # A CR held back in case a LF followed ends its line at end of body.
        if self._pending.endswith(b"\r") and self._feed == self._feed_sse:
            tail = self._pending[:-1] + b"\n"
            self._pending = b""
            self._feed_sse(tail)
        # An event not terminated by a blank line at end of body is not dispatched (SSE spec);
        # the SDKs behave the same, so the attempt is counted as incomplete.
        self._pending = b""

    def _record(self, outcome: Outcome, error_type: str | None, now: float) -> AttemptRecord:
        facts = self.facts
        self._pending = b""
        self._body_parts = []
        self._framer = None
        self._feed = _ignore  # a bound method of its own would keep the observer in a reference cycle
        input_tokens = facts.input_total(self.provider.input_includes_cache)
        return AttemptRecord._make(
            (
                *self.start,
                outcome,
                self.status,
                error_type,
                self.streamed,
                self.headers_at,
                self.first_chunk_at,
                self.first_token_at,
                now,
                self.chunks,
                self.max_gap,
                self.stalls,
                tuple(self._gap_counts),
                self._gap_sum,
                Usage(
                    input_tokens,
                    facts.output_tokens,
                    facts.cache_read_tokens,
                    facts.cache_write_tokens,
                    facts.reasoning_tokens,
                ),
                tuple(reason for _, reason in sorted(facts.stop_reasons.items())),
                facts.response_id,
                facts.response_model,
                facts.request_id,
                tuple(RateLimit(resource, *values) for resource, values in facts.rate_limits.items()),
                self.retry_after,
                facts.server_time,
                self.parse_errors + facts.rejected,
                None,  # cost: priced by the tap (Settings.cost)
                None,  # span_context: set by the tap (Settings.exemplars)
            )
        )
