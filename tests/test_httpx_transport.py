"""``llmtap._hooks.httpx_transport``: how llmtap hooks into httpx and httpx2 (patching, explicit transports,
composition with the OTel httpx instrumentor, import hooks for the SDKs)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import httpx2
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.utils import suppress_instrumentation

import llmtap
from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

BODY = {"model": "claude-raw", "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "x"}]}


def post(client: Any, sim: Simulator, scenario: Scenario | None = None) -> str:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", **(scenario or Scenario(tokens=3)).headers()}
    with client.stream("POST", sim.base_url + "/v1/messages", json=BODY, headers=headers) as response:
        return "".join(response.iter_text())


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_raw_clients_are_observed(sim: Simulator, cap: Capture, module: Any) -> None:
    with module.Client() as client:
        text = post(client, sim)
    assert "message_stop" in text
    cap.wait(1, calls=1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED
    assert record.request_model == "claude-raw" and record.request_stream is True  # from the body
    assert record.call_id is None and cap.calls[0].attempts == 1  # raw httpx: one attempt per call


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_async_raw_clients_are_observed(sim: Simulator, cap: Capture, module: Any) -> None:
    async def go() -> None:
        async with module.AsyncClient() as client:
            headers = {"x-api-key": "k", **Scenario(tokens=3).headers()}
            async with client.stream("POST", sim.base_url + "/v1/messages", json=BODY, headers=headers) as r:
                async for _ in r.aiter_bytes():
                    pass

    asyncio.run(go())
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]


def test_explicit_transport_without_patching(sim: Simulator) -> None:
    settings = llmtap.Settings(base_urls=(sim.base_url,))
    with capture(settings, patch=False) as cap:
        with httpx2.Client() as plain:  # not patched: not observed
            post(plain, sim)
        with httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport())) as wrapped:
            post(wrapped, sim)
        cap.wait(1)
        assert len(cap.records) == 1


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_custom_and_mounted_transports_observed_once(sim: Simulator, cap: Capture, module: Any) -> None:
    wrapped = llmtap.wrap_transport(module.HTTPTransport())
    with module.Client(mounts={"http://": wrapped}) as client:
        post(client, sim)
    with module.Client(transport=wrapped) as client:
        post(client, sim)
    cap.wait(2)
    assert len(cap.records) == 2  # the patched client and the wrapped transport: still once each


def test_wrap_transport_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="not an httpx or httpx2 transport"):
        llmtap.wrap_transport(object())


def test_suppressed_instrumentation_is_respected(sim: Simulator, cap: Capture) -> None:
    with suppress_instrumentation(), httpx2.Client() as client:
        post(client, sim)
    assert cap.records == []
    with httpx2.Client() as client:  # positive control: the same request, not suppressed, is recorded
        post(client, sim)
    cap.wait(1)
    assert len(cap.records) == 1


def test_suppression_keys_are_the_instrumentation_packages() -> None:
    """llmtap reads the suppression keys without importing opentelemetry-instrumentation on the request path."""
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
    from opentelemetry.instrumentation import utils

    from llmtap._core import tap as _tap

    assert _tap._SUPPRESS_KEY == _SUPPRESS_INSTRUMENTATION_KEY == _tap._PRIVATE_SUPPRESS_KEY
    assert _tap._SUPPRESS_LEGACY_KEY == utils._SUPPRESS_INSTRUMENTATION_KEY_PLAIN
    # where the API has the key, the public check is not asked (tests/test_fences.py: where it has not)
    assert llmtap.Tap(llmtap.Settings())._instrumentation_enabled is None


@pytest.mark.parametrize("order", [("otel", "llmtap"), ("llmtap", "otel")], ids=["otel_first", "llmtap_first"])
@pytest.mark.parametrize("remove_first", ["otel", "llmtap"])
def test_composes_with_otel_httpx_instrumentation(sim: Simulator, order: tuple[str, str], remove_first: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = HTTPXClientInstrumentor()
    settings = llmtap.Settings(base_urls=(sim.base_url,))
    steps: dict[str, Callable[[], object]] = {
        "otel": lambda: otel.instrument(tracer_provider=provider),
        "llmtap": lambda: llmtap.instrument(settings, registry=CollectorRegistry(), tracer_provider=provider),
    }
    removers: dict[str, Callable[[], object]] = {"otel": otel.uninstrument, "llmtap": llmtap.uninstrument}
    originals = (httpx.Client.__dict__["_send_single_request"], httpx.HTTPTransport.__dict__["handle_request"])

    def by_scope() -> tuple[list[Any], list[Any]]:
        spans = exporter.get_finished_spans()
        ours = [s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == "llmtap"]
        return ours, [s for s in spans if s not in ours]

    for name in order:
        steps[name]()
    try:
        with httpx.Client() as client:
            post(client, sim)
        ours, http = by_scope()
        assert len(ours) == 1 and len(http) == 1
        # one consistent order: the GenAI attempt span is the parent of the HTTP span...
        assert http[0].parent is not None and http[0].parent.span_id == ours[0].context.span_id
        # ...and ends when the body ends, not at the headers
        assert (ours[0].end_time or 0) >= (http[0].end_time or 0)
        removers[remove_first]()
        exporter.clear()
        with httpx.Client() as client:
            post(client, sim)
        ours, http = by_scope()
        assert (len(ours), len(http)) == ((1, 0) if remove_first == "otel" else (0, 1))
    finally:
        otel.uninstrument()
        llmtap.uninstrument()
        provider.shutdown()
    assert (httpx.Client.__dict__["_send_single_request"], httpx.HTTPTransport.__dict__["handle_request"]) == originals


def test_otel_metrics_through_a_meter_provider(sim: Simulator) -> None:
    """Platform teams ship through an OpenTelemetry Collector: the semconv histograms are recorded."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from prometheus_client import CollectorRegistry

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    llmtap.instrument(
        llmtap.Settings(base_urls=(sim.base_url,), traces=False), registry=CollectorRegistry(), meter_provider=provider
    )
    try:
        with httpx2.Client() as client:
            post(client, sim, Scenario(tokens=4, input=30))
    finally:
        llmtap.uninstrument()
    data = reader.get_metrics_data()
    assert data is not None
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= set(metrics)
    assert "llmtap.time_to_first_token" in metrics and "gen_ai.client.operation.time_to_first_chunk" not in metrics
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    points = [p for p in metrics["gen_ai.client.token.usage"].data.data_points if isinstance(p, HistogramDataPoint)]
    tokens = {dict(p.attributes or {})["gen_ai.token.type"]: p.sum for p in points}
    assert tokens == {"input": 30, "output": 4}
    (point,) = metrics["gen_ai.client.operation.duration"].data.data_points
    attributes = dict(point.attributes or {})
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-raw"
    assert "error.type" not in attributes
    provider.shutdown()


@pytest.mark.slow
def test_sdks_are_patched_when_imported_not_imported_by_llmtap() -> None:
    """instrument() imports no SDK the app does not use; one imported later is patched on import,
    and one imported after uninstrument() is not."""
    code = (
        "import sys, llmtap\n"
        "llmtap.instrument(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))\n"
        "print('openai' in sys.modules, 'anthropic' in sys.modules)\n"
        "import anthropic\n"
        "print(hasattr(anthropic._base_client.SyncAPIClient.request, '__wrapped__'))\n"
        "import httpx2\n"
        "print(hasattr(httpx2.AsyncClient._send_single_request, '__wrapped__'))\n"
        "llmtap.uninstrument()\n"
        "import openai\n"
        "print(hasattr(openai._base_client.SyncAPIClient.request, '__wrapped__'),"
        " hasattr(httpx2.AsyncClient._send_single_request, '__wrapped__'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:4] == ["False False", "True", "True", "False False"]


def test_instrument_loads_no_opentelemetry_instrumentation_machinery() -> None:
    """instrument() needs neither BaseInstrumentor nor prometheus_client when the configuration does not;
    asking for llmtap.LlmtapInstrumentor (opentelemetry-instrument does) loads it (positive control)."""
    code = (
        "import sys, llmtap\n"
        "llmtap.instrument(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))\n"
        "print('opentelemetry.instrumentation.instrumentor' in sys.modules, 'prometheus_client' in sys.modules)\n"
        "llmtap.LlmtapInstrumentor\n"
        "print('opentelemetry.instrumentation.instrumentor' in sys.modules)\n"
        "llmtap.uninstrument()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:2] == ["False False", "True"]


def test_instrument_cycles_register_one_import_hook_per_module() -> None:
    """Instrument/uninstrument cycles leave one pending import hook per SDK module, not one per cycle; an SDK
    imported after the last instrument() is patched (positive control)."""
    code = (
        "import sys, llmtap._hooks._patching as p, llmtap\n"
        "settings = llmtap.Settings(prometheus=False, traces=False, otel_metrics=False)\n"
        "for _ in range(5):\n"
        "    llmtap.instrument(settings); llmtap.uninstrument()\n"
        "print(sys.meta_path.count(p._FINDER), p._pending['openai._base_client'].__name__)\n"
        "llmtap.instrument(settings)\n"
        "import openai\n"
        "print(hasattr(openai._base_client.SyncAPIClient.request, '__wrapped__'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:2] == ["1 _imported", "True"]
