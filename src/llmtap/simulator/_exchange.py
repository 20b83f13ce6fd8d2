"""Per-request machinery shared by every simulated API: timed socket writes and the fault script.

Each API module (``_anthropic``, ``_openai``) subclasses :class:`Api`, named ``<Format>Api``
(``OpenAIChatApi``: the parser of that format is ``_providers``' ``OpenAIChat``, its SDK driver
``_drive``'s ``OpenAIChatSdk``), and only says what the events and bodies look like; :func:`run` decides
when to send them and which fault to inject.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import select
import socket
import string
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, Literal

from ._scenario import FAIL_STATUSES, Scenario, delta_text

__all__ = [
    "Api",
    "ClientGone",
    "Context",
    "Exchange",
    "Outcome",
    "RateLimitSnapshot",
    "RunResult",
    "Stopping",
    "count_words",
    "error_status_for",
    "json_bytes",
    "rand_id",
    "retry_after_headers",
    "run",
]

Outcome = Literal["completed", "error_status", "error_event", "dropped", "no_stop", "client_disconnected"]

_ALNUM = string.ascii_letters + string.digits


def rand_id(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Stopping(Exception):
    """The simulator is shutting down; abandon the request."""


class ClientGone(Exception):
    """The client closed or reset the connection while we were writing."""


@dataclass(frozen=True)
class RateLimitSnapshot:
    requests_limit: int
    requests_remaining: int
    tokens_limit: int
    tokens_remaining: int
    input_tokens_limit: int
    input_tokens_remaining: int
    output_tokens_limit: int
    output_tokens_remaining: int
    reset_in: float  # seconds until the window resets
    reset_at: float  # wall-clock (time.time()) of the reset


@dataclass
class Context:
    """What an Api needs to render one response."""

    path: str
    body: dict[str, Any]
    scenario: Scenario
    request_id: str
    model: str
    stream: bool
    received_at: float
    ratelimit: RateLimitSnapshot
    created: int = field(default_factory=lambda: int(time.time()))
    query: str = ""  # the URL's query string (Gemini's ``alt=sse``)
    user_agent: str = ""  # which SDK asks, where the wire differs by provider behind one path (Mistral)


class Api:
    """One simulated API. Subclasses render bytes; they never touch the socket."""

    name: ClassVar[str] = "api"
    default_model: ClassVar[str] = "model"
    stream_content_type: ClassVar[str] = "text/event-stream; charset=utf-8"
    """What a stream is framed as (Bedrock: ``application/vnd.amazon.eventstream``)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    # routing: what the request asks for (Gemini carries model and stream in the URL)
    @classmethod
    def request_model(cls, path: str, body: dict[str, Any]) -> str | None:
        model = body.get("model")
        return model if isinstance(model, str) else None

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return body.get("stream") is True

    @classmethod
    def request_max_tokens(cls, path: str, body: dict[str, Any]) -> int | None:
        """The output-length cap the request sets (``fill`` uses it)."""
        for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    @classmethod
    def request_problem(cls, path: str, query: str, body: dict[str, Any]) -> str | None:
        """Why this request is answered with 400 (None: it is fine)."""
        return None

    def elapsed_ms(self) -> int:
        """Milliseconds since the request was received (at least 1): the server time the simulator reports where
        its API reports one, measured as the real one is, so a delay outside the server is left out of it."""
        return max(1, round((time.perf_counter() - self.ctx.received_at) * 1000))

    def error_status(self) -> int:
        """The HTTP status ``error_event_at`` answers a non-streaming request with."""
        return error_status_for(self.ctx.scenario.error_type)

    # usage as reported on this API's wire (recorded in Served)
    def input_tokens(self) -> int:
        return self.ctx.scenario.input

    def output_tokens(self) -> int:
        return self.ctx.scenario.tokens

    def common_headers(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def error_headers(self, status: int) -> list[tuple[str, str]]:
        """Headers only an error response carries (Bedrock's ``x-amzn-errortype``)."""
        return []

    def json_headers(self) -> list[tuple[str, str]]:
        """Headers only a non-streaming success carries (Bedrock's invocation latency and token counts)."""
        return []

    def json_body(self) -> dict[str, Any]:
        raise NotImplementedError

    # streaming: each element is one complete SSE event (bytes ending in a blank line)
    def preamble_events(self) -> list[bytes]:
        raise NotImplementedError

    def delta_event(self, index: int, text: str) -> bytes:
        raise NotImplementedError

    def error_event(self) -> bytes:
        raise NotImplementedError

    def close_events(self) -> list[bytes]:
        """Sent after the last delta even with ``no_stop`` (e.g. ``content_block_stop``)."""
        raise NotImplementedError

    def stop_events(self) -> list[bytes]:
        """The terminal events ``no_stop`` omits (e.g. ``message_delta``, ``message_stop``)."""
        raise NotImplementedError


_NOT_TEXT = frozenset({"model", "role", "type"})


def count_words(obj: Any, depth: int = 0) -> int:
    """Whitespace-separated words in the string values of ``obj`` (``count_input``), not counting
    the ``model``, ``role`` and ``type`` fields."""
    if depth > 20:
        return 0
    if isinstance(obj, str):
        return len(obj.split())
    if isinstance(obj, dict):
        return sum(count_words(v, depth + 1) for k, v in obj.items() if k not in _NOT_TEXT)
    if isinstance(obj, list):
        return sum(count_words(v, depth + 1) for v in obj)
    return 0


def error_status_for(error_type: str) -> int:
    for status, etype in FAIL_STATUSES.items():
        if etype == error_type and status != 503:
            return status
    return 500


class Exchange:
    """Timed writes to one HTTP connection, with stop-interruptible sleeps."""

    def __init__(self, handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        self.handler = handler
        self._stop = stop
        self.headers_sent_at: float | None = None
        self.first_token_sent_at: float | None = None
        self.deltas_sent = 0
        self.status = 0
        self._chunked = False
        self._gz: Any = None  # zlib compress object when streaming with gzip

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self._stop.wait(seconds):
            raise Stopping

    def wait_closed(self, cap: float) -> None:
        """Wait until the client closes the connection (raises :class:`ClientGone`), at most ``cap``
        seconds; the simulator's stop interrupts within a second."""
        sock = self.handler.connection
        deadline = time.perf_counter() + cap
        while (left := deadline - time.perf_counter()) > 0:
            if self._stop.is_set():
                raise Stopping
            try:
                readable, _, _ = select.select([sock], [], [], min(left, 1.0))
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    raise ClientGone("closed while stalled")
            except OSError as exc:  # reset by the peer
                raise ClientGone(type(exc).__name__) from exc
            if readable:  # bytes from the client mid-response (none expected): do not spin on them
                self.sleep(min(left, 0.05))

    def sleep_until(self, due: float) -> None:
        """Sleep until ``time.perf_counter() >= due`` (a wait may wake a little early)."""
        while (left := due - time.perf_counter()) > 0:
            self.sleep(left)

    def _write(self, data: bytes) -> float:
        """Write and flush ``data``; returns the perf_counter reading taken just before the write.

        The reading is taken immediately before the bytes are handed to the kernel, not after:
        on loopback the client can read and timestamp the bytes before this thread gets the GIL
        back from ``send()`` (measured: up to -5 ms under CPU contention). Reading first keeps
        causality, ``sent_at <= any client observation``, at the cost of a few microseconds.
        """
        if self._stop.is_set():
            raise Stopping
        t = time.perf_counter()
        try:
            self.handler.wfile.write(data)
            self.handler.wfile.flush()
        except OSError as exc:  # BrokenPipe, ConnectionReset, or a socket closed under us
            if self._stop.is_set():
                raise Stopping from exc
            raise ClientGone(type(exc).__name__) from exc
        return t

    def send_head(self, status: int, headers: list[tuple[str, str]]) -> None:
        h = self.handler
        self.status = status
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
            if k.lower() == "transfer-encoding" and v == "chunked":
                self._chunked = True
        buf: list[bytes] = getattr(h, "_headers_buffer", [])
        buf.append(b"\r\n")
        data = b"".join(buf)
        buf.clear()
        self.headers_sent_at = self._write(data)

    def send_full(self, status: int, headers: list[tuple[str, str]], body: bytes, *, gzip: bool = False) -> None:
        """A complete response with a content-length."""
        if gzip:
            body = _gzip_all(body)
            headers = [*headers, ("content-encoding", "gzip")]
        self.send_head(status, [*headers, ("content-length", str(len(body)))])
        if body:
            self._write(body)

    def start_stream(self, headers: list[tuple[str, str]], *, gzip: bool) -> None:
        hs = [*headers, ("transfer-encoding", "chunked")]
        if gzip:
            hs.append(("content-encoding", "gzip"))
            self._gz = zlib.compressobj(wbits=31)
        self.send_head(200, hs)

    def event(self, data: bytes, *, is_delta: bool = False) -> float:
        if self._gz is not None:
            data = self._gz.compress(data) + self._gz.flush(zlib.Z_SYNC_FLUSH)
        t = self._write(b"%x\r\n%s\r\n" % (len(data), data))
        if is_delta:
            self.deltas_sent += 1
            if self.first_token_sent_at is None:
                self.first_token_sent_at = t
        return t

    def end_stream(self) -> None:
        tail = b""
        if self._gz is not None:
            last = self._gz.flush(zlib.Z_FINISH)
            if last:
                tail = b"%x\r\n%s\r\n" % (len(last), last)
        self._write(tail + b"0\r\n\r\n")

    def drop(self) -> None:
        """Close the socket abruptly: FIN in both directions, no chunked terminator."""
        h = self.handler
        h.close_connection = True
        conn: socket.socket = h.connection
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()


def _gzip_all(body: bytes) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(body) + c.flush()


@dataclass
class RunResult:
    outcome: Outcome
    detail: str | None = None


def retry_after_headers(sc: Scenario) -> list[tuple[str, str]]:
    if sc.retry_after is None:
        return []
    return [
        ("retry-after", str(math.ceil(sc.retry_after))),
        ("retry-after-ms", str(round(sc.retry_after * 1000))),
    ]


def run(api: Api, ex: Exchange, attempt: int) -> RunResult:
    """Answer one routed, parsed request according to its scenario."""
    ctx = api.ctx
    sc = ctx.scenario

    if attempt < sc.fail:
        ex.sleep(sc.headers_delay)
        status = sc.fail_status
        hs = [("content-type", "application/json"), *api.error_headers(status), *retry_after_headers(sc)]
        if status == 429 or status >= 500:
            hs.append(("x-should-retry", "true"))
        body = json_bytes(api.error_body(status, _fail_message(status)))
        ex.send_full(status, [*api.common_headers(), *hs], body, gzip=sc.gzip)
        return RunResult("error_status", f"fail {attempt + 1}/{sc.fail}")

    if not ctx.stream:
        return _run_unary(api, ex)

    ex.sleep(sc.headers_delay)
    ex.start_stream(
        [
            *api.common_headers(),
            ("content-type", api.stream_content_type),
            ("cache-control", "no-cache"),
        ],
        gzip=sc.gzip,
    )
    for ev in api.preamble_events():
        ex.event(ev)

    n = sc.tokens
    err_at = None if sc.error_event_at is None else min(sc.error_event_at, n)
    drop_at = None if sc.drop_at is None else min(sc.drop_at, n)
    # Deltas follow a schedule from the end of the preamble: delta i is due at ttft + i * gap (plus
    # any stall), so the sleeps' overshoot (~0.1 ms each) does not accumulate into the per-token
    # time. A thread woken far too late (a loaded machine) re-anchors instead of bursting to catch up.
    late = max(sc.gap, 0.001)
    due = time.perf_counter()
    for i in range(n + 1):
        if i == sc.stall_at:
            if sc.stall_until_closed:
                ex.wait_closed(sc.stall)
                due = time.perf_counter()
            else:
                ex.sleep(sc.stall)
                due += sc.stall
        if i == err_at:
            ex.event(api.error_event())
            ex.end_stream()
            return RunResult("error_event", f"after {i} deltas")
        if i == drop_at:
            ex.drop()
            return RunResult("dropped", f"after {i} deltas")
        if i == n:
            break
        due += sc.ttft if i == 0 else sc.gap
        ex.sleep_until(due)
        if (now := time.perf_counter()) - due > late:
            due = now
        ex.event(api.delta_event(i, delta_text(i)), is_delta=True)

    for ev in api.close_events():
        ex.event(ev)
    if sc.no_stop:
        ex.end_stream()
        return RunResult("no_stop")
    for ev in api.stop_events():
        ex.event(ev)
    ex.end_stream()
    return RunResult("completed")


def _run_unary(api: Api, ex: Exchange) -> RunResult:
    sc = api.ctx.scenario
    total = sc.headers_delay
    if sc.tokens:
        total += sc.ttft + sc.gap * (sc.tokens - 1)
    stalls = sc.stall_at is not None and sc.stall_at <= sc.tokens
    if stalls and not sc.stall_until_closed:
        total += sc.stall
    ex.sleep(total)
    if stalls and sc.stall_until_closed:
        ex.wait_closed(sc.stall)
    base = api.common_headers()
    if sc.error_event_at is not None:
        status = api.error_status()
        body = json_bytes(api.error_body(status, _fail_message(status)))
        hs = [*base, *api.error_headers(status), ("content-type", "application/json")]
        ex.send_full(status, hs, body, gzip=sc.gzip)
        return RunResult("error_status", "error_event_at on a non-streaming request")
    body = json_bytes(api.json_body())
    base = [*base, *api.json_headers()]
    if sc.drop_at is not None:
        if sc.gzip:
            body = _gzip_all(body)
            base = [*base, ("content-encoding", "gzip")]
        ex.send_head(200, [*base, ("content-type", "application/json"), ("content-length", str(len(body)))])
        ex._write(body[: len(body) // 2])
        ex.drop()
        return RunResult("dropped", "half the body sent")
    ex.send_full(200, [*base, ("content-type", "application/json")], body, gzip=sc.gzip)
    return RunResult("completed")


def _fail_message(status: int) -> str:
    return {
        400: "Invalid request (simulated)",
        401: "invalid x-api-key (simulated)",
        403: "Your API key does not have permission to use the specified resource. (simulated)",
        404: "Not found (simulated)",
        408: "Request timed out (simulated)",
        413: "Request exceeds the maximum allowed number of bytes. (simulated)",
        429: "Number of request tokens has exceeded your per-minute rate limit (simulated)",
        500: "Internal server error (simulated)",
        503: "Service unavailable (simulated)",
        529: "Overloaded",
    }.get(status, "Error (simulated)")
