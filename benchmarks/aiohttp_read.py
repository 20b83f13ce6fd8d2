"""What llmtap's aiohttp adapter adds per read of a response's ``content``.

    .venv/bin/python benchmarks/aiohttp_read.py [--reads 20000] [--repeat 5]

A real ``aiohttp.StreamReader`` (in memory, fed one Anthropic ``content_block_delta`` event before
each read) is read with ``readany()`` bare and through :class:`llmtap._aiohttp.ObservedContent` (the
proxy an observed response's ``content`` becomes: one coroutine around the real read, the observer's
SSE framing, the EOF check). Alternated bare / observed, garbage collector off; prints the median of
``--repeat`` runs of each and their difference per read.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from aiohttp import StreamReader
from prometheus_client import CollectorRegistry

import llmtap
from llmtap._aiohttp import ObservedContent
from llmtap._tap import Tap

EVENT = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok "}}\n\n'
)


class _Protocol:
    """What a ``StreamReader`` asks of its connection's protocol."""

    connected = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


class _Url:
    host = "api.anthropic.com"
    port = 443
    scheme = "https"
    path = "/v1/messages"


class _Request:
    url = _Url()
    method = "POST"
    headers: dict[str, str] = {}  # noqa: RUF012 (read-only)
    content = b'{"model":"claude-bench","stream":true,"max_tokens":10}'


async def _per_read(observed: bool, reads: int) -> float:
    reader = StreamReader(_Protocol(), 1 << 30, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    content: StreamReader | ObservedContent = reader
    if observed:
        tap = Tap(llmtap.Settings(traces=False), registry=CollectorRegistry())
        attempt = tap.begin(_Request())
        assert attempt is not None
        attempt.observer.on_response(200, [(b"content-type", b"text/event-stream")], time.perf_counter())
        content = ObservedContent(reader, tap, attempt)
    gc.collect()
    gc.disable()
    try:
        total = 0
        for _ in range(reads):
            reader.feed_data(EVENT)
            t0 = time.perf_counter_ns()
            await content.readany()
            total += time.perf_counter_ns() - t0
    finally:
        gc.enable()
    return total / reads / 1000.0


async def _main(reads: int, repeat: int) -> None:
    bare: list[float] = []
    observed: list[float] = []
    for i in range(repeat):
        order = (False, True) if i % 2 == 0 else (True, False)
        for flag in order:
            (observed if flag else bare).append(await _per_read(flag, reads))
    b, o = statistics.median(bare), statistics.median(observed)
    print(f"readany() per read: bare {b:.2f} us, observed {o:.2f} us, added {o - b:.2f} us (median of {repeat})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(_main(args.reads, args.repeat))


if __name__ == "__main__":
    main()
