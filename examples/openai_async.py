"""Observe the async openai SDK, concurrent streams (simulator, no API key needed).

python examples/openai_async.py
"""

from __future__ import annotations

import asyncio

import openai
from prometheus_client import generate_latest

import llmtap
from llmtap.simulator import Scenario, Simulator

# a few of the series llmtap exports (all of them: `curl localhost:9464/metrics` with LLMTAP_METRICS_PORT)
SHOWN = ("llmtap_attempts_total", "llmtap_streams_total", "llmtap_tokens_total", "llmtap_retries_total")


async def ask(client: openai.AsyncOpenAI, question: str) -> str:
    stream = await client.chat.completions.create(
        model="gpt-5-mini",
        messages=[{"role": "user", "content": question}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=Scenario(ttft=0.2, gap=0.01, tokens=8).headers(),
    )
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


async def main() -> None:
    with Simulator() as sim:
        llmtap.instrument()  # the SDK's requests are observed on any host: nothing to configure
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="not-needed")
        print("\n".join(await asyncio.gather(*(ask(client, f"Question {i}") for i in range(3)))))
        await client.close()
        lines = generate_latest().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(SHOWN) and not line.endswith(" 0.0")))
        llmtap.uninstrument()


if __name__ == "__main__":
    asyncio.run(main())
