"""Context windows (``_core/windows.py``) and the utilisation histogram they feed.

The lookup is checked against the table's own entries (the window of each entry the table finds for its own
id); overrides win; an unknown model is counted, never guessed; the table is read when the process has it (never
imported for windows alone). End to
end, through the real ``anthropic`` and ``openai`` SDKs against the simulator, each attempt's observation is its
input tokens (cache reads and writes included, as each provider reports them) over the window, on both metric
paths and on the span.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

import llmtap
from llmtap._core import modeltable
from llmtap._core.metrics import CONTEXT_WINDOW_BUCKETS
from llmtap._core.windows import ContextWindows
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

TABLE = modeltable.load()
TABLE_MODULE = sys.modules["genai_prices.data"]
SONNET_WINDOW: int = getattr(modeltable.find(TABLE, "anthropic", "claude-sonnet-4-5"), "context_window", 0)
"""The table's window of a model the APIs know (its own entry; checked non-zero where used)."""
BY_TABLE_PROVIDER = {table_id: name for name, table_id in modeltable.TABLE_PROVIDERS.items()}
"""genai-prices' provider id -> one llmtap provider name that maps to it."""


def _entries_found_by_their_id() -> list[tuple[str, Any]]:
    """(llmtap provider name, entry) of every entry with a context window, of the providers llmtap maps, that the
    table itself finds for the entry's own id (an id another entry's match claims first is left out)."""
    out = []
    for provider in TABLE.providers:
        name = BY_TABLE_PROVIDER.get(provider.id)
        if name is None:
            continue
        for entry in provider.models:
            if entry.context_window and modeltable.find(TABLE, name, entry.id) is entry:
                out.append((name, entry))
    return out


def test_the_lookup_returns_the_tables_own_window_for_its_entries() -> None:
    entries = _entries_found_by_their_id()
    per_provider = {name: sum(1 for n, _ in entries if n == name) for name in set(BY_TABLE_PROVIDER.values())}
    assert all(count >= 5 for count in per_provider.values()), per_provider  # several real entries of each
    windows = ContextWindows({}, TABLE)
    wrong = [(n, e.id, windows.window(n, e.id), e.context_window) for n, e in entries]
    assert [w for w in wrong if w[2] != w[3]] == []
    # and by the names the APIs answer with: a dated Anthropic id finds its entry's window
    assert SONNET_WINDOW > 0
    assert windows.window("anthropic", "claude-sonnet-4-5-20250929") == SONNET_WINDOW


def test_overrides_win_and_unknown_models_are_never_guessed(caplog: pytest.LogCaptureFixture) -> None:
    windows = ContextWindows({"my-llama": 8_192, "claude-sonnet-4-5": SONNET_WINDOW + 1}, TABLE)
    assert windows.window("vllm", "my-llama") == 8_192  # self-hosted: no table entry
    assert windows.window("anthropic", "claude-sonnet-4-5") == SONNET_WINDOW + 1  # over the table's
    assert ContextWindows({}, TABLE).window("anthropic", "claude-sonnet-4-5") == SONNET_WINDOW  # control
    with caplog.at_level("INFO", logger="llmtap"):
        assert windows.window("openai", "no-such-model-anywhere") is None
        assert windows.window("openai", None) is None
    assert "no-such-model-anywhere" in caplog.text


def test_without_the_table_only_the_overrides_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "genai_prices.data")  # the process has not imported the table
    windows = ContextWindows({"my-llama": 8_192})
    assert windows.window("vllm", "my-llama") == 8_192
    assert windows.window("anthropic", "claude-sonnet-4-5") is None  # in the table, which is not read
    assert windows.table is None and "genai_prices.data" not in sys.modules  # nor imported
    monkeypatch.setitem(sys.modules, "genai_prices.data", TABLE_MODULE)  # the application imports it: read now
    assert windows.window("anthropic", "claude-sonnet-4-5") == SONNET_WINDOW


_IMPORTS = """
import sys, llmtap
llmtap.instrument(llmtap.Settings(cost=sys.argv[1] == "cost", context_windows={"my-llama": 8192}, traces=False))
windows = llmtap._installation.active()._windows
known = windows.window("anthropic", "claude-sonnet-4-5")
print("genai_prices" in sys.modules, windows.window("vllm", "my-llama"), known)
"""


def test_windows_alone_import_no_table_and_cost_hands_its_table_over() -> None:
    """In a fresh process: without ``Settings.cost`` genai-prices is not imported (it costs ~0.15 s and ~5.8 MiB
    there) and only the overrides are known; with it, its table gives the windows too (control)."""
    window = SONNET_WINDOW
    for mode, expected in (("no-cost", "False 8192 None"), ("cost", f"True 8192 {window}")):
        out = subprocess.run([sys.executable, "-c", _IMPORTS, mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected, mode


# -- end to end ----------------------------------------------------------------------------------------------

WINDOW = 10_000
SCENARIO = Scenario(tokens=5, input=2_000, cache_read=1_000, cache_write=500)


@pytest.fixture
def windowed(sim: Simulator) -> Iterator[tuple[Capture, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    windows = {"claude-ctx": WINDOW, "gpt-ctx": WINDOW}
    settings = llmtap.Settings(base_urls=(sim.base_url,), context_windows=windows, span_detail=True)
    with capture(settings, meter_provider=provider) as cap:  # the table: imported by this module
        yield cap, reader
    provider.shutdown()


def _otel_points(reader: InMemoryMetricReader, name: str) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        str((point.attributes or {})["gen_ai.request.model"]): point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    }


def test_each_attempt_observes_its_input_over_the_window(
    sim: Simulator, windowed: tuple[Capture, InMemoryMetricReader]
) -> None:
    cap, reader = windowed
    messages: Any = [{"role": "user", "content": "hi"}]
    claude = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    for model in ("claude-ctx", "claude-sonnet-4-5", "claude-nowhere"):
        for _ in claude.messages.create(
            model=model, max_tokens=64, stream=True, messages=messages, extra_headers=SCENARIO.headers()
        ):
            pass
    claude.close()
    gpt = openai.OpenAI(base_url=f"{sim.base_url}/v1", api_key="k", max_retries=0)
    gpt.chat.completions.create(model="gpt-ctx", messages=messages, extra_headers=SCENARIO.headers())
    gpt.close()
    cap.wait(4)
    # Anthropic's input_tokens leaves the cache out: 2,000 + 1,000 read + 500 written; OpenAI's prompt_tokens
    # has the cached 1,000 in it already (the simulator sends no cache writes for OpenAI)
    table_window = SONNET_WINDOW
    expected = {"claude-ctx": 3_500 / WINDOW, "claude-sonnet-4-5": 3_500 / table_window, "gpt-ctx": 3_000 / WINDOW}
    name = "llmtap_context_window_utilization"
    for model, ratio in expected.items():
        assert cap.sample(f"{name}_count", gen_ai_request_model=model) == 1, model
        assert cap.sample(f"{name}_sum", gen_ai_request_model=model) == pytest.approx(ratio), model
        for bound in CONTEXT_WINDOW_BUCKETS:  # the one observation in the buckets from its ratio up
            le = str(bound)
            assert cap.sample(f"{name}_bucket", gen_ai_request_model=model, le=le) == (ratio <= bound), (model, le)
    # the unknown one: counted as such, not observed; the known ones are not unknown
    assert cap.sample(f"{name}_count", gen_ai_request_model="claude-nowhere") == 0
    assert cap.sample("llmtap_context_window_unknown_total", gen_ai_request_model="claude-nowhere") == 1
    assert cap.sample("llmtap_context_window_unknown_total") == 1
    # the OpenTelemetry path: the same observations
    points = _otel_points(reader, "llmtap.context_window.utilization")
    assert set(points) == set(expected)
    for model, ratio in expected.items():
        point: HistogramDataPoint = points[model]
        assert point.count == 1 and point.sum == pytest.approx(ratio), model
    unknown = _otel_points(reader, "llmtap.context_window.unknown")
    assert {m: p.value for m, p in unknown.items() if p.value} == {"claude-nowhere": 1}
    # and on each span (Settings.span_detail: it repeats the metric)
    spans = {str((s.attributes or {})["gen_ai.request.model"]): dict(s.attributes or {}) for s in cap.spans}
    for model, ratio in expected.items():
        assert spans[model]["llmtap.context_window.utilization"] == pytest.approx(ratio), model
    assert "llmtap.context_window.utilization" not in spans["claude-nowhere"]


def test_an_excluded_histogram_and_counter_look_nothing_up(sim: Simulator) -> None:
    excluded = ("llmtap.context_window.utilization", "llmtap.context_window.unknown")
    for exclude, looked_up in (((), True), (excluded, False)):  # control: on by default
        settings = llmtap.Settings(base_urls=(sim.base_url,), excluded_metrics=exclude, traces=False)
        with capture(settings) as cap:
            assert (cap.tap._windows is not None) is looked_up
