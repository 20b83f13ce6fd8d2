"""Fault injection into llmtap itself: each sink, the parser, the clock, the finaliser and the label
bounds raising, and a sink that blocks. The app's bytes and SDK events must be exactly what they are
without llmtap, each failure is counted in ``llmtap_internal_errors_total{where}``, one log line
(rate-limited) says what failed, and every attempt is still counted once.

"Hanging", for a synchronous sink, can only mean *slow*: sinks run on the thread that ends the
attempt (the app's, when it reads the end of the body), and llmtap does not run them on a thread of
its own (that would cost every request a hand-off). A blocking sink therefore delays the app by
exactly its own time and changes nothing else; the built-in sinks never block (see SECURITY.md).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import llmtap
from llmtap._core import stream as _stream
from llmtap._core.bounds import RecordBounds
from llmtap._core.observer import AttemptObserver
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._core.windows import ContextWindows
from llmtap._exporters.otel_metrics import OtelMetricsExporter
from llmtap._exporters.prometheus import PrometheusExporter
from llmtap._exporters.tracing import TracingExporter
from llmtap._instrumentor import LlmtapInstrumentor
from llmtap._log import internal_errors
from llmtap._log import reset as reset_log
from llmtap._providers.anthropic import AnthropicMessages
from llmtap.testing import RecordingSink
from tests.support.fixtures import FIXTURES, require_fixtures
from tests.support.rawserver import RawServer, Reply, fixture_reply, http_response

ROUNDS = 3


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    require_fixtures()
    _, status, headers, body = fixture_reply(FIXTURES / "anthropic-messages-stream-text.json")
    with RawServer(Reply([http_response(status, headers, body)])) as raw:
        yield raw


REQUEST = {"model": "claude-x", "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "x"}]}


def app_round(base_url: str, client: anthropic.Anthropic) -> tuple[str, str]:
    """One SDK stream and one raw httpx2 stream: what the app sees, as digests."""
    with client.messages.create(**REQUEST) as stream:  # type: ignore[call-overload]
        events = hashlib.sha256(repr([repr(e) for e in stream]).encode()).hexdigest()
    with httpx2.Client() as raw, raw.stream("POST", base_url + "/v1/messages", json=REQUEST) as response:
        data = hashlib.sha256(response.read()).hexdigest()
    return events, data


class Tapped:
    def __init__(self, base_url: str, extra: list[Any]) -> None:
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        spans = TracerProvider()
        spans.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        self.recording = RecordingSink()
        self.instrumentor = LlmtapInstrumentor()
        self.instrumentor.instrument(
            settings=llmtap.Settings(base_urls=(base_url,)),
            registry=self.registry,
            tracer_provider=spans,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            extra_sinks=[*extra, self.recording],
        )


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected fault")


class SlowSink:
    """A sink that blocks for a while in every method (what 'hanging' means for a synchronous sink)."""

    name = "slow"
    delay = 0.2

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _block(self, method: str) -> None:
        self.calls.append(method)
        time.sleep(self.delay)

    def start(self, attempt: AttemptStart) -> object:
        self._block("start")
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        self._block("end")

    def call_end(self, record: CallRecord) -> None:
        self._block("call_end")


# fault name -> (object, attribute to replace, where it is counted)
FAULTS: dict[str, tuple[Any, str, str]] = {
    "prometheus.start": (PrometheusExporter, "start", "sink"),
    "prometheus.end": (PrometheusExporter, "end", "sink"),
    "prometheus.call_end": (PrometheusExporter, "call_end", "sink"),
    "tracing.start": (TracingExporter, "start", "sink"),
    "tracing.end": (TracingExporter, "end", "sink"),
    "otel_metrics.end": (OtelMetricsExporter, "end", "sink"),
    "parser.on_event": (AnthropicMessages, "on_event", "parser"),
    "clock": (_stream, "perf_clock", "stream"),
    "bounds": (RecordBounds, "apply", "other"),
    "context_windows": (ContextWindows, "window", "other"),
}


@pytest.fixture
def client(server: RawServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="sk-test", base_url=server.base_url, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def baseline(server: RawServer, client: anthropic.Anthropic) -> tuple[str, str]:
    return app_round(server.base_url, client)  # without llmtap


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failing_part_changes_nothing_for_the_app(
    fault: str,
    server: RawServer,
    client: anthropic.Anthropic,
    baseline: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner, attribute, where = FAULTS[fault]
    reset_log()
    before = internal_errors()
    tapped = Tapped(server.base_url, [])
    try:
        monkeypatch.setattr(owner, attribute, _boom)
        with caplog.at_level(logging.WARNING, "llmtap"):
            for _ in range(ROUNDS):
                assert app_round(server.base_url, client) == baseline
        monkeypatch.undo()
        tapped.recording.wait(2 * ROUNDS, calls=2 * ROUNDS)
        assert len(tapped.recording.records) == 2 * ROUNDS  # every attempt still counted, once
        exported = tapped.registry.get_sample_value("llmtap_internal_errors_total", {"where": where})
    finally:
        tapped.instrumentor.uninstrument()
    counted = internal_errors()[where] - before[where]
    assert counted >= 2 * ROUNDS, counted  # every failure counted (parser/clock: several per attempt)
    assert exported == internal_errors()[where]  # and exported as it is
    lines = [r for r in caplog.records if r.name == "llmtap" and "injected fault" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # one line for them all, saying what failed


def test_no_fault_no_count(server: RawServer, client: anthropic.Anthropic, baseline: tuple[str, str]) -> None:
    """Positive control for the counting above: without a fault nothing is counted or logged."""
    before = internal_errors()
    tapped = Tapped(server.base_url, [])
    try:
        for _ in range(ROUNDS):
            assert app_round(server.base_url, client) == baseline
        tapped.recording.wait(2 * ROUNDS, calls=2 * ROUNDS)
        exported = tapped.registry.get_sample_value("llmtap_internal_errors_total", {"where": "sink"})
    finally:
        tapped.instrumentor.uninstrument()
    assert internal_errors() == before
    assert exported == before["sink"]


def test_a_failing_extra_sink_in_every_method(
    server: RawServer, client: anthropic.Anthropic, baseline: tuple[str, str]
) -> None:
    class Broken:
        name = "broken"
        start = end = call_end = staticmethod(_boom)

    before = internal_errors()["sink"]
    tapped = Tapped(server.base_url, [Broken()])
    try:
        assert app_round(server.base_url, client) == baseline
        tapped.recording.wait(2, calls=2)
    finally:
        tapped.instrumentor.uninstrument()
    # start fails (so end is skipped for that sink), call_end fails: two attempts, two calls
    assert internal_errors()["sink"] - before == 4


def test_a_failing_finaliser_is_counted_not_printed(
    server: RawServer, client: anthropic.Anthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream the app drops unread is ended by the garbage collector; if that ending raises, it must
    not surface as an 'Exception ignored' (pytest turns those into errors here) but be counted."""
    before = internal_errors()["stream"]
    tapped = Tapped(server.base_url, [])
    try:
        monkeypatch.setattr(AttemptObserver, "end", _boom)  # the ending the finaliser runs
        with httpx2.Client() as raw:
            response = raw.send(raw.build_request("POST", server.base_url + "/v1/messages", json=REQUEST), stream=True)
            del response
            gc.collect()
    finally:
        tapped.instrumentor.uninstrument()
    assert internal_errors()["stream"] - before == 1


def test_a_blocking_sink_only_delays(server: RawServer, client: anthropic.Anthropic, baseline: tuple[str, str]) -> None:
    slow = SlowSink()
    tapped = Tapped(server.base_url, [slow])
    try:
        started = time.perf_counter()
        assert app_round(server.base_url, client) == baseline
        elapsed = time.perf_counter() - started
        tapped.recording.wait(2, calls=2)
    finally:
        tapped.instrumentor.uninstrument()
    # start + end + call_end per attempt, two attempts: the delay is the sink's own, nothing more (counted,
    # not timed: a loaded machine stretches any time bound); the app waited for each of them
    assert sorted(slow.calls) == sorted(["start", "end", "call_end"] * 2)
    assert elapsed >= 6 * SlowSink.delay
    assert [r.outcome for r in tapped.recording.records] == [llmtap.Outcome.COMPLETED] * 2
