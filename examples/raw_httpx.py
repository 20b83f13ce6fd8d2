"""No SDK: plain ``httpx`` streaming the Messages API is observed the same way (simulator, no key).

Needs ``httpx`` itself (the SDKs bring ``httpx2``, not ``httpx``): ``pip install 'llmtap[httpx]'``.

python examples/raw_httpx.py
"""

from __future__ import annotations

try:
    import httpx
except ImportError:  # said in one line rather than a traceback
    raise SystemExit("examples/raw_httpx.py needs httpx (the SDKs bring httpx2): pip install 'llmtap[httpx]'") from None
from prometheus_client import generate_latest

import llmtap
from llmtap.simulator import Simulator

# a few of the series llmtap exports (all of them: `curl localhost:9464/metrics` with LLMTAP_METRICS_PORT)
SHOWN = ("llmtap_attempts_total", "llmtap_streams_total", "llmtap_tokens_total", "llmtap_retries_total")


def main() -> None:
    with Simulator() as sim:
        llmtap.instrument(llmtap.Settings(base_urls=(sim.base_url,)))
        with (
            httpx.Client(base_url=sim.base_url, headers={"x-api-key": "not-needed"}) as client,
            client.stream(
                "POST",
                "/v1/messages",
                json={
                    "model": "claude-haiku-4-5",
                    "max_tokens": 50,
                    "stream": True,
                    "messages": [{"role": "user", "content": "Hi"}],
                },
            ) as response,
        ):
            events = sum(1 for line in response.iter_lines() if line.startswith("event:"))
        print(f"{events} SSE events")
        lines = generate_latest().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(SHOWN) and not line.endswith(" 0.0")))
        llmtap.uninstrument()


if __name__ == "__main__":
    main()
