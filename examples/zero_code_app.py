"""An app with no llmtap code at all: ``llmtap run`` instruments it from outside.

    pip install 'llmtap[run]' anthropic          # from a checkout: pip install -e '.[run]' anthropic

Against the simulator (no account needed; any key is accepted, and what the official SDKs send is
observed whatever the host, so llmtap needs no setting for it)::

    llmtap simulate --port 8787 &
    export ANTHROPIC_BASE_URL=http://127.0.0.1:8787 ANTHROPIC_API_KEY=not-needed

Against the real API, only ``export ANTHROPIC_API_KEY=...``. Then either::

    llmtap run --metrics-port 9464 -- python examples/zero_code_app.py --wait 30   # curl 127.0.0.1:9464/metrics
    OTEL_SERVICE_NAME=chat OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        llmtap run -- python examples/zero_code_app.py                             # OTLP to a collector

``--wait SECONDS`` keeps the process, and so llmtap's ``/metrics``, up after the answer: a one-shot
script would exit before anything scrapes it. (OTLP needs no wait: the SDK flushes at exit.)
The SDK is imported after llmtap is active (opentelemetry-instrument's sitecustomize runs first).
"""

from __future__ import annotations

import argparse
import time

import anthropic


def main() -> None:
    parser = argparse.ArgumentParser(description="Stream one answer from Claude.")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="stay up afterwards (for a scrape)")
    args = parser.parse_args()
    client = anthropic.Anthropic()  # ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL from the environment
    with client.messages.stream(
        model="claude-haiku-4-5", max_tokens=100, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        print(stream.get_final_text(), flush=True)
    client.close()
    time.sleep(args.wait)


if __name__ == "__main__":
    main()
