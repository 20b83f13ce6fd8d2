"""Observe the anthropic SDK with one call, against the built-in simulator (no API key needed).

    python examples/anthropic_quickstart.py

Point ``base_url`` at the real API (and drop the simulator) to observe real traffic: what the SDK sends
is observed without configuration, whatever the host.
"""

from __future__ import annotations

import anthropic
from prometheus_client import generate_latest

import llmtap
from llmtap.simulator import Scenario, Simulator

# a few of the series llmtap exports (all of them: `curl localhost:9464/metrics` with LLMTAP_METRICS_PORT)
SHOWN = ("llmtap_attempts_total", "llmtap_streams_total", "llmtap_tokens_total", "llmtap_retries_total")


def main() -> None:
    with Simulator() as sim:
        llmtap.instrument()  # the SDK's requests are observed on any host: nothing to configure
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="not-needed")
        # the simulator fails the first attempt with 529: the SDK retries, llmtap counts both attempts
        with client.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "Hello"}],
            extra_headers=Scenario(fail=1, retry_after=0.1, ttft=0.3, tokens=10).headers(),
        ) as stream:
            print(stream.get_final_text())
        client.close()
        lines = generate_latest().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(SHOWN) and not line.endswith(" 0.0")))
        llmtap.uninstrument()


if __name__ == "__main__":
    main()
