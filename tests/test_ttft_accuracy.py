"""Time to first token as llmtap records it vs the moment the server wrote that token.

The simulator timestamps each write just before it (``time.perf_counter()``, the same clock the
client reads), so ``lag = client first-token time - server write time`` is what the client side adds:
loopback delivery, the SDK's and llmtap's work, and thread scheduling. ``make test`` checks what holds
on any machine, however loaded: every lag is causal (>= 0), and the shortest lag is below one
inter-token gap, so a systematic error (timing at a later token, or at the end: every lag past the
next write) fails while a busy machine, which delays some streams by several milliseconds (measured:
half of them by 9-13 ms beside two CPU-bound processes on 2 cores), does not. The target itself, a
median of 1 ms and no outlier beyond 25 ms, is a fixed budget: a ``budget`` test, run by
``make bench`` on a quiet machine.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
from typing import Any

import anthropic
import openai
import pytest

from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture

RUNS = 11
SCENARIO = Scenario(tokens=4, ttft=0.03, gap=0.005)


def _stream_once(sim: Simulator, sdk: str, mode: str) -> None:
    headers = SCENARIO.headers()
    if sdk == "anthropic":
        params: Any = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
        if mode == "sync":
            with anthropic.Anthropic(base_url=sim.base_url, api_key="k") as client:
                for _ in client.messages.create(stream=True, extra_headers=headers, **params):
                    pass
        else:

            async def go() -> None:
                async with anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="k") as client:
                    async for _ in await client.messages.create(stream=True, extra_headers=headers, **params):
                        pass

            asyncio.run(go())
    else:
        messages: Any = [{"role": "user", "content": "hi"}]
        if mode == "sync":
            with openai.OpenAI(base_url=sim.base_url + "/v1", api_key="k") as oai:
                for _ in oai.chat.completions.create(model="m", messages=messages, stream=True, extra_headers=headers):
                    pass
        else:

            async def go() -> None:
                async with openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="k") as aoai:
                    stream = await aoai.chat.completions.create(
                        model="m", messages=messages, stream=True, extra_headers=headers
                    )
                    async for _ in stream:
                        pass

            asyncio.run(go())


def _lags(sim: Simulator, cap: Capture, sdk: str, mode: str) -> list[float]:
    gc.collect()
    gc.disable()  # a collection pause inside one stream is not what this measures
    try:
        for _ in range(RUNS):
            _stream_once(sim, sdk, mode)
    finally:
        gc.enable()
    cap.wait(RUNS)
    served = {s.request_id: s for s in sim.wait_served(RUNS)}
    lags = []
    for record in cap.records:
        sent = served[record.request_id or ""].first_token_sent_at
        assert sent is not None and record.first_token_at is not None
        lags.append(record.first_token_at - sent)
    return lags


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_first_token_timed_at_the_first_token(sim: Simulator, cap: Capture, sdk: str, mode: str) -> None:
    lags = _lags(sim, cap, sdk, mode)
    shown = [f"{lag * 1000:.3f} ms" for lag in lags]
    assert min(lags) >= 0, shown
    assert min(lags) < SCENARIO.gap, shown


@pytest.mark.budget
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_first_token_within_1ms_of_the_server_write(sim: Simulator, cap: Capture, sdk: str, mode: str) -> None:
    lags = _lags(sim, cap, sdk, mode)
    assert min(lags) >= 0, lags
    assert statistics.median(lags) < 0.001, [f"{lag * 1000:.3f} ms" for lag in lags]
    assert max(lags) < 0.025, [f"{lag * 1000:.3f} ms" for lag in lags]


@pytest.mark.parametrize("sdk", ["anthropic", "openai-chat", "openai-responses", "gemini", "ollama"])
def test_a_default_span_carries_the_time_to_the_first_output(sim: Simulator, cap: Capture, sdk: str) -> None:
    """With default settings, a streamed attempt's span says when the first generated output came
    (``gen_ai.response.time_to_first_chunk``), the same value as the record's time to first token, and not
    when the first body bytes came (Anthropic's ``message_start`` and OpenAI's ``response.created`` are
    written with the headers; the first text ``ttft`` later): it is at least the server's own time to its
    first output write (causal), and the body's first bytes, the control, came before that write."""
    from llmtap._drive import SDKS, drive

    scenario = Scenario(tokens=3, ttft=0.15, gap=0.005)
    result = drive(sdk, sim.base_url, "stream", model=SDKS[sdk].model, headers=scenario.headers(), max_retries=0)
    assert result.error is None
    cap.wait(1)
    (record,) = cap.records
    (span,) = cap.spans
    (served,) = sim.wait_served(1)
    assert served.first_token_sent_at is not None and record.time_to_first_token is not None
    value = dict(span.attributes or {})["gen_ai.response.time_to_first_chunk"]
    assert value == record.time_to_first_token
    assert value >= served.first_token_sent_at - served.received_at  # the client cannot see it sooner
    if sdk in ("anthropic", "openai-responses"):  # they send a notification with the headers
        assert record.time_to_first_chunk is not None and record.time_to_first_chunk < value
