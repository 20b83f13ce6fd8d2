"""Attribution (issue 17 item 4): ``llmtap.attributes(...)`` and OpenTelemetry baggage label the
attempts begun inside them: span attributes always, metric labels for ``Settings.attribute_labels``
only, bounded, on both metric paths."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anthropic
import pytest
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import llmtap
from llmtap._log import label_overflows
from llmtap.simulator import Simulator
from llmtap.testing import Capture, capture

PARAMS = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def labelled(sim: Simulator) -> Iterator[tuple[Capture, InMemoryMetricReader]]:
    sim.clear()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = llmtap.Settings(
        base_urls=(sim.base_url,),
        attribute_labels=("feature",),
        max_attribute_values=2,
        baggage_attributes=("feature", "tenant"),
    )
    with capture(settings, meter_provider=provider) as cap:
        yield cap, reader
    provider.shutdown()


def _call(sim: Simulator) -> None:
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    client.messages.create(**PARAMS)  # type: ignore[call-overload]
    client.close()


def test_labels_and_span_attributes(sim: Simulator, labelled: tuple[Capture, InMemoryMetricReader]) -> None:
    cap, reader = labelled
    with llmtap.attributes(feature="search", tenant="acme"):
        _call(sim)
        with llmtap.attributes(feature="summarise"):  # nested: the inner value wins
            _call(sim)
    _call(sim)  # outside: no label value
    assert cap.sample("llmtap_attempts_total", feature="search") == 1
    assert cap.sample("llmtap_attempts_total", feature="summarise") == 1
    assert cap.sample("llmtap_attempts_total", feature="") == 1
    # tenant is not a label: never on a series; it is on the spans
    names = {label for m in cap.registry.collect() for s in m.samples for label in s.labels}
    assert "feature" in names and "tenant" not in names
    spans = [dict(s.attributes or {}) for s in cap.spans]
    assert [(a.get("feature"), a.get("tenant")) for a in spans] == [
        ("search", "acme"),
        ("summarise", "acme"),
        (None, None),
    ]
    data = reader.get_metrics_data()
    assert data is not None
    otel = {
        dict(point.attributes or {}).get("feature")
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "llmtap.attempts"
        for point in metric.data.data_points
        if point.value  # type: ignore[union-attr]
    }
    assert otel == {"search", "summarise", None}
    assert cap.calls[0].attribute_labels == ("search",)


def test_async_and_tasks(sim: Simulator, labelled: tuple[Capture, InMemoryMetricReader]) -> None:
    cap, _ = labelled

    async def main() -> None:
        client = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="k", max_retries=0)

        async def one(feature: str) -> None:
            async with llmtap.attributes(feature=feature):
                await client.messages.create(**PARAMS)  # type: ignore[call-overload]

        await asyncio.gather(one("a"), one("b"), one("a"))  # concurrent tasks never see each other's
        await client.close()

    asyncio.run(main())
    assert cap.sample("llmtap_attempts_total", feature="a") == 2
    assert cap.sample("llmtap_attempts_total", feature="b") == 1


def test_values_are_bounded(sim: Simulator, labelled: tuple[Capture, InMemoryMetricReader]) -> None:
    cap, _ = labelled
    before = label_overflows().get("attribute", 0)
    for feature in ("f1", "f2", "f3", "f4"):
        with llmtap.attributes(feature=feature):
            _call(sim)
    values = {s.labels["feature"] for m in cap.registry.collect() for s in m.samples if "feature" in s.labels}
    assert values == {"f1", "f2", "_other"}  # max_attribute_values=2
    assert label_overflows().get("attribute", 0) - before == 2


def test_baggage_for_zero_code_apps(sim: Simulator, labelled: tuple[Capture, InMemoryMetricReader]) -> None:
    cap, _ = labelled
    token = otel_context.attach(baggage.set_baggage("feature", "from-baggage"))
    try:
        _call(sim)
        with llmtap.attributes(feature="explicit"):  # the app's own value wins over baggage
            _call(sim)
    finally:
        otel_context.detach(token)
    assert cap.sample("llmtap_attempts_total", feature="from-baggage") == 1
    assert cap.sample("llmtap_attempts_total", feature="explicit") == 1


def test_bad_keys_fail_loudly() -> None:
    with pytest.raises(ValueError, match="must match"):
        llmtap.attributes(**{"Feature-X": "y"})
    with pytest.raises(ValueError, match="already a label"):
        llmtap.Settings(attribute_labels=("outcome",))
    assert llmtap.Settings(attribute_labels=("route",)).attribute_labels == ("route",)  # control
