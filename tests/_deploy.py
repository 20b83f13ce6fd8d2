"""Helpers for the deploy tests: a 127.0.0.1 OTLP/HTTP receiver, /metrics scraping, waiting for servers."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_http(url: str, timeout: float = 20.0) -> None:
    def up() -> bool:
        try:
            httpx2.get(url, timeout=1.0)
        except httpx2.HTTPError:
            return False
        return True

    wait_until(up, timeout, url)


class Scrape:
    """One /metrics scrape, parsed with prometheus-client's own parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    @classmethod
    def get(cls, url: str) -> Scrape:
        response = httpx2.get(url, timeout=5.0)
        response.raise_for_status()
        return cls(response.text)

    def total(self, name: str, **labels: str) -> float:
        return sum(
            s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


class OtlpReceiver:
    """Accepts OTLP/HTTP protobuf POSTs on /v1/traces and /v1/metrics and keeps them decoded."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.posts: dict[str, int] = {"/v1/traces": 0, "/v1/metrics": 0}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._add(self.path, body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _add(self, path: str, body: bytes) -> None:
        with self._lock:
            self.posts[path] = self.posts.get(path, 0) + 1
            if path == "/v1/traces":
                self.traces.append(ExportTraceServiceRequest.FromString(body))
            elif path == "/v1/metrics":
                self.metrics.append(ExportMetricsServiceRequest.FromString(body))

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def spans(self, prefix: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(name, span attributes, resource attributes) of every span received whose name starts with prefix."""
        out = []
        with self._lock:
            for request in self.traces:
                for rs in request.resource_spans:
                    resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            if span.name.startswith(prefix):
                                out.append((span.name, {a.key: _value(a.value) for a in span.attributes}, resource))
        return out

    def histogram_count(self, name: str) -> int:
        """Data points recorded into histogram ``name``: the largest cumulative count seen per series, summed.

        A series is its attributes and its start time: forked workers share a resource, but each
        one's cumulative stream starts when it first records."""
        latest: dict[tuple[Any, ...], int] = {}
        with self._lock:
            for request in self.metrics:
                for rm in request.resource_metrics:
                    for sm in rm.scope_metrics:
                        for metric in sm.metrics:
                            if metric.name != name:
                                continue
                            for point in metric.histogram.data_points:
                                attributes = sorted((a.key, str(_value(a.value))) for a in point.attributes)
                                key = (point.start_time_unix_nano, *attributes)
                                latest[key] = max(latest.get(key, 0), int(point.count))
        return sum(latest.values())


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
