"""Every attempt is observed exactly once, whichever transport carries it: the SDKs' aiohttp
transports (``DefaultAioHttpClient``), and a user's plain ``httpx`` client handed to ``openai``."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import openai
import pytest

from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture

pytest.importorskip("aiohttp", reason="the SDKs' aiohttp transport needs the aiohttp extra")


async def _anthropic_calls(sim: Simulator, scenario: Scenario, early_close: bool) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=sim.base_url, api_key="k", max_retries=2, http_client=anthropic.DefaultAioHttpClient()
    )
    params: Any = {"model": "claude-aio", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}
    async with client, client.messages.stream(extra_headers=scenario.headers(), **params) as stream:
        async for _ in stream.text_stream:
            if early_close:
                break


async def _openai_calls(sim: Simulator, scenario: Scenario, early_close: bool) -> None:
    client = openai.AsyncOpenAI(
        base_url=sim.base_url + "/v1", api_key="k", max_retries=2, http_client=openai.DefaultAioHttpClient()
    )
    async with client:
        stream = await client.chat.completions.create(
            model="gpt-aio",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=scenario.headers(),
        )
        async for _ in stream:
            if early_close:
                break
        await stream.close()


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
@pytest.mark.parametrize(
    ("scenario", "early_close", "expected"),
    [
        (Scenario(tokens=5, gzip=True), False, [Outcome.COMPLETED]),
        (Scenario(tokens=40, gap=0.005), True, [Outcome.CLIENT_CLOSED]),
        (Scenario(tokens=3, fail=1, retry_after=0.01), False, [Outcome.REJECTED, Outcome.COMPLETED]),
    ],
    ids=["completed_gzip", "client_closed", "retried"],
)
def test_aiohttp_transport(
    sim: Simulator, cap: Capture, sdk: str, scenario: Scenario, early_close: bool, expected: list[Outcome]
) -> None:
    run = _anthropic_calls if sdk == "anthropic" else _openai_calls
    asyncio.run(run(sim, scenario, early_close))
    cap.wait(len(expected), calls=1)
    assert [r.outcome for r in cap.records] == expected
    assert [r.resend_count for r in cap.records] == list(range(len(expected)))
    if not early_close:
        assert cap.records[-1].usage.output_tokens is not None  # compressed bytes decoded by llmtap


def test_openai_with_a_plain_httpx_client(sim: Simulator, cap: Capture) -> None:
    """``openai`` given an ``httpx.Client`` (the older transport) is observed the same way."""
    try:
        client = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="k", http_client=httpx.Client())  # type: ignore[arg-type]
    except TypeError as exc:  # this openai release accepts only httpx2 clients
        pytest.skip(f"openai {openai.__version__} rejects httpx clients: {exc}")
    for _ in client.chat.completions.create(
        model="gpt-httpx", messages=[{"role": "user", "content": "hi"}], stream=True, extra_headers=Scenario().headers()
    ):
        pass
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]
