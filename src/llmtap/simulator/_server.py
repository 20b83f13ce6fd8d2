"""The HTTP/1.1 server, request routing, rate-limit bookkeeping and the :class:`Simulator` handle.

One module though over 300 lines: the handle owns what the server's threads record (the requests in flight,
the served records and their generation), and a request's handling (:meth:`Simulator._handle`, in steps:
what no API serves, the request's context, the API's run, the record) reads and writes it under one lock.
The wire formats are the API modules'."""

from __future__ import annotations

import bisect
import contextlib
import json
import re
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ._anthropic import AnthropicMessagesApi, anthropic_error_body
from ._clouds import (
    BEDROCK_CONVERSE_PATH,
    BEDROCK_PATH,
    VERTEX_PATH,
    BedrockConverseApi,
    BedrockInvokeApi,
    VertexRawPredictApi,
)
from ._cohere import CohereChatApi
from ._exchange import (
    Api,
    ClientGone,
    Context,
    Exchange,
    Outcome,
    RateLimitSnapshot,
    RunResult,
    Stopping,
    count_words,
    json_bytes,
    rand_id,
    run,
)
from ._gemini import GEMINI_PATH, GeminiGenerateApi
from ._ollama import OllamaChatApi, OllamaGenerateApi
from ._openai import OpenAIChatApi, OpenAIResponsesApi
from ._scenario import SCENARIO_HEADER, Scenario, ScenarioError

__all__ = ["Served", "Simulator", "serve_forever"]

ROUTES: dict[str, type[Api]] = {
    "/v1/messages": AnthropicMessagesApi,
    "/v1/chat/completions": OpenAIChatApi,  # OpenAI, Mistral
    "/openai/v1/chat/completions": OpenAIChatApi,  # Groq
    "/v1/responses": OpenAIResponsesApi,
    "/v2/chat": CohereChatApi,
    "/api/chat": OllamaChatApi,  # ollama's native API
    "/api/generate": OllamaGenerateApi,
}
#: routes matched by pattern, after the exact ones
PATTERN_ROUTES: tuple[tuple[re.Pattern[str], str, type[Api]], ...] = (
    (GEMINI_PATH, "/v1beta/models/{model}:generateContent|streamGenerateContent", GeminiGenerateApi),
    (BEDROCK_PATH, "/model/{model}/invoke|invoke-with-response-stream", BedrockInvokeApi),
    (BEDROCK_CONVERSE_PATH, "/model/{model}/converse|converse-stream", BedrockConverseApi),
    (
        VERTEX_PATH,
        "/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict|streamRawPredict",
        VertexRawPredictApi,
    ),
)


def route(path: str) -> type[Api] | None:
    api_cls = ROUTES.get(path)
    if api_cls is not None:
        return api_cls
    for pattern, _, cls in PATTERN_ROUTES:
        if pattern.match(path):
            return cls
    return None


_MAX_BODY = 64 * 1024 * 1024
_AWS_ATTEMPT = re.compile(r"(?:^|;)\s*attempt=(\d+)\s*(?:;|$)")


def _retry_count(headers: Any) -> int | None:
    """The resend count the client says: ``x-stainless-retry-count`` (the Stainless SDKs), else the AWS SDKs'
    ``amz-sdk-request: attempt=N; max=M`` (N - 1); ``None`` when it says none."""
    try:
        header = headers.get("x-stainless-retry-count")
        if header is not None:
            return int(header)
        match = _AWS_ATTEMPT.search(headers.get("amz-sdk-request", ""))
        return int(match.group(1)) - 1 if match else None
    except ValueError:
        return None


_MAX_COUNTED = 10_000
"""Scenario keys :meth:`Simulator._seen_before` remembers (a long ``llmtap simulate`` run with a new model per
request would otherwise grow without end); past it the counts start again."""


@dataclass(frozen=True)
class Served:
    """What the simulator did for one HTTP request.

    Times are ``time.perf_counter()`` readings taken right after the corresponding socket write.
    Usage fields are the numbers the response reports on that API's wire (OpenAI's input count
    includes ``cache_read``; its output count includes ``reasoning``; Gemini's are ``promptTokenCount``
    and ``candidatesTokenCount + thoughtsTokenCount``, the same sums), and 0 for error statuses.
    """

    path: str
    method: str
    #: "anthropic" | "openai-chat" | "openai-responses" | "gemini" | "bedrock" | "bedrock-converse" | "vertex"
    #: | "cohere-chat" | "ollama-chat" | "ollama-generate" | "health" (GET /healthz) | "unknown"
    api: str
    retry_count: int
    """The resend count the client said (``x-stainless-retry-count``, ``amz-sdk-request``); 0 when it says none."""
    attempt: int
    """The attempt number ``Scenario.fail`` compared: :attr:`retry_count` when the client says one, else how many
    requests of the same path, model and scenario the simulator saw before (since it started or was cleared)."""
    status: int
    stream: bool
    scenario: Scenario
    request_id: str
    model: str | None
    received_at: float
    headers_sent_at: float | None  # None if no status line was sent (simulator stopped / client gone)
    first_token_sent_at: float | None  # None if no content delta was sent
    ended_at: float
    #: "completed" | "error_status" | "error_event" | "dropped" | "no_stop" | "client_disconnected"
    outcome_sent: Outcome
    deltas_sent: int
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    stop_reason: str | None
    auth_present: bool  # whether x-api-key, x-goog-api-key or authorization was sent (never the value)
    connection: int  # serial number of the TCP connection (equal numbers: keep-alive reuse)
    detail: str | None = None


class _RateLimiter:
    """Fixed 60-second windows (starting at the first request), one per API family."""

    WINDOW = 60.0
    LIMITS: ClassVar[dict[str, tuple[int, int, int, int]]] = {
        # requests, tokens, input tokens, output tokens
        "anthropic": (4000, 2_400_000, 2_000_000, 400_000),
        "openai": (10_000, 30_000_000, 30_000_000, 30_000_000),
        "gemini": (2_000, 4_000_000, 4_000_000, 4_000_000),  # not sent: Gemini has no rate-limit headers
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, int, int, int]] = {}  # start, requests, in, out

    def take(self, family: str, input_tokens: int, output_tokens: int) -> RateLimitSnapshot:
        now = time.monotonic()
        wall = time.time()
        req_l, tok_l, in_l, out_l = self.LIMITS[family]
        with self._lock:
            start, reqs, used_in, used_out = self._state.get(family, (now, 0, 0, 0))
            if now - start >= self.WINDOW:
                start, reqs, used_in, used_out = now, 0, 0, 0
            reqs += 1
            used_in += input_tokens
            used_out += output_tokens
            self._state[family] = (start, reqs, used_in, used_out)
        reset_in = max(0.001, start + self.WINDOW - now)
        return RateLimitSnapshot(
            requests_limit=req_l,
            requests_remaining=max(0, req_l - reqs),
            tokens_limit=tok_l,
            tokens_remaining=max(0, tok_l - used_in - used_out),
            input_tokens_limit=in_l,
            input_tokens_remaining=max(0, in_l - used_in),
            output_tokens_limit=out_l,
            output_tokens_remaining=max(0, out_l - used_out),
            reset_in=reset_in,
            reset_at=wall + reset_in,
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmtap-simulator/0.1"
    sys_version = ""
    server: _HTTPServer
    conn_serial = 0

    def setup(self) -> None:
        super().setup()
        # Every event is its own small write: without TCP_NODELAY, Nagle + the client's delayed ACK
        # would hold them back for ~40 ms and the timings would be fiction.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.sim._register(self)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.sim._unregister(self)

    def do_POST(self) -> None:
        self.server.sim._handle(self, "POST")

    def do_GET(self) -> None:
        self.server.sim._handle(self, "GET")

    def do_PUT(self) -> None:
        self.server.sim._handle(self, "PUT")

    def do_DELETE(self) -> None:
        self.server.sim._handle(self, "DELETE")

    def do_PATCH(self) -> None:
        self.server.sim._handle(self, "PATCH")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # --verbose prints served_line() per request instead of the access log

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.sim.verbose:
            super().log_message(format, *args)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # we join handler threads ourselves, with a deadline
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sim: Simulator) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.sim = sim
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # Skip HTTPServer's getfqdn() (a reverse DNS lookup that can be slow).
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.sim.verbose:
            super().handle_error(request, client_address)


class Simulator:
    """An embedded Anthropic Messages / OpenAI Chat + Responses compatible HTTP server.

    ``with Simulator() as sim: anthropic.Anthropic(base_url=sim.base_url, api_key="x")``.
    Per-request behaviour comes from the ``x-llmtap-sim`` header (see :class:`Scenario`),
    falling back to :attr:`default`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        default: Scenario | None = None,
        *,
        verbose: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.default: Scenario = default if default is not None else Scenario()
        self.verbose = verbose
        self.served: list[Served] = []
        self._served_cond = threading.Condition()
        self._generation = 0  # bumped by clear(); a request is recorded only in the generation it started in
        self._in_flight = 0
        self._count = 0  # requests ended, for --verbose
        self._lock = threading.Lock()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._conns: dict[_Handler, threading.Thread] = {}
        self._conns_lock = threading.Lock()
        self._conn_serial = 0
        self._ratelimits = _RateLimiter()
        self._seen: dict[tuple[str, str, str], int] = {}  # requests per (path, model, scenario) without a resend count
        self._base_url: str | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Simulator:
        """Bind and serve in a background daemon thread. Returns ``self``."""
        with self._lock:
            if self._server is not None:
                return self
            self._stop = threading.Event()
            server = _HTTPServer((self.host, self.port), self)
            host, port = str(server.server_address[0]), int(server.server_address[1])
            url_host = f"[{host}]" if ":" in host else host
            self._base_url = f"http://{url_host}:{port}"
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"llmtap-simulator:{port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Shut down: stop accepting, interrupt sleeping handlers, close every connection.

        Idempotent; returns within about a second even if handlers are mid-stall.
        """
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
            if server is None:
                return
            with self._conns_lock:
                self._stop.set()
                conns = list(self._conns.items())
        server.shutdown()
        server.server_close()
        for handler, _ in conns:
            _shutdown_socket(handler.connection)
        if thread is not None:
            thread.join(timeout=2.0)
        deadline = time.monotonic() + 2.0
        for _, t in conns:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (only once started)."""
        if self._base_url is None:
            raise RuntimeError("Simulator not started; call start() or use it as a context manager")
        return self._base_url

    @property
    def running(self) -> bool:
        return self._server is not None

    # ------------------------------------------------------------------ records

    def clear(self) -> None:
        """Forget every :class:`Served` record, and those of the requests still being handled.

        A request belongs to the records of the ``clear()`` generation in which it started: one that an
        earlier test left streaming (an abandoned stream the server keeps serving, a client that gave up)
        finishes without a record, so counts taken after ``clear()`` are exactly the requests started
        after it.
        """
        with self._served_cond:
            self.served.clear()
            self._generation += 1
        with self._lock:
            self._seen.clear()

    @property
    def in_flight(self) -> int:
        """How many requests are being handled now (started, not yet recorded or dropped by ``clear()``)."""
        with self._served_cond:
            return self._in_flight

    def wait_served(self, count: int, timeout: float = 5.0) -> list[Served]:
        """Wait until at least ``count`` requests have finished; return a snapshot of :attr:`served`.

        The client can see the end of a response a moment before the server records it.
        Raises ``TimeoutError`` if that does not happen in ``timeout`` seconds.
        """
        with self._served_cond:
            if not self._served_cond.wait_for(lambda: len(self.served) >= count, timeout):
                raise TimeoutError(f"only {len(self.served)} of {count} requests served after {timeout}s")
            return list(self.served)

    def wait_idle(self, timeout: float = 5.0) -> list[Served]:
        """Wait until no request is being handled (:attr:`in_flight` is 0); return a snapshot of :attr:`served`.

        Raises ``TimeoutError`` if requests are still being handled after ``timeout`` seconds.
        """
        with self._served_cond:
            if not self._served_cond.wait_for(lambda: self._in_flight == 0, timeout):
                raise TimeoutError(f"{self._in_flight} requests still in flight after {timeout}s")
            return list(self.served)

    def _seen_before(self, key: tuple[str, str, str]) -> int:
        """How many requests of ``key`` (path, model, scenario) came before this one (since ``clear()``): the
        resend count of a client that sends none, as the server sees it."""
        with self._lock:
            if len(self._seen) >= _MAX_COUNTED and key not in self._seen:
                self._seen.clear()
            seen = self._seen.get(key, 0)
            self._seen[key] = seen + 1
            return seen

    def _begin(self) -> int:
        """A request starts: count it in flight; returns the generation its record belongs to."""
        with self._served_cond:
            self._in_flight += 1
            return self._generation

    def _record(self, served: Served | None, generation: int) -> None:
        """A request ends: its record (None: a bug of the simulator's own lost it) joins :attr:`served`
        unless ``clear()`` was called since it started."""
        with self._served_cond:
            self._in_flight -= 1
            if served is not None and generation == self._generation:
                bisect.insort(self.served, served, key=lambda s: s.received_at)
            self._count += 1
            count = self._count
            self._served_cond.notify_all()
        if self.verbose and served is not None:
            print(served_line(count, served), file=sys.stderr, flush=True)

    def _register(self, handler: _Handler) -> None:
        with self._conns_lock:
            self._conn_serial += 1
            handler.conn_serial = self._conn_serial
            self._conns[handler] = threading.current_thread()
            stopping = self._stop.is_set()
        if stopping:
            _shutdown_socket(handler.connection)

    def _unregister(self, handler: _Handler) -> None:
        with self._conns_lock:
            self._conns.pop(handler, None)

    # ------------------------------------------------------------------ one request

    def _handle(self, h: _Handler, method: str) -> None:
        received_at = time.perf_counter()
        url = urlsplit(h.path)
        path = url.path
        api_cls = route(path)
        ex = Exchange(h, self._stop)
        request_id = "req_" + rand_id(24)
        scenario = self.default
        stream = False
        model: str | None = None
        api: Api | None = None
        result = RunResult("dropped", "internal error")
        said = _retry_count(h.headers)
        retry_count = attempt = said or 0
        auth_present = any(k in h.headers for k in ("x-api-key", "x-goog-api-key", "authorization"))
        generation = self._begin()
        try:
            raw = self._read_body(h)
            problem: str | None = None
            header = h.headers.get(SCENARIO_HEADER)
            if header is not None:
                try:
                    scenario = Scenario.parse(header)
                except ScenarioError as exc:
                    problem = f"invalid {SCENARIO_HEADER} header: {exc}"
            if api_cls is None or method != "POST":
                result = self._unrouted(ex, path, method, api_cls, request_id)
                return
            ctx, problem, attempt = self._context(
                h, api_cls, path, url.query, raw, scenario, problem, said, header, request_id, received_at
            )
            scenario, model, stream = ctx.scenario, ctx.model, ctx.stream
            api = api_cls(ctx)
            if problem is not None:
                ex.send_full(
                    400,
                    [*api.common_headers(), ("content-type", "application/json")],
                    json_bytes(api.error_body(400, problem)),
                )
                result = RunResult("error_status", problem)
                return
            result = run(api, ex, attempt)
        except ClientGone as exc:
            h.close_connection = True
            result = RunResult("client_disconnected", str(exc))
        except Stopping:
            ex.drop()
            result = RunResult("dropped", "simulator stopped")
        except Exception as exc:
            # A bug in the simulator: never let it take the server thread down.
            if self.verbose:
                import traceback

                traceback.print_exc()
            ex.drop()
            result = RunResult("dropped", f"simulator error: {exc!r}")
        finally:
            record: Served | None = None
            try:
                ended_at = time.perf_counter()
                usage_ok = result.outcome != "error_status" and api is not None
                record = Served(
                    path=path,
                    method=method,
                    api=api_cls.name if api_cls is not None else ("health" if path == "/healthz" else "unknown"),
                    retry_count=retry_count,
                    attempt=attempt,
                    status=ex.status,
                    stream=stream,
                    scenario=scenario,
                    request_id=request_id,
                    model=model,
                    received_at=received_at,
                    headers_sent_at=ex.headers_sent_at,
                    first_token_sent_at=ex.first_token_sent_at,
                    ended_at=ended_at,
                    outcome_sent=result.outcome,
                    deltas_sent=ex.deltas_sent,
                    input_tokens=api.input_tokens() if usage_ok and api is not None else 0,
                    output_tokens=api.output_tokens() if usage_ok and api is not None else 0,
                    cache_read=scenario.cache_read if usage_ok else 0,
                    cache_write=scenario.cache_write if usage_ok else 0,
                    stop_reason=scenario.stop_reason if usage_ok else None,
                    auth_present=auth_present,
                    connection=h.conn_serial,
                    detail=result.detail,
                )
            finally:
                self._record(record, generation)

    def _context(
        self,
        h: _Handler,
        api_cls: type[Api],
        path: str,
        query: str,
        raw: bytes,
        scenario: Scenario,
        problem: str | None,
        said: int | None,
        header: str | None,
        request_id: str,
        received_at: float,
    ) -> tuple[Context, str | None, int]:
        """What an API's request asks for, read once: its JSON body, the scenario resolved against it, the
        model, the rate-limit budget it takes (a request refused takes none), and the first problem that
        makes it a 400 (``problem``: one found before), and the attempt number ``Scenario.fail`` compares: the
        resend count the client said (``said``), else the server's count of the same call (``header``: the
        scenario header as sent)."""
        body_obj: dict[str, Any] = {}
        try:
            parsed = json.loads(raw) if raw else {}
            if isinstance(parsed, dict):
                body_obj = parsed
            else:
                problem = problem or "request body must be a JSON object"
        except ValueError as exc:
            problem = problem or f"request body is not valid JSON: {exc}"
        stream = api_cls.request_stream(path, query, body_obj)
        scenario = scenario.resolve(
            api_cls.request_max_tokens(path, body_obj), count_words(body_obj) if scenario.count_input else 0
        )
        model = scenario.model or api_cls.request_model(path, body_obj) or api_cls.default_model
        problem = problem or api_cls.request_problem(path, query, body_obj)
        attempt = said or 0
        if said is None:  # a client that numbers no attempt (LiteLLM's retries, plain httpx, google-genai ...)
            attempt = self._seen_before((path, model, header or ""))
        family = (
            "anthropic"
            if issubclass(api_cls, AnthropicMessagesApi)
            else "gemini"
            if api_cls is GeminiGenerateApi
            else "openai"
        )
        ok = problem is None and attempt >= scenario.fail
        rl = self._ratelimits.take(
            family,
            scenario.input + scenario.cache_write if ok else 0,
            scenario.tokens + scenario.reasoning if ok else 0,
        )
        if scenario.ratelimit_remaining is not None:
            rl = replace(rl, requests_remaining=scenario.ratelimit_remaining)
        context = Context(
            path=path,
            body=body_obj,
            scenario=scenario,
            request_id=request_id,
            model=model,
            stream=stream,
            received_at=received_at,
            ratelimit=rl,
            query=query,
            user_agent=h.headers.get("user-agent", ""),
        )
        return context, problem, attempt

    @staticmethod
    def _unrouted(ex: Exchange, path: str, method: str, api_cls: type[Api] | None, request_id: str) -> RunResult:
        """Answer what no API serves: the health check, a path no API has (404), a method other than POST (405)."""
        if path == "/healthz" and method == "GET":
            ex.send_full(
                200,
                [("request-id", request_id), ("content-type", "application/json")],
                json_bytes({"status": "ok"}),
            )
            return RunResult("completed", "health check")
        status = 404 if api_cls is None else 405
        what = "Not found" if api_cls is None else "Method not allowed"
        body = anthropic_error_body(
            "not_found_error" if status == 404 else "invalid_request_error",
            f"{what}: {method} {path} (simulator serves POST "
            f"{', '.join([*ROUTES, *(shape for _, shape, _ in PATTERN_ROUTES)])})",
            request_id,
        )
        ex.send_full(
            status,
            [("request-id", request_id), ("content-type", "application/json")],
            json_bytes(body),
        )
        return RunResult("error_status", f"{status} {what}")

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        try:
            if h.headers.get("transfer-encoding", "").lower() == "chunked":
                parts: list[bytes] = []
                while True:
                    size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(h.rfile.read(size))
                    h.rfile.readline()
            length = int(h.headers.get("content-length", "0") or "0")
            if length > _MAX_BODY:
                raise ClientGone("request body too large")
            return h.rfile.read(length) if length > 0 else b""
        except OSError as exc:
            raise ClientGone(type(exc).__name__) from exc


def _shutdown_socket(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def served_line(count: int, served: Served) -> str:
    """``--verbose``'s line for one request: how many so far, what was asked, how it was answered and ended,
    the attempt number the ``fail`` knob compares with, and the scenario in the header's syntax."""
    scenario = served.scenario.to_header() or "default"
    return (
        f"llmtap simulate: #{count} {served.method} {served.path} -> {served.status} {served.outcome_sent} "
        f"after {served.deltas_sent} deltas (attempt {served.attempt}; scenario {scenario})"
    )


def serve_forever(host: str, port: int, default: Scenario | None = None, *, verbose: bool = False) -> None:
    """Run a simulator in the foreground until Ctrl-C (used by ``llmtap simulate``).

    Raises:
        OSError: ``host:port`` cannot be bound (taken, or no such address); nothing is printed then.
    """
    sim = Simulator(host, port, default, verbose=verbose).start()
    try:  # Ctrl-C right after the line is printed ends it cleanly too
        print(f"llmtap simulator listening on {sim.base_url} (Ctrl-C stops)", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
