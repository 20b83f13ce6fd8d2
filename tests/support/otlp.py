"""An OTLP/HTTP receiver on 127.0.0.1 that keeps what it gets, decoded with ``opentelemetry-proto``."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_RESPONSES = {
    "/v1/metrics": ExportMetricsServiceResponse().SerializeToString(),
    "/v1/traces": ExportTraceServiceResponse().SerializeToString(),
}


class Receiver(ThreadingHTTPServer):
    """``POST /v1/metrics`` and ``/v1/traces`` (protobuf, optionally gzip), answered like a Collector."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, str, bytes]] = []  # (path, content type, decompressed body)
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """The base URL (append ``/v1/metrics`` or ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def _bodies(self, path: str) -> list[bytes]:
        with self.lock:
            for got_path, content_type, _ in self.received:
                assert content_type == "application/x-protobuf", (got_path, content_type)
            return [body for p, _, body in self.received if p == path]

    def metrics(self) -> list[ExportMetricsServiceRequest]:
        out = []
        for body in self._bodies("/v1/metrics"):
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            out.append(request)
        return out

    def traces(self) -> list[ExportTraceServiceRequest]:
        out = []
        for body in self._bodies("/v1/traces"):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            out.append(request)
        return out


def posted_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The body of the request ``handler`` serves, as an OTLP exporter sent it before its gzip (if any).

    Raises:
        OSError, EOFError: a body that says gzip and is not.
    """
    body = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
    return gzip.decompress(body) if handler.headers.get("Content-Encoding") == "gzip" else body


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = posted_body(self)
        with self.server.lock:
            self.server.received.append((self.path, self.headers.get("Content-Type", ""), body))
        out = _RESPONSES.get(self.path)
        if out is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        pass


_Server = TypeVar("_Server", bound=ThreadingHTTPServer)


@contextmanager
def serving(server: _Server) -> Iterator[_Server]:
    """``server`` serving on a thread for the duration of the block, then shut down and closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A :class:`Receiver` serving on a thread for the duration of the block."""
    with serving(Receiver()) as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as server:
        yield server


def value_of(v: AnyValue) -> str | int | float | bool:
    """A scalar OTLP attribute value."""
    kind = v.WhichOneof("value")
    assert kind in ("string_value", "int_value", "double_value", "bool_value"), kind
    out: str | int | float | bool = getattr(v, kind)
    return out
