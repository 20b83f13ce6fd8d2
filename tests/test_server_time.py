"""Provider time against path time: every server-reported latency read through the real SDKs (openai, anthropic,
the anthropic SDK's Bedrock client, boto3's Converse and InvokeModel, ollama) with a network path of known latency
between them and the simulator (``tests/support/delayproxy.py``: every byte held ``DELAY`` seconds each way).

The simulator measures the server times it reports as the real services do, from receiving the request, so the
delay lies outside them: the client's time over the same interval minus the server's (the path) recovers it.
Bounds: the path is at least ``2 * DELAY`` (the request and the answer each crossed the proxy: physics, not timing,
with 2 ms for the servers' whole-millisecond rounding), and at most ``2 * DELAY + BAND``. ``BAND`` is what the rest
of the path may add on a loaded machine (loopback, the proxy's and the SDK's scheduling: a few ms idle); it is
generous (0.75 s) and still below the ~0.95 s the scenario puts between the headers and the end of a stream, so
a server time paired with the wrong client interval (the end for a header's number, the headers for the last
event's) falls outside the band on one side or the other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import llmtap
from llmtap import _drive
from llmtap._core.metrics import by_key
from llmtap._drive import Action, fresh_model
from llmtap._providers._base import SERVER_TIMES, Until
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture
from tests.support.delayproxy import DelayProxy
from tests.support.paths import ROOT

DELAY = 0.15
"""Seconds the proxy holds each byte, each way."""
BAND = 0.75
SCENARIO = Scenario(headers_delay=0.1, ttft=0.6, gap=0.05, tokens=8)
"""~0.95 s from the headers to the end of a stream: wider than :data:`BAND`."""

CASES: list[tuple[str, Action, set[str]]] = [
    ("openai-chat", "stream", {"openai-processing-ms"}),
    ("openai-chat", "create", {"openai-processing-ms"}),
    ("anthropic", "stream", {"x-envoy-upstream-service-time"}),
    ("bedrock", "stream", {"invocationLatency", "firstByteLatency"}),  # the anthropic SDK's AnthropicBedrock
    ("boto3", "stream", {"latencyMs"}),
    ("boto3", "create", {"latencyMs"}),
    ("boto3-invoke", "stream", {"invocationLatency", "firstByteLatency"}),
    ("boto3-invoke", "create", {"x-amzn-bedrock-invocation-latency"}),
    ("ollama", "stream", {"total_duration"}),
    ("ollama", "create", {"total_duration"}),
]


@pytest.fixture(scope="module")
def proxy(sim: Simulator) -> Iterator[DelayProxy]:
    with DelayProxy(sim.base_url, DELAY) as made:
        yield made


@pytest.fixture
def proxied(sim: Simulator, proxy: DelayProxy) -> Iterator[Capture]:
    sim.clear()
    with capture(llmtap.Settings(base_urls=(proxy.url,))) as captured:
        yield captured


@pytest.mark.parametrize(("sdk", "action", "sources"), CASES, ids=[f"{s}-{a}" for s, a, _ in CASES])
def test_the_path_recovers_the_delay(
    proxy: DelayProxy, proxied: Capture, sdk: str, action: Action, sources: set[str]
) -> None:
    model = fresh_model("anthropic.claude-path" if sdk in ("bedrock", "boto3-invoke") else "path")  # invoke: Claude
    result = _drive.drive(sdk, proxy.url, action, model=model, headers=SCENARIO.headers(), timeout=30, max_retries=0)
    assert result.error is None
    proxied.wait(1)
    (record,) = proxied.records
    assert {source for source, _, _ in record.server_times} == sources
    for source, server, client in record.server_times:
        path = client - server
        assert 2 * DELAY - 0.002 <= path <= 2 * DELAY + BAND, (source, server, client)
        # the interval the source pairs with, from the record's own timing
        until = SERVER_TIMES[source].until
        end = {Until.HEADERS: record.headers_at, Until.FIRST_CHUNK: record.first_chunk_at}.get(until, record.ended_at)
        assert end is not None and client == end - record.started_at
        # one observation each in the two histograms, under the source's name
        for key, value in (("server_reported", server), ("client_observed", client)):
            family = by_key()[key].prometheus()
            assert proxied.sample(f"{family}_count", source=source) == 1
            assert proxied.sample(f"{family}_sum", source=source) == pytest.approx(value)


def test_straight_to_the_simulator_the_path_is_the_loopback(sim: Simulator, cap: Capture) -> None:
    """The control: the same call without the proxy. Only the lower bound is physics, so nothing here says the path
    is below ``2 * DELAY`` (a loaded machine may stretch a loopback path that far); it says the pair is made and
    ordered the same way, and stays within the band a proxied path is checked against."""
    result = _drive.drive("openai-chat", sim.base_url, "stream", model=fresh_model("path"), headers=SCENARIO.headers())
    assert result.error is None
    cap.wait(1)
    (record,) = cap.records
    ((source, server, client),) = record.server_times
    assert source == "openai-processing-ms" and -0.002 <= client - server < BAND
    assert server >= SCENARIO.headers_delay - 0.001  # the simulator's own wait is the server's time


def test_the_guide_lists_every_source() -> None:
    guide = (ROOT / "docs" / "guides" / "provider-time.md").read_text()
    rows = {line.split("`")[1] for line in guide.splitlines() if line.startswith("| `")}
    assert set(SERVER_TIMES) <= rows
