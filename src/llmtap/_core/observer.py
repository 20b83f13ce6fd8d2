"""The attempt observer: a pure state machine fed response bytes and clock readings.

It does no I/O and calls nobody back. The stream shells (``stream.py``) call
:meth:`AttemptObserver.on_chunk` with each raw body chunk and a ``perf_counter()`` reading, and
:meth:`AttemptObserver.end` with how the body ended (an :class:`Ending`); the first ``end`` returns
the attempt's one immutable :class:`~llmtap.AttemptRecord`, later ones return ``None``.

The observer only coordinates its parts, each a small unit of its own:

- :func:`~llmtap._core.headers.read_header_items`: the one walk over the response headers;
- :class:`~llmtap._core.gaps.GapCounter`: chunk timing and gap statistics;
- :class:`~llmtap._core.framer.SseFramer` / :class:`~llmtap._core.framer.FrameFeed` /
  :class:`~llmtap._core.framer.NdjsonFramer`: streamed bodies framed into whole events (bounded by
  ``max_event_bytes``), which the observer hands to the provider parser and where it applies the one
  time-to-first-token rule;
- :class:`~llmtap._core.bodybuffer.BodyBuffer`: a non-streaming body (bounded by ``max_json_bytes``),
  parsed once at its end;
- :func:`~llmtap._core.decision.decide`: how the attempt ended (one table);
- :func:`~llmtap._core.builder.build_record`: the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from llmtap._core.body import BodyDecodeError, Decoder, make_decoder
from llmtap._core.bodybuffer import BodyBuffer
from llmtap._core.builder import build_record
from llmtap._core.decision import Ending, classify_exception, decide, heard
from llmtap._core.framer import FrameFeed, NdjsonFramer, SseFramer
from llmtap._core.gaps import GapCounter
from llmtap._core.headers import RawRateLimits, read_header_items
from llmtap._core.jsonbody import loads
from llmtap._core.record import AttemptRecord, AttemptStart
from llmtap._log import internal_error, log_once
from llmtap._providers._base import Facts, Provider

__all__ = ["AttemptObserver", "Ending", "ObserverConfig", "classify_exception"]


class ObserverConfig(NamedTuple):
    """Everything the observer needs from the settings, resolved once at setup."""

    stall_threshold: float
    gap_bounds: tuple[float, ...]
    max_event_bytes: int
    max_json_bytes: int


def _ignore(data: bytes) -> None:
    """The feed of a body llmtap does not parse (and of an ended attempt)."""


class AttemptObserver:
    """State of one HTTP attempt, from its start value to the single record :meth:`end` returns."""

    __slots__ = (
        "_body",
        "_config",
        "_decoder",
        "_feed",
        "_framer",
        "_gaps",
        "_rate_limits",
        "done",
        "facts",
        "first_token_at",
        "headers_at",
        "parse_errors",
        "provider",
        "retry_after",
        "said_end",
        "span_context",
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
        self.first_token_at: float | None = None
        self.parse_errors = 0
        self.retry_after: float | None = None
        self.said_end = False
        """The provider's terminal event (or an in-band error) was parsed from the stream."""
        self._config = config
        self._gaps = GapCounter(config.gap_bounds, config.stall_threshold)
        self._rate_limits: RawRateLimits | None = None
        self._decoder: Decoder | None = None
        self._feed: Callable[[bytes], object] = _ignore
        self._framer: SseFramer | FrameFeed | NdjsonFramer | None = None
        self._body: BodyBuffer | None = None
        self.span_context: object = None
        """The attempt's sampled span context, for the sinks' exemplars (set by the tap at the start)."""

    # -- response headers ---------------------------------------------------------------------

    def on_response(self, status: int, raw_headers: Sequence[tuple[bytes, bytes]], now: float) -> None:
        """The status line and headers (raw ``(name, value)`` pairs) arrived."""
        self.on_header_items(status, [(name, name.lower(), value) for name, value in raw_headers], now)

    def on_header_items(self, status: int, items: Sequence[tuple[bytes, bytes, bytes]], now: float) -> None:
        """The status line and headers arrived, as ``(raw name, lower-case name, value)`` items (httpx's form)."""
        self.headers_at = now
        self.status = status
        provider = self.provider
        content_type, encoding, self.retry_after, self._rate_limits, errors = read_header_items(
            provider, items, self.facts
        )
        self.parse_errors += errors
        if encoding:
            try:
                self._decoder = make_decoder(encoding)
            except BodyDecodeError as exc:
                self.parse_errors += 1
                log_once("encoding", "%s; response bodies with it are not parsed", exc)
                self.streamed = b"text/event-stream" in content_type or b"application/x-ndjson" in content_type
                return
        max_event = self._config.max_event_bytes
        if b"text/event-stream" in content_type:
            self.streamed = True
            self._framer = SseFramer(self._dispatch, provider.markers, max_event, provider.name, provider.quiet_events)
        elif b"application/vnd.amazon.eventstream" in content_type:
            self.streamed = True
            self._framer = FrameFeed(self._dispatch, provider, max_event)
        elif b"application/x-ndjson" in content_type:
            self.streamed = True
            self._framer = NdjsonFramer(self._dispatch, provider.markers, max_event, provider.name)
        else:
            self._body = body = BodyBuffer(self._config.max_json_bytes)
            self._feed = body.add  # an overflow is counted once, at the end
            return
        self._feed = self._framer.feed

    # -- body: the hot path -------------------------------------------------------------------

    def on_chunk(self, chunk: bytes, now: float) -> bool:
        """One raw body chunk as read from the transport, before content decoding; returns True once
        the provider's terminal event has been parsed (the shell then ends the attempt:
        :attr:`Ending.TERMINAL`).

        After the first content token of an LF-framed SSE stream, the whole work per chunk is timing
        arithmetic, inflating it if compressed, one ``rfind`` for the event boundary and one ``find``
        per provider marker; events are parsed only when a marker is present.
        """
        self._gaps.tick(now)
        try:
            if self._decoder is not None:
                chunk = self._decoder(chunk)
            self._feed(chunk)
        except BodyDecodeError as exc:
            self.parse_errors += 1 + (self._framer.errors if self._framer is not None else 0)
            self._decoder = None
            self._framer = None
            self._feed = _ignore
            log_once("decode", "%s (%s); the rest of this body is not parsed", exc, self.provider.name)
        except Exception as exc:
            self.parse_errors += 1
            internal_error("parser", "internal error parsing a %s body: %r", self.provider.name, exc)
        return self.said_end

    def on_content(self, content: bytes, now: float) -> None:
        """The whole body, already read and content-decoded by the client (no transport stream); an
        :attr:`Ending.EOF` follows."""
        self._decoder = None
        if content:
            self.on_chunk(content, now)

    def _dispatch(self, event: bytes | None, data: bytes) -> None:
        """One whole event to the provider, whatever framed it (SSE, AWS event-stream, JSON lines)."""
        provider = self.provider
        facts = self.facts
        try:
            output = provider.on_event(facts, event, data)
        except (ValueError, RecursionError) as exc:  # not JSON (or nested beyond what json parses)
            self.parse_errors += 1
            log_once(
                "event",
                "could not parse an event %r from %s (%s); counted in parse_errors",
                (event or b"").decode("ascii", "replace")[:64],
                provider.name,
                type(exc).__name__,
            )
        except Exception as exc:  # a parser bug: counted as llmtap's own failure too
            self.parse_errors += 1
            internal_error("parser", "internal error parsing a %s event: %r", provider.name, exc)
        else:
            # the one time-to-first-token rule: the first event carrying generated output of any kind
            if output is not None and self.first_token_at is None:
                self.first_token_at = self._gaps.last
                if self._framer is not None:
                    self._framer.scan_all = False
        if facts.final or facts.server_error:
            self.said_end = True  # the provider's terminal event (or an in-band error) was parsed

    def _body_overflowed(self) -> None:
        self.parse_errors += 1
        log_once(
            "json-size",
            "a %s JSON body exceeded max_json_bytes=%d; not parsed",
            self.provider.name,
            self._config.max_json_bytes,
        )

    def _parse_json_body(self) -> None:
        status = self.status
        body = None if self._body is None or status is None else self._body.take()
        if body is None or status is None:
            return
        try:
            parsed = loads(body)
        except (ValueError, RecursionError):
            if 200 <= status < 300:
                self.parse_errors += 1
                log_once("json", "a %s response body was not valid JSON", self.provider.name)
            return
        try:
            self.provider.on_body(self.facts, parsed, status)
        except Exception as exc:
            self.parse_errors += 1
            internal_error("parser", "internal error reading a %s body: %r", self.provider.name, exc)

    # -- the ending: decided once, finalised once ------------------------------------------------

    def end(self, ending: Ending, now: float, exc: BaseException | None = None) -> AttemptRecord | None:
        """Finalise the attempt: its record the first time, ``None`` every later time.

        ``exc`` is the exception for :attr:`Ending.RAISED`; a ``GeneratorExit`` is not an ending by
        itself (the close that follows it is).
        """
        if self.done or isinstance(exc, GeneratorExit):
            return None
        self.done = True
        facts = self.facts
        status = self.status
        if self._body is not None and self._body.overflowed:
            self._body_overflowed()
        if ending is Ending.EOF:
            if self._framer is not None:
                self._framer.finish()
            if not self.streamed:
                self._parse_json_body()
        elif not self.streamed and ((status is not None and not 200 <= status < 300) or facts.server_error):
            self._parse_json_body()  # an error body read whole before the close
        said = heard(status, facts.server_error, facts.final, self.streamed, bool(facts.stop_reasons))
        outcome, error_type = decide(said, ending, exc, status, facts.error_type)
        framer = self._framer
        # drop the parts: the framer's dispatch is a bound method of this observer (a reference cycle)
        self._framer = None
        self._body = None
        self._feed = _ignore
        return build_record(  # positionally, in the order of its parameters (status ... span_context)
            self.start,
            outcome,
            error_type,
            status,
            self.streamed,
            self.headers_at,
            self.first_token_at,
            now,
            self._gaps,
            facts,
            self.provider.input_includes_cache,
            self._rate_limits,
            self.retry_after,
            self.parse_errors + (framer.errors if framer is not None else 0),
            self.span_context,
        )
