"""No patching: wrap an httpx2 transport explicitly and hand it to the SDK.

python examples/raw_httpx_transport.py
"""

from __future__ import annotations

import anthropic
import httpx2

import llmtap
from llmtap.simulator import Simulator
from llmtap.testing import capture


def main() -> None:
    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,)), patch=False) as cap:
        http_client = httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport()))
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="not-needed", http_client=http_client)
        message = client.messages.create(
            model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
        )
        print(message.content[0])
        client.close()
        for record in cap.records:
            print(record.outcome, record.status_code, record.usage, f"{record.duration * 1000:.1f} ms")


if __name__ == "__main__":
    main()
