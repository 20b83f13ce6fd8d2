"""The tap as a unit: ``Tap(settings, sinks, spans=)`` fed real requests to the simulator through an explicit
transport (no patching, no installation): what reaches the sinks and the span, what is left alone
(not an LLM API, excluded URLs, suppressed instrumentation), and a failing sink isolated from the rest."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry import context as otel_context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

import llmtap
from llmtap import Outcome
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._exporters import build
from llmtap._exporters.tracing import TracingExporter
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import RecordingSink

BODY = {"model": "claude-unit", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
DETAIL = {
    "http.request.method",
    "url.path",
    "http.response.status_code",
    "llmtap.time_to_headers",
    "llmtap.stream.chunks",
    "llmtap.stream.max_gap",
}


class FailingSink(RecordingSink):
    """Raises in one of its methods, records otherwise."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.name = f"failing-{where}"
        self.where = where

    def start(self, attempt: AttemptStart) -> object:
        if self.where == "start":
            raise RuntimeError("start")
        return super().start(attempt)

    def end(self, record: AttemptRecord, state: object) -> None:
        if self.where == "end":
            raise RuntimeError("end")
        super().end(record, state)

    def call_end(self, record: CallRecord) -> None:
        if self.where == "call_end":
            raise RuntimeError("call_end")
        super().call_end(record)

    def close(self) -> None:
        if self.where == "close":
            raise RuntimeError("close")


@pytest.fixture
def spans() -> Iterator[tuple[TracingExporter, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield TracingExporter(provider), memory
    provider.shutdown()


def send(tap: llmtap.Tap, url: str, *, stream: bool = False) -> str:
    with httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport(), tap)) as client:
        body = {**BODY, "stream": stream} if stream else BODY
        response = client.post(url, json=body, headers={"x-api-key": "k", **Scenario(tokens=3).headers()})
        assert response.status_code == 200
        return response.text


def settings(sim: Simulator, **kw: Any) -> llmtap.Settings:
    return llmtap.Settings(base_urls=(sim.base_url,), **kw)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_one_record_to_every_sink_and_one_span(sim: Simulator, spans: Any, stream: bool) -> None:
    exporter, memory = spans
    first, second = RecordingSink(), RecordingSink()
    tap = llmtap.Tap(settings(sim), [first, second], spans=exporter)
    send(tap, sim.base_url + "/v1/messages", stream=stream)
    for sink in (first, second):
        sink.wait(1, calls=1)
        (record,) = sink.records
        assert record.outcome is Outcome.COMPLETED and record.request_model == "claude-unit"
        assert record.usage.output_tokens == 3
        assert sink.calls[0].attempts == 1
    assert first.records == second.records  # the one record, bounded once, for every sink
    (span,) = memory.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.request.model"] == "claude-unit"
    assert attributes["gen_ai.usage.output_tokens"] == 3 and attributes["llmtap.outcome"] == "completed"
    assert not DETAIL & set(attributes)  # the HTTP detail and what repeats a metric are opt-in
    tap.close()


def test_span_detail_adds_what_repeats_a_metric(sim: Simulator) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    chosen = settings(sim, span_detail=True, prometheus=False, otel_metrics=False)
    exporters = build(chosen, tracer_provider=provider)
    assert exporters.sinks == () and exporters.spans is not None
    tap = llmtap.Tap(chosen, exporters.sinks, spans=exporters.spans)
    send(tap, sim.base_url + "/v1/messages", stream=True)
    (span,) = memory.get_finished_spans()
    assert set(span.attributes or {}) >= DETAIL
    tap.close()
    provider.shutdown()


def test_the_span_is_current_while_sending_and_parents_nothing_after(sim: Simulator, spans: Any) -> None:
    exporter, memory = spans
    seen: list[Any] = []

    class Recording(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            from opentelemetry import trace

            seen.append(trace.get_current_span().get_span_context())
            return super().handle_request(request)

    tap = llmtap.Tap(settings(sim), spans=exporter)
    with httpx2.Client(transport=llmtap.wrap_transport(Recording(), tap)) as client:
        client.post(sim.base_url + "/v1/messages", json=BODY, headers={"x-api-key": "k"})
        client.get(sim.base_url + "/health")  # not an LLM API: no span made current
    (span,) = memory.get_finished_spans()
    assert seen[0] == span.get_span_context()
    assert not seen[1].is_valid


def test_not_an_llm_api_passes_through(sim: Simulator) -> None:
    sink = RecordingSink()
    tap = llmtap.Tap(settings(sim), [sink])
    with httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport(), tap)) as client:
        client.get(sim.base_url + "/health")
    assert sink.records == []
    send(tap, sim.base_url + "/v1/messages")  # positive control
    sink.wait(1)


@pytest.mark.parametrize(
    ("patterns", "observed"),
    [((r"127\.0\.0\.1:\d+/v1/messages",), False), ((r"/v1/other",), True), ((), True)],
    ids=["matching", "other", "none"],
)
def test_excluded_urls(sim: Simulator, patterns: tuple[str, ...], observed: bool) -> None:
    sink = RecordingSink()
    tap = llmtap.Tap(settings(sim, excluded_urls=patterns), [sink])
    send(tap, sim.base_url + "/v1/messages")
    send(tap, sim.base_url + "/v1/messages")
    if observed:
        sink.wait(2)
    assert len(sink.records) == (2 if observed else 0)


def test_excluded_urls_come_from_the_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_PYTHON_HTTPX_EXCLUDED_URLS", raising=False)
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "health, ready")
    assert llmtap.Settings().excluded_urls == ("health", "ready")
    monkeypatch.setenv("OTEL_PYTHON_HTTPX_EXCLUDED_URLS", "only-httpx")  # the httpx one wins, as for OTel
    assert llmtap.Settings().excluded_urls == ("only-httpx",)
    environ = {"OTEL_PYTHON_EXCLUDED_URLS": "from-environ"}  # from_env reads its environment only
    assert llmtap.Settings.from_env(environ).excluded_urls == ("from-environ",)
    assert llmtap.Settings.from_env({**environ, "LLMTAP_EXCLUDED_URLS": "a,b"}).excluded_urls == ("a", "b")
    assert llmtap.Settings.from_env({}).excluded_urls == ()
    with pytest.raises(ValidationError, match=r"(?s)LLMTAP_EXCLUDED_URLS.*not a regular expression: 'a\[b'"):
        llmtap.Settings.from_env({"LLMTAP_EXCLUDED_URLS": "a[b"})
    with pytest.raises(ValidationError, match=r"(?s)OTEL_PYTHON_EXCLUDED_URLS.*not a regular expression"):
        llmtap.Settings.from_env({"OTEL_PYTHON_EXCLUDED_URLS": "a[b"})  # refused at start-up, named


@pytest.mark.parametrize("key", ["api", "plain"])
def test_suppressed_instrumentation_is_not_observed(sim: Simulator, key: str) -> None:
    sink = RecordingSink()
    tap = llmtap.Tap(settings(sim), [sink])
    if key == "api":
        with suppress_instrumentation():
            send(tap, sim.base_url + "/v1/messages")
    else:  # the legacy plain key some instrumentations still set
        token = otel_context.attach(otel_context.set_value("suppress_instrumentation", True))
        try:
            send(tap, sim.base_url + "/v1/messages")
        finally:
            otel_context.detach(token)
    assert sink.records == []
    send(tap, sim.base_url + "/v1/messages")  # positive control: outside the block
    sink.wait(1)


@pytest.mark.parametrize("where", ["start", "end", "call_end"])
def test_a_failing_sink_is_isolated(sim: Simulator, spans: Any, where: str) -> None:
    exporter, memory = spans
    before, after = RecordingSink(), RecordingSink()
    failing = FailingSink(where)
    tap = llmtap.Tap(settings(sim), [before, failing, after], spans=exporter)
    assert "tok2" in send(tap, sim.base_url + "/v1/messages", stream=True)  # the request is untouched
    for sink in (before, after):
        sink.wait(1, calls=1)
    assert len(memory.get_finished_spans()) == 1
    assert len(failing.records) == (0 if where in ("start", "end") else 1)
    assert len(failing.calls) == (0 if where == "call_end" else 1)


def test_a_failing_span_exporter_is_isolated(sim: Simulator, monkeypatch: pytest.MonkeyPatch, spans: Any) -> None:
    exporter, memory = spans
    sink = RecordingSink()

    def broken(attempt: AttemptStart) -> object:
        raise RuntimeError("no span")

    monkeypatch.setattr(exporter, "start", broken)
    tap = llmtap.Tap(settings(sim), [sink], spans=exporter)
    send(tap, sim.base_url + "/v1/messages")
    sink.wait(1, calls=1)
    assert memory.get_finished_spans() == ()
    monkeypatch.undo()  # positive control: the same tap with a working exporter
    send(tap, sim.base_url + "/v1/messages")
    sink.wait(2)
    assert len(memory.get_finished_spans()) == 1


def test_close_closes_every_sink_even_if_one_fails(spans: Any) -> None:
    exporter, _ = spans
    closed: list[str] = []

    class Closing(RecordingSink):
        def close(self) -> None:
            closed.append("sink")

    exporter.close = lambda: closed.append("spans")
    tap = llmtap.Tap(llmtap.Settings(), [FailingSink("close"), Closing()], spans=exporter)
    tap.close()
    assert closed == ["spans", "sink"]


def test_the_metric_exporters_call_the_drain_they_are_given_before_each_read() -> None:
    """What a scrape or a collection must end first (the hand-off) is handed to the exporters, not looked
    up: each Prometheus scrape and each OpenTelemetry collection calls it; built without one, none does."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    chosen = llmtap.Settings(traces=False, otel_metrics=True)
    for drain_given in (True, False):  # the exporters built without a drain: the control
        calls: list[str] = []
        registry, reader = CollectorRegistry(), InMemoryMetricReader()
        exporters = build(
            chosen,
            registry=registry,
            meter_provider=MeterProvider(metric_readers=[reader]),
            drain=functools.partial(calls.append, "drain") if drain_given else None,
        )
        list(registry.collect())
        reader.get_metrics_data()
        assert calls == (["drain", "drain"] if drain_given else [])
        exporters.close()


def test_build_is_all_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exporter that cannot be built leaves none of the others registered."""
    from llmtap._exporters import otel_metrics

    registry = CollectorRegistry()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no meter")

    monkeypatch.setattr(otel_metrics, "OtelMetricsExporter", refuse)
    settings = llmtap.Settings(otel_metrics=True)  # on even without a meter provider (the API's stand-in)
    with pytest.raises(RuntimeError, match="no meter"):
        build(settings, registry=registry)
    assert list(registry.collect()) == []
    monkeypatch.undo()  # positive control: the same registry takes them all
    exporters = build(settings, registry=registry)
    assert exporters.prometheus is not None and exporters.spans is not None and len(exporters.sinks) == 2
    assert list(registry.collect())
    exporters.close()
    assert list(registry.collect()) == []
