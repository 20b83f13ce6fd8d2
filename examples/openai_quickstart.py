"""Observe the openai SDK with one call, against the built-in simulator (no API key needed).

    python examples/openai_quickstart.py

What the SDK sends is observed whatever the host (api.openai.com, an OpenAI-compatible server such as
vLLM, Ollama or a gateway, this simulator); name a server with ``Settings.base_urls`` and
``provider_names`` if ``openai`` is not the name you want.
"""

from __future__ import annotations

import openai
from prometheus_client import generate_latest

import llmtap
from llmtap.simulator import Scenario, Simulator

# a few of the series llmtap exports (all of them: `curl localhost:9464/metrics` with LLMTAP_METRICS_PORT)
SHOWN = ("llmtap_attempts_total", "llmtap_streams_total", "llmtap_tokens_total", "llmtap_retries_total")


def main() -> None:
    with Simulator() as sim:
        llmtap.instrument()  # the SDK's requests are observed on any host: nothing to configure
        client = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="not-needed")
        stream = client.chat.completions.create(
            model="gpt-5-mini",
            messages=[{"role": "user", "content": "Hello"}],
            stream=True,
            stream_options={"include_usage": True},  # without it OpenAI reports no token usage
            extra_headers=Scenario(ttft=0.2, tokens=10).headers(),
        )
        print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
        reply = client.responses.create(model="gpt-5-mini", input="Hello again")  # the Responses API too
        print(reply.output_text)
        client.close()
        lines = generate_latest().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(SHOWN) and not line.endswith(" 0.0")))
        llmtap.uninstrument()


if __name__ == "__main__":
    main()
