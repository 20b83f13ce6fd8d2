"""Cost in USD (``Settings.cost``): priced as the price table prices, exported on both metric paths.

The per-type decomposition is checked against ``genai-prices``' own total for every model of the table
that has token prices; the exporters are checked end to end with the real ``anthropic`` SDK against the
simulator; unknown models are counted as unpriced, never guessed; overrides win over the table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import anthropic
import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price, data_snapshot
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import llmtap
from llmtap._core.cost import Pricer
from llmtap._core.record import Usage
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

USAGES = [
    Usage(1_000, 200, 0, 0, None),
    Usage(12_000, 800, 10_000, 0, None),
    Usage(5_000, 100, 1_000, 3_000, None),
    Usage(300_000, 4_000, 50_000, 10_000, None),  # above the long-context tiers
]


def _priced_models() -> list[tuple[Any, Any]]:
    """(provider, model) of every model in the table with an input and an output token price."""
    now = datetime.now(tz=UTC)
    out = []
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            try:
                prices = model.get_prices(now)
            except Exception:
                continue
            tokens_priced = prices.input_mtok is not None and prices.output_mtok is not None
            if tokens_priced and prices.requests_kcount is None:  # per-request fees are not token costs
                out.append((provider, model))
    return out


def test_the_types_add_up_to_the_tables_total_for_every_model() -> None:
    pricer = Pricer({})
    checked = 0
    for provider, model in _priced_models():
        prices = pricer._lookup_model(model)
        for usage in USAGES:
            cost = pricer._cost(prices, usage)
            table = model.calc_price(
                TableUsage(
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_write_tokens=usage.cache_write_tokens,
                ),
                provider,
            )
            assert cost.total == pytest.approx(float(table.total_price), rel=1e-9, abs=1e-12), (provider.id, model.id)
            checked += 1
    assert checked > 500  # positive control: the table was walked


def test_known_examples() -> None:
    """A few models by hand (USD per million tokens from the providers' price pages, as the table has them)."""
    pricer = Pricer({})
    cost = pricer.price("openai", "gpt-4o", Usage(1_000_000, 1_000_000, 0, 0, None))
    assert cost is not None and cost.input == pytest.approx(2.5) and cost.output == pytest.approx(10.0)
    cost = pricer.price("anthropic", "claude-sonnet-4-6", Usage(100_000, 10_000, 50_000, 20_000, None))
    assert cost is not None  # $3 input, $15 output, $0.30 cache read, $3.75 cache write (5-minute)
    assert cost[:4] == pytest.approx((30_000 * 3 / 1e6, 10_000 * 15 / 1e6, 50_000 * 0.3 / 1e6, 20_000 * 3.75 / 1e6))
    assert cost.cache_savings == pytest.approx(50_000 * (3 - 0.3) / 1e6)  # the same tokens as plain input


def test_unknown_models_are_never_guessed() -> None:
    pricer = Pricer({})
    assert pricer.price("anthropic", "my-own-finetune-xyz", Usage(100, 100, 0, 0, None)) is None
    assert pricer.price("anthropic", "", Usage(100, 100, 0, 0, None)) is None
    assert pricer.price("anthropic", "claude-sonnet-4-6", Usage(100, 100, 0, 0, None)) is not None  # control


def test_overrides_win_over_the_table() -> None:
    pricer = Pricer({"gpt-4o": llmtap.ModelPrice(input=1.0, output=2.0, cache_read=0.5)})
    cost = pricer.price("openai", "gpt-4o", Usage(2_000_000, 1_000_000, 1_000_000, 0, None))
    assert cost == (1.0, 2.0, 0.5, 0.0, 0.5)


def test_cost_without_a_price_table_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    with pytest.raises(ImportError, match=r"llmtap\[cost\]"):
        Pricer({})
    assert Pricer({"m": llmtap.ModelPrice(input=1, output=1)}).price("x", "m", Usage(1, 1, 0, 0, None)) is not None


def test_prices_from_the_environment() -> None:
    settings = llmtap.Settings.from_env(
        {"LLMTAP_COST": "true", "LLMTAP_PRICES": '{"local-llama": {"input": 0.2, "output": 0.4}}'}
    )
    assert settings.prices["local-llama"].output == 0.4
    with pytest.raises(ValueError, match="LLMTAP_PRICES"):
        llmtap.Settings.from_env({"LLMTAP_PRICES": '{"m": {"input": -1, "output": 1}}'})


# -- end to end, both metric paths -------------------------------------------------------------


@pytest.fixture
def priced(sim: Simulator) -> Iterator[tuple[Capture, InMemoryMetricReader]]:
    sim.clear()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = llmtap.Settings(
        base_urls=(sim.base_url,), cost=True, prices={"local-llama": llmtap.ModelPrice(input=0.2, output=0.4)}
    )
    with capture(settings, meter_provider=provider) as cap:
        yield cap, reader
    provider.shutdown()


def _otel_sums(reader: InMemoryMetricReader, name: str) -> dict[tuple[str, str], float]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[tuple[str, str], float] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        attrs = dict(point.attributes or {})
                        key = (str(attrs["gen_ai.request.model"]), str(attrs.get("gen_ai.token.type", "")))
                        out[key] = out.get(key, 0.0) + float(point.value)  # type: ignore[union-attr]
    return out


def test_costs_are_exported_on_both_paths(sim: Simulator, priced: tuple[Capture, InMemoryMetricReader]) -> None:
    cap, reader = priced
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    scenario = Scenario(tokens=50, input=2_000, cache_read=1_000, cache_write=500)
    for model in ("claude-sonnet-4-6", "local-llama", "my-unknown-model"):
        for _ in client.messages.create(
            model=model, max_tokens=64, stream=True, messages=[{"role": "user", "content": "hi"}],
            extra_headers=scenario.headers(),
        ):  # fmt: skip
            pass
    client.close()
    table = calc_price(
        TableUsage(input_tokens=3_500, output_tokens=50, cache_read_tokens=1_000, cache_write_tokens=500),
        "claude-sonnet-4-6",
        provider_id="anthropic",
    )
    prom = cap.sample("llmtap_cost_usd_total", gen_ai_request_model="claude-sonnet-4-6")
    assert prom == pytest.approx(float(table.total_price))
    assert cap.sample("llmtap_cost_usd_total", gen_ai_request_model="local-llama") == pytest.approx(
        (3_500 * 0.2 + 50 * 0.4) / 1e6
    )
    assert cap.sample("llmtap_cost_usd_total", gen_ai_request_model="my-unknown-model") == 0
    assert cap.sample("llmtap_cost_unpriced_total", gen_ai_request_model="my-unknown-model") == 1
    assert cap.sample("llmtap_cost_unpriced_total") == 1  # the priced ones are not unpriced
    assert cap.sample("llmtap_cost_cache_savings_usd_total", gen_ai_request_model="claude-sonnet-4-6") > 0
    otel = _otel_sums(reader, "llmtap.cost.usd")
    assert sum(v for (m, _), v in otel.items() if m == "claude-sonnet-4-6") == pytest.approx(prom)
    assert set(t for m, t in otel if m == "claude-sonnet-4-6") == {"input", "output", "cache_read", "cache_write"}
    unpriced = _otel_sums(reader, "llmtap.cost.unpriced")  # every model's series starts at 0
    assert {k: v for k, v in unpriced.items() if v} == {("my-unknown-model", ""): 1.0}
    assert ("claude-sonnet-4-6", "") in unpriced
    # on each span too, in the GenAI conventions' names (source "local": llmtap's own price); none unpriced
    spans = {str((span.attributes or {})["gen_ai.request.model"]): dict(span.attributes or {}) for span in cap.spans}
    sonnet = spans["claude-sonnet-4-6"]
    assert sonnet["gen_ai.usage.cost.amount"] == pytest.approx(prom)
    assert (sonnet["gen_ai.usage.cost.currency"], sonnet["gen_ai.usage.cost.source"]) == ("USD", "local")
    assert spans["local-llama"]["gen_ai.usage.cost.amount"] == pytest.approx((3_500 * 0.2 + 50 * 0.4) / 1e6)
    assert "gen_ai.usage.cost.amount" not in spans["my-unknown-model"]


def test_cost_is_off_by_default(sim: Simulator, cap: Capture) -> None:
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    client.close()
    assert cap.sample("llmtap_attempts_total") == 1  # control: the attempt was counted
    names = {metric.name for metric in cap.registry.collect()}
    assert not any(name.startswith("llmtap_cost") for name in names)
    assert cap.records[0].cost is None
    assert not [k for k in cap.spans[0].attributes or {} if k.startswith("gen_ai.usage.cost")]
