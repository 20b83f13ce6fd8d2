"""Observe the async anthropic SDK: concurrent streams, one record each (simulator, no API key needed).

python examples/anthropic_async.py
"""

from __future__ import annotations

import asyncio

import anthropic
from prometheus_client import generate_latest

import llmtap
from llmtap.simulator import Scenario, Simulator

# a few of the series llmtap exports (all of them: `curl localhost:9464/metrics` with LLMTAP_METRICS_PORT)
SHOWN = ("llmtap_attempts_total", "llmtap_streams_total", "llmtap_tokens_total", "llmtap_retries_total")


async def ask(client: anthropic.AsyncAnthropic, question: str) -> str:
    async with client.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": question}],
        extra_headers=Scenario(ttft=0.2, gap=0.01, tokens=8).headers(),  # the simulator's pacing
    ) as stream:
        return await stream.get_final_text()


async def main() -> None:
    with Simulator() as sim:
        llmtap.instrument()  # the SDK's requests are observed on any host: nothing to configure
        client = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="not-needed")
        answers = await asyncio.gather(*(ask(client, f"Question {i}") for i in range(3)))
        print("\n".join(answers))
        await client.close()
        lines = generate_latest().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(SHOWN) and not line.endswith(" 0.0")))
        llmtap.uninstrument()


if __name__ == "__main__":
    asyncio.run(main())
