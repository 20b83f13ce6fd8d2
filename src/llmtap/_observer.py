"""The attempt observer: a pure state machine fed response bytes and clock readings.

It does no I/O. The stream shells (``_stream.py``) call :meth:`AttemptObserver.on_chunk` with each
raw body chunk and a ``perf_counter()`` reading, and one of ``on_eof`` / ``on_close`` /
``on_exception`` / ``on_abandon`` when the body ends; whichever comes first finalises the attempt,
exactly once, into an immutable :class:`~llmtap.AttemptRecord`.

The per-chunk path is the hot path. Once the first content token has been seen, SSE events are
only *framed* (a C-level ``rfind`` for the event boundary and a marker search); they are parsed
only when a chunk contains one of the provider's markers (``message_delta``, ``error`` ...).
Memory per stream is bounded by ``max_event_bytes`` (one partial SSE event) or
``max_json_bytes`` (one non-streaming body), whichever applies.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmtap._body import BodyDecodeError, Decoder, make_decoder
from llmtap._headers import duration, finite, reset_at, retry_after_seconds
from llmtap._log import internal_error, log_once
from llmtap._record import AttemptRecord, Outcome, RateLimit, Usage
from llmtap.providers._base import Facts, Header, Provider, RequestInfo

if TYPE_CHECKING:
    import weakref

__all__ = ["AttemptObserver", "ObserverConfig", "classify_exception"]


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
_RESET_AT, _RESET_IN, _REQUEST_ID, _SERVER_TIME_MS = (
    int(Header.RESET_AT),
    int(Header.RESET_IN),
    int(Header.REQUEST_ID),
    int(Header.SERVER_TIME_MS),
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


class AttemptObserver:
    """State of one HTTP attempt from request start to its single finalisation."""

    __slots__ = (
        "_body_parts",
        "_body_size",
        "_config",
        "_crlf",
        "_decoder",
        "_discarding",
        "_done",
        "_fast",
        "_feed",
        "_gap_bounds",
        "_gap_counts",
        "_gap_first",
        "_gap_sum",
        "_markers",
        "_max_event",
        "_now",
        "_on_finish",
        "_pending",
        "_scan_all",
        "_stall",
        "body_bytes",
        "call",
        "chunks",
        "events_parsed",
        "facts",
        "finalizer",
        "first_chunk_at",
        "first_token_at",
        "headers_at",
        "host",
        "last_chunk_at",
        "max_gap",
        "method",
        "model_label",
        "parse_errors",
        "path",
        "port",
        "provider",
        "provider_name",
        "request",
        "resend_count",
        "retry_after",
        "retry_reason",
        "sink_states",
        "stalls",
        "start_unix_ns",
        "started_at",
        "status",
        "streamed",
    )

    def __init__(
        self,
        *,
        provider: Provider,
        provider_name: str,
        config: ObserverConfig,
        request: RequestInfo,
        model_label: str,
        method: str,
        host: str,
        port: int,
        path: str,
        resend_count: int,
        retry_reason: str | None,
        call: Any,
        on_finish: Callable[[AttemptObserver, AttemptRecord], None],
    ) -> None:
        self.provider = provider
        self.provider_name = provider_name
        self._config = config
        self.request = request
        self.model_label = model_label
        self.method = method
        self.host = host
        self.port = port
        self.path = path
        self.resend_count = resend_count
        self.retry_reason = retry_reason
        self.call = call
        self._on_finish = on_finish
        self.facts = Facts()
        self.sink_states: tuple[object, ...] = ()
        self.finalizer: weakref.finalize[Any, Any] | None = None
        self.start_unix_ns = time.time_ns()
        self.started_at = time.perf_counter()
        self.status: int | None = None
        self.streamed = False
        self.headers_at: float | None = None
        self.first_chunk_at: float | None = None
        self.first_token_at: float | None = None
        self.last_chunk_at = 0.0
        self.max_gap = 0.0
        self.stalls = 0
        self.chunks = 0
        self.events_parsed = 0
        self.body_bytes = 0
        self.parse_errors = 0
        self.retry_after: float | None = None
        self._gap_counts = [0] * (len(config.gap_bounds) + 1)
        self._gap_sum = 0.0
        self._now = 0.0
        self._decoder: Decoder | None = None
        self._feed: Callable[[bytes], None] = self._feed_ignore
        self._pending = b""
        self._discarding = False
        self._scan_all = True
        self._fast = False
        self._crlf = False
        self._markers = provider.markers
        self._gap_bounds = config.gap_bounds
        self._gap_first = config.gap_bounds[0] if config.gap_bounds else float("inf")
        self._stall = config.stall_threshold
        self._max_event = config.max_event_bytes
        self._body_parts: list[bytes] = []
        self._body_size = 0
        self._done = False

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
                self._feed = self._feed_ignore
                self.streamed = b"text/event-stream" in content_type
                return
        if b"text/event-stream" in content_type:
            self.streamed = True
            self._feed = self._feed_sse
        else:
            self._feed = self._feed_json

    # -- body: the hot path -------------------------------------------------------------------

    def on_chunk(self, chunk: bytes, now: float) -> None:
        """One raw body chunk as read from the transport, before content decoding.

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
        self.last_chunk_at = now
        self.chunks += 1
        self.body_bytes += len(chunk)
        if self._fast:
            if self._decoder is not None:
                try:
                    chunk = self._decoder(chunk)
                except BodyDecodeError as exc:
                    self._fast = False
                    self._undecodable(exc)
                    return
            data = self._pending + chunk if self._pending else chunk
            end = data.rfind(b"\n\n")
            if end >= 0:
                self._pending = data[end + 2 :]
                for marker in self._markers:
                    if data.find(marker) != -1:
                        self._now = now
                        self._parse_events(data[:end])
                        break
                return
            if len(data) <= self._max_event and data.find(b"\r") == -1:
                self._pending = data
                return
            # an oversized event or CR framing: the general path takes over (already decoded)
            self._fast = False
            self._crlf = self._crlf or data.find(b"\r") != -1
            self._pending = b""
            self._now = now
            self._feed(data)
            return
        self._now = now
        try:
            if self._decoder is not None:
                chunk = self._decoder(chunk)
            self._feed(chunk)
        except BodyDecodeError as exc:
            self._undecodable(exc)
        except Exception as exc:
            self.parse_errors += 1
            internal_error("parser", "llmtap: internal error parsing a %s body: %r", self.provider.name, exc)

    def _undecodable(self, exc: BodyDecodeError) -> None:
        self.parse_errors += 1
        self._decoder = None
        self._feed = self._feed_ignore
        log_once("decode", "llmtap: %s (%s); the rest of this body is not parsed", exc, self.provider.name)

    def on_content(self, content: bytes, now: float) -> None:
        """The whole body, already read and content-decoded by the client (no transport stream)."""
        self._decoder = None
        if content:
            self.on_chunk(content, now)
        self.on_eof(now)

    def _feed_ignore(self, data: bytes) -> None:
        pass

    def _feed_sse(self, data: bytes) -> None:
        if self._pending:
            data = self._pending + data
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

    def _parse_events(self, region: bytes) -> None:
        provider = self.provider
        facts = self.facts
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
            self.events_parsed += 1
            data = data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines)
            try:
                provider.on_event(facts, event, data)
            except (ValueError, RecursionError) as exc:  # not JSON (or nested beyond what json parses)
                self.parse_errors += 1
                log_once(
                    "event",
                    "llmtap: could not parse an SSE event %r from %s (%s); counted in parse_errors",
                    (event or b"").decode("ascii", "replace")[:64],
                    provider.name,
                    type(exc).__name__,
                )
            except Exception as exc:  # a parser bug: counted as llmtap's own failure too
                self.parse_errors += 1
                internal_error("parser", "llmtap: internal error parsing a %s event: %r", provider.name, exc)
            if facts.first_token and self.first_token_at is None:
                self.first_token_at = self._now
                self._scan_all = False

    def _feed_json(self, data: bytes) -> None:
        if self._body_size < 0:
            return
        self._body_size += len(data)
        if self._body_size > self._config.max_json_bytes:
            self._body_parts.clear()
            self._body_size = -1
            self.parse_errors += 1
            log_once(
                "json-size",
                "llmtap: a %s JSON body exceeded max_json_bytes=%d; not parsed",
                self.provider.name,
                self._config.max_json_bytes,
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

    # -- endings: each finalises at most once ---------------------------------------------------

    def _status_failed(self) -> bool:
        return self.status is not None and not 200 <= self.status < 300

    def on_eof(self, now: float) -> None:
        """The body was read to its end."""
        if self._done:
            return
        if self._decoder is not None or self.streamed:
            self._finish_sse_tail()
        if not self.streamed:
            self._parse_json_body()
        if self._status_failed() or self.facts.server_error:
            self._finish(Outcome.SERVER_ERROR, now)
        elif self.facts.final or not self.streamed:
            self._finish(Outcome.COMPLETED, now)
        else:
            self._finish(Outcome.INCOMPLETE, now, "incomplete_stream")

    def _finish_sse_tail(self) -> None:
        # A CR held back in case a LF followed ends its line at end of body.
        if self._pending.endswith(b"\r") and self._feed == self._feed_sse:
            tail = self._pending[:-1] + b"\n"
            self._pending = b""
            self._feed_sse(tail)
        # An event not terminated by a blank line at end of body is not dispatched (SSE spec);
        # the SDKs behave the same, so the attempt is counted as incomplete.
        self._pending = b""

    def on_close(self, now: float, abandoned: bool = False) -> None:
        """The app (or the SDK) closed the response; ``abandoned`` when it was closed only because the
        app dropped the stream (its generator is being finalised)."""
        if self._done:
            return
        if self._status_failed() or self.facts.server_error:
            if not self.streamed:
                self._parse_json_body()
            self._finish(Outcome.SERVER_ERROR, now)
        elif self.facts.final:
            self._finish(Outcome.COMPLETED, now)
        else:
            self._finish(Outcome.ABANDONED if abandoned else Outcome.CLIENT_CLOSED, now)

    def on_exception(self, exc: BaseException, now: float) -> None:
        """An exception came out of the transport: before the headers or while reading the body."""
        if self._done or isinstance(exc, GeneratorExit):
            return
        outcome, error_type = classify_exception(exc)
        if self.facts.final and outcome is not Outcome.CANCELLED:
            self._finish(Outcome.COMPLETED, now)
        elif self.facts.server_error:
            self._finish(Outcome.SERVER_ERROR, now)
        else:
            self._finish(outcome, now, error_type)

    def on_abandon(self) -> None:
        """Called by the garbage collector (or at exit) for a response nobody closed."""
        if self._done:
            return
        now = time.perf_counter()
        if self._status_failed() or self.facts.server_error:
            self._finish(Outcome.SERVER_ERROR, now)
        elif self.facts.final:
            self._finish(Outcome.COMPLETED, now)
        else:
            self._finish(Outcome.ABANDONED, now)

    def finish_internal_error(self, now: float) -> None:
        """llmtap itself failed mid-attempt: close the books so the attempt is still counted once."""
        if not self._done:
            self._finish(Outcome.CONNECTION_ERROR if self.status is None else Outcome.COMPLETED, now)

    def _error_type(self, outcome: Outcome, fallback: str | None) -> str | None:
        if outcome is Outcome.COMPLETED:
            return None
        if self.facts.error_type:
            return self.facts.error_type
        if self._status_failed():
            return str(self.status)
        if outcome in (Outcome.CLIENT_CLOSED, Outcome.ABANDONED, Outcome.CANCELLED):
            return None
        return fallback

    def _finish(self, outcome: Outcome, now: float, error_type: str | None = None) -> None:
        self._done = True
        if self.finalizer is not None:
            self.finalizer.detach()
            self.finalizer = None
        facts = self.facts
        provider = self.provider
        self._pending = b""
        self._body_parts = []
        input_tokens = facts.input_total(provider.input_includes_cache)
        record = AttemptRecord(
            provider=self.provider_name,
            operation=provider.operation,
            request_model=self.model_label,
            server_address=self.host,
            server_port=self.port,
            url_path=self.path,
            method=self.method,
            request_stream=self.request.stream,
            request_max_tokens=self.request.max_tokens,
            resend_count=self.resend_count,
            call_id=getattr(self.call, "call_id", None),
            outcome=outcome,
            status_code=self.status,
            error_type=self._error_type(outcome, error_type),
            streamed=self.streamed,
            started_at=self.started_at,
            headers_at=self.headers_at,
            first_byte_at=self.first_chunk_at,
            first_chunk_at=self.first_chunk_at,
            first_token_at=self.first_token_at,
            last_chunk_at=self.last_chunk_at if self.chunks else None,
            ended_at=now,
            chunks=self.chunks,
            events_parsed=self.events_parsed,
            max_gap=self.max_gap,
            stalls=self.stalls,
            body_bytes=self.body_bytes,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=facts.output_tokens,
                cache_read_tokens=facts.cache_read_tokens,
                cache_write_tokens=facts.cache_write_tokens,
                reasoning_tokens=facts.reasoning_tokens,
            ),
            stop_reasons=tuple(reason for _, reason in sorted(facts.stop_reasons.items())),
            response_id=facts.response_id,
            response_model=facts.response_model,
            request_id=facts.request_id,
            rate_limits=tuple(
                RateLimit(resource, values[0], values[1], values[2]) for resource, values in facts.rate_limits.items()
            ),
            retry_after=self.retry_after,
            parse_errors=self.parse_errors + facts.rejected,
            server_time=facts.server_time,
            gap_bucket_counts=tuple(self._gap_counts),
            gap_sum=self._gap_sum,
            start_unix_ns=self.start_unix_ns,
        )
        self._on_finish(self, record)
