"""The Prometheus exporter (``llmtap._exporters.prometheus``) against what the docs promise: the metric
tables (names, types and OpenTelemetry instruments are a contract the dashboards and alerts query) and the
series budget, how many series one (provider, operation, model) costs per process.

The "Series budget" table (docs/reference/series-budget.md) is the pin of the second: the test drives a
known baseline (one model, one completed stream and one non-streaming call through the real ``anthropic``
SDK) through the native exporter, counts the series of every family and requires exactly the table's
numbers. A change that adds series fails here until the table (and so the documented budget) is updated on
purpose.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from prometheus_client import CollectorRegistry

import llmtap
from llmtap._core.metrics import INSTRUMENTS
from llmtap._exporters._health import HEALTH_METRIC_NAMES
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

DOCS = Path(__file__).resolve().parent.parent / "docs"
METRICS_PAGE = DOCS / "reference" / "metrics.md"  # generated from INSTRUMENTS by docs/gen_reference.py
BUDGET_PAGE = DOCS / "reference" / "series-budget.md"
MODEL = "claude-budget"


def budget_table() -> dict[str, int]:
    """Family -> baseline series per model, from the "Series budget" table (docs/reference/series-budget.md)."""
    text = BUDGET_PAGE.read_text()
    section = text[text.index("# Series budget") :]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    rows: dict[str, int] = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|.*\|\s*\**(\d+)\**\s*\|\s*$", line)
        if m:
            rows[m.group(1)] = int(m.group(2))
        total = re.match(r"\|\s*\*\*total\*\*\s*\|.*\|\s*\**(\d+)\**\s*\|\s*$", line)
        if total:
            rows["total"] = int(total.group(1))
    return rows


_METRIC_ROW = re.compile(r"^\| `((?:llmtap|gen_ai)_[a-z_]+)` \| `([a-z_.]+)`[^|]*\|([^|]*)\|", re.M)


def documented_metrics() -> dict[str, tuple[str, str]]:
    """Prometheus family -> (OpenTelemetry instrument, first word of the type column, "" in the cost table
    which has none), from the metric table of docs/reference/metrics.md."""
    text = METRICS_PAGE.read_text()
    section = text[text.index("| Prometheus metric |") :]
    rows: dict[str, tuple[str, str]] = {}
    for name, instrument, third in _METRIC_ROW.findall(section):
        kind = third.split()[0] if third.split() and third.split()[0] in ("counter", "gauge", "histogram") else ""
        assert name not in rows, f"the metrics page lists {name} twice"
        rows[name] = (instrument, kind)
    return rows


def test_the_documented_metric_table_is_what_the_exporter_registers() -> None:
    """Every family the exporter can register (cost and both semconv generations on), with its type and
    OpenTelemetry instrument, is in the metrics page's table, and nothing else is: a new, renamed or retyped
    metric fails here until the documentation says so."""
    documented = documented_metrics()
    settings = llmtap.Settings(cost=True, genai_semconv="both", traces=False)
    with capture(settings) as cap:
        kinds = {m.name + ("_total" if m.type == "counter" else ""): m.type for m in cap.registry.collect()}
    assert set(documented) == set(kinds), "the metrics page vs the exporter's families"
    instruments = {i.prometheus(): i.name for i in INSTRUMENTS}
    for name, (instrument, kind) in documented.items():
        assert kind in ("", kinds[name]), f"{name}: the docs say {kind}, the exporter registers a {kinds[name]}"
        if name not in HEALTH_METRIC_NAMES:
            assert instrument == instruments[name], name
    assert documented["llmtap_streams_in_flight"][1] == "gauge"  # positive control: the type column was read


def drive_baseline(sim: Simulator) -> None:
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    try:
        for _ in client.messages.create(stream=True, extra_headers=Scenario(tokens=4).headers(), **params):
            pass
        client.messages.create(extra_headers=Scenario(tokens=4).headers(), **params)
    finally:
        client.close()


def series_per_family(registry: CollectorRegistry) -> Counter[str]:
    """Series (samples) per family for MODEL; ``*_created`` series are counted under their family."""
    families = {i.prometheus().removesuffix("_total"): i.prometheus() for i in INSTRUMENTS}
    out: Counter[str] = Counter()
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.labels.get("gen_ai_request_model") == MODEL:
                out[families[metric.name]] += 1
    return out


@pytest.fixture
def baseline(sim: Simulator) -> Iterator[Capture]:
    sim.clear()
    with capture(llmtap.Settings(base_urls=(sim.base_url,), traces=False)) as cap:
        drive_baseline(sim)
        cap.wait(2, calls=2)
        yield cap


def test_baseline_matches_the_documented_budget(baseline: Capture) -> None:
    measured = series_per_family(baseline.registry)
    table = budget_table()
    total = table.pop("total")
    assert set(table) == {i.prometheus() for i in INSTRUMENTS}, "the series budget table must list every family"
    assert dict(measured) == {k: v for k, v in table.items() if v}, "update docs/reference/series-budget.md on purpose"
    assert sum(measured.values()) == total


def test_no_created_series_by_default(baseline: Capture, sim: Simulator) -> None:
    names = {s.name for m in baseline.registry.collect() for s in m.samples}
    assert not {n for n in names if n.endswith("_created")}
    assert "llmtap_attempts_total" in names  # positive control: the families are there


def test_created_series_on_request(sim: Simulator) -> None:
    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), traces=False, prometheus_created_series=True)
    with capture(settings) as cap:
        drive_baseline(sim)
        cap.wait(2, calls=2)
        created = {s.name for m in cap.registry.collect() for s in m.samples if s.name.endswith("_created")}
    assert {"llmtap_attempts_created", "llmtap_call_duration_seconds_created"} <= created


def test_exclude_metrics_drops_families_in_both_exporters(sim: Simulator) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    excluded = ("llmtap_retry_after_seconds", "gen_ai.client.token.usage", "llmtap_tokens_total")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    registry = CollectorRegistry()
    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), traces=False, excluded_metrics=excluded)
    llmtap.instrument(settings, registry=registry, meter_provider=provider)
    try:
        drive_baseline(sim)
        sim.wait_served(2)
        native = set(series_per_family(registry))
        data = reader.get_metrics_data()
    finally:
        llmtap.uninstrument()
        provider.shutdown()
    assert data is not None
    otel = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert not {"llmtap_retry_after_seconds", "gen_ai_client_token_usage", "llmtap_tokens_total"} & native
    assert not {"llmtap.retry_after", "gen_ai.client.token.usage", "llmtap.tokens"} & otel
    # positive control: the rest is recorded by both
    assert {"llmtap_attempts_total", "llmtap_streams_total", "gen_ai_client_operation_duration_seconds"} <= native
    assert {"llmtap.attempts", "llmtap.streams", "gen_ai.client.operation.duration"} <= otel


def test_exclude_metrics_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        llmtap.Settings(excluded_metrics=("llmtap_typo_total",))
    settings = llmtap.Settings.from_env({"LLMTAP_EXCLUDED_METRICS": "llmtap.retry_after, llmtap_tokens"})
    assert settings.excluded_metrics == ("llmtap.retry_after", "llmtap_tokens")


def lean_recipe() -> tuple[str, ...]:
    """The ``LLMTAP_EXCLUDED_METRICS=...`` recipe the series budget page recommends."""
    m = re.search(r"^LLMTAP_EXCLUDED_METRICS=(\S+)$", BUDGET_PAGE.read_text(), re.M)
    assert m, "docs/reference/series-budget.md: the lean recipe is missing"
    return tuple(m.group(1).split(","))


def test_lean_recipe_keeps_every_alert_and_halves_the_baseline(sim: Simulator) -> None:
    from llmtap._core.metrics import resolve_names
    from tests.support.prom import rules

    recipe = lean_recipe()
    keys = resolve_names(recipe)
    dropped = {i.prometheus() for i in INSTRUMENTS if i.key in keys}
    for rule in rules():
        for name in dropped:
            assert not re.search(rf"\b{name}(_bucket|_sum|_count)?\b", rule["expr"]), (rule, name)
    sim.clear()
    settings = llmtap.Settings.from_env({"LLMTAP_EXCLUDED_METRICS": ",".join(recipe)}, base_urls=(sim.base_url,))
    with capture(settings) as cap:
        drive_baseline(sim)
        cap.wait(2, calls=2)
        measured = series_per_family(cap.registry)
    assert not set(measured) & dropped
    stated = re.search(r"recipe cuts the baseline to (\d+)", BUDGET_PAGE.read_text())
    assert stated and sum(measured.values()) == int(stated.group(1))
