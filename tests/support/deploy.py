"""Helpers for the deploy tests: /metrics scraping, waiting for servers, reading what the OTLP receiver got."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from llmtap.testing import sample
from tests.support.otlp import Receiver


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
        self.families = list(text_string_to_metric_families(text))
        self.samples = [s for family in self.families for s in family.samples]

    @classmethod
    def get(cls, url: str) -> Scrape:
        response = httpx2.get(url, timeout=5.0)
        response.raise_for_status()
        return cls(response.text)

    def total(self, name: str, **labels: str) -> float:
        """:func:`llmtap.testing.sample` of this scrape."""
        return sample(self.families, name, **labels)


def posts(receiver: Receiver, path: str) -> int:
    """How many requests were POSTed to ``path`` (``/v1/traces``, ``/v1/metrics``)."""
    with receiver.lock:
        return sum(1 for got, _, _ in receiver.received if got == path)


def spans(receiver: Receiver, prefix: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, span attributes, resource attributes) of every span received whose name starts with prefix."""
    out = []
    for request in receiver.traces():
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    if span.name.startswith(prefix):
                        out.append((span.name, {a.key: _value(a.value) for a in span.attributes}, resource))
    return out


def histogram_count(receiver: Receiver, name: str) -> int:
    """Data points recorded into histogram ``name``: the largest cumulative count seen per series, summed.

    A series is its resource (each forked worker has its own ``service.instance.id``: the OTel SDK
    draws it again after a fork) and its attributes."""
    latest: dict[tuple[Any, ...], int] = {}
    for request in receiver.metrics():
        for rm in request.resource_metrics:
            resource = tuple(sorted((a.key, str(_value(a.value))) for a in rm.resource.attributes))
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.histogram.data_points:
                        attributes = sorted((a.key, str(_value(a.value))) for a in point.attributes)
                        key = (resource, *attributes)
                        latest[key] = max(latest.get(key, 0), int(point.count))
    return sum(latest.values())


def instances(receiver: Receiver) -> set[str]:
    """The ``service.instance.id`` of every resource that sent metrics."""
    return {
        str(_value(a.value))
        for request in receiver.metrics()
        for rm in request.resource_metrics
        for a in rm.resource.attributes
        if a.key == "service.instance.id"
    }


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
