"""llmtap's core on one non-streaming request, without the SDK and the network: a resolving aid for the
request path (``benchmarks/sdk.py`` owns the figures users pay).

One unit is what the patched SDK hook and ``Client._send_single_request`` do for an Anthropic
``messages.create``: a logical call opened and closed around one observed send, whose response (the
simulator's headers and body, built in memory) is read whole and closed. Blocks with the installation in
effect alternate with blocks without it; CPU time (``process_time``: other processes' load does not
count), the minimum over rounds of each, and the difference.

    python benchmarks/core_path.py [--rounds 15] [--requests 3000]
    PYTHONPATH=/tmp/old/src python benchmarks/core_path.py   # another tree's core (git archive main src | ...)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

import llmtap
from llmtap import _installation
from llmtap._hooks import httpx_transport, sdk_calls

BASE = "http://127.0.0.1:5000"
HEADERS = [
    (b"Server", b"llmtap-simulator/0.1"),
    (b"Date", b"Tue, 01 Dec 2026 15:03:05 GMT"),
    (b"request-id", b"req_tURB1UUjbR0nR7T6coJJsE5f"),
    *(
        (f"anthropic-ratelimit-{resource}-{field}".encode(), value)
        for resource in ("requests", "tokens", "input-tokens", "output-tokens")
        for field, value in (("limit", b"4000"), ("remaining", b"3999"), ("reset", b"2026-12-01T15:04:05Z"))
    ),
    (b"content-type", b"application/json"),
    (b"content-length", b"421"),
]
BODY = (
    b'{"id":"msg_01E0cKikJXfhUdytBvqwC5fp","type":"message","role":"assistant","model":"claude-sonnet-4-6",'
    b'"content":[{"type":"text","text":"tok0 tok1 tok2 tok3 tok4 "}],"stop_reason":"end_turn",'
    b'"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,'
    b'"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,'
    b'"ephemeral_1h_input_tokens":0},"output_tokens":5,"service_tier":"standard"}}'
)


class _Body(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield BODY


class _Options:
    json_data = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": []}  # noqa: RUF012


def _unit() -> Any:
    request = httpx.Request("POST", BASE + "/v1/messages", content=b"{}")
    send = httpx_transport.send_wrapper(httpx, False)
    hook = sdk_calls.sdk_sync_hook("anthropic")

    def sdk_request(client: object, options: object) -> None:
        response = send(
            lambda request: httpx.Response(200, headers=HEADERS, stream=_Body(), request=request), None, (request,), {}
        )
        response.read()
        response.close()

    def unit() -> None:
        hook(sdk_request, None, (None, _Options()), {})

    return unit


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args(argv)
    llmtap.instrument(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False, base_urls=(BASE,)))
    installation = _installation.current
    unit = _unit()
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for on in (False, True):
            _installation.current = installation if on else None
            start = time.process_time()
            for _ in range(args.requests):
                unit()
            times[on].append((time.process_time() - start) / args.requests * 1e6)
    _installation.current = installation
    llmtap.uninstrument()
    without, core = min(times[False]), min(times[True])
    print(f"{llmtap.__file__}: without llmtap {without:.2f} µs, core {core:.2f} µs")
    print(f"added by the core: {core - without:.2f} µs/request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
