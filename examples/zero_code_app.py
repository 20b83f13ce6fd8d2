"""An app with no llmtap code at all: ``llmtap run`` instruments it from outside.

    pip install 'llmtap[run]'
    export ANTHROPIC_API_KEY=...                              # or ANTHROPIC_BASE_URL=<llmtap simulate>
    llmtap run --metrics-port 9464 -- python examples/zero_code_app.py           # /metrics on :9464
    OTEL_SERVICE_NAME=chat OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        llmtap run -- python examples/zero_code_app.py                            # OTLP to a collector

The SDK is imported after llmtap is active (opentelemetry-instrument's sitecustomize runs first).
"""

from __future__ import annotations

import anthropic


def main() -> None:
    client = anthropic.Anthropic()  # ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL from the environment
    with client.messages.stream(
        model="claude-haiku-4-5", max_tokens=100, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        print(stream.get_final_text())
    client.close()


if __name__ == "__main__":
    main()
