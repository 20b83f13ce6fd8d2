"""Sub-microsecond figures of llmtap's pure pieces, with pyperf: a profiling aid, not a verdict.

    python benchmarks/micro.py --fast                  # ~1 min; pyperf's own options (-o out.json, --rigorous)
    python -m pyperf compare_to before.json after.json # what a change did

What users pay is measured inside the real SDKs by ``benchmarks/sdk.py`` (``make bench``), which owns the
targets; this file only resolves what that noise floor hides: per SSE event (one event per read, five per
read, gzip), per Bedrock event-stream message, per attempt for each sink's ``end()``, the hand-off of a
dropped stream, and the hook's cost on traffic that is not an LLM API. Every benchmark feeds the
simulator's own renderers (no second copy of the wire format) and prints no PASS/FAIL.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import httpx2
import pyperf
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

import llmtap
from llmtap._core import handoff as _handoff
from llmtap._core.metrics import CHUNK_GAP_BUCKETS, INSTRUMENTS
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord, AttemptStart
from llmtap._exporters.otel_metrics import OtelMetricsExporter
from llmtap._exporters.prometheus import PrometheusExporter
from llmtap._exporters.tracing import TracingExporter
from llmtap._providers._base import Provider
from llmtap._providers._catalog import ENTRIES, parser
from llmtap.simulator._anthropic import AnthropicMessagesApi
from llmtap.simulator._clouds import _chunk, _sse_data
from llmtap.simulator._exchange import Context, RateLimitSnapshot
from llmtap.simulator._scenario import Scenario, delta_text

PROVIDERS = [parser(entry) for entry in ENTRIES]
PROVIDER = next(p for p in PROVIDERS if p.name == "anthropic" and p.operation == "chat")
CONFIG = ObserverConfig(
    stall_threshold=5.0, gap_bounds=CHUNK_GAP_BUCKETS, max_event_bytes=4 << 20, max_json_bytes=8 << 20
)
START = AttemptStart(
    "anthropic", "chat", "claude-sonnet-4-6", "api.anthropic.com", 443, "/v1/messages", "POST", True, 4096, 0, None,
    None, (), (), 0.0, 0,
)  # fmt: skip
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"request-id", b"req_1")]
GZIP_HEADERS = [*HEADERS, (b"content-encoding", b"gzip")]
BEDROCK = next(p for p in PROVIDERS if p.name == "aws.bedrock")
BEDROCK_HEADERS = [(b"content-type", b"application/vnd.amazon.eventstream"), (b"x-amzn-requestid", b"r-1")]


def stream_events(deltas: int) -> list[bytes]:
    """One streamed Message as the simulator renders it, one bytes object per SSE event."""
    now = time.time()
    ctx = Context(
        path="/v1/messages",
        body={},
        scenario=Scenario(tokens=deltas, input=472, cache_read=1024),
        request_id="req_1",
        model=START.request_model,
        stream=True,
        received_at=time.perf_counter(),
        ratelimit=RateLimitSnapshot(4000, 3999, 2_400_000, 2_398_000, 2_000_000, 1_999_000, 400_000, 399_000, 7.0, now),
    )
    api = AnthropicMessagesApi(ctx)
    events = api.preamble_events() + [api.delta_event(i, delta_text(i)) for i in range(deltas)]
    return events + api.close_events() + api.stop_events()


def bedrock_messages(events: Sequence[bytes]) -> list[bytes]:
    """The same events as Bedrock streams them: one AWS event-stream message each, the simulator's framing."""
    return [_chunk(_sse_data(event)) for event in events]


def gzipped(events: Sequence[bytes]) -> list[bytes]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunks = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    chunks[-1] += compressor.flush(zlib.Z_FINISH)
    return chunks


def observer_time(
    chunks: Sequence[bytes], headers: list[tuple[bytes, bytes]], provider: Provider = PROVIDER
) -> Callable[[int], float]:
    """Seconds for ``loops`` streams through a fresh observer, as the shells feed it."""

    def run(loops: int) -> float:
        clock = time.perf_counter
        total = 0.0
        for _ in range(loops):
            observer = AttemptObserver(START, provider, CONFIG)
            observer.on_response(200, headers, clock())
            on_chunk = observer.on_chunk
            t0 = clock()
            for chunk in chunks:
                on_chunk(chunk, clock())
            observer.end(Ending.EOF, clock())
            total += clock() - t0
        return total

    return run


def a_record() -> AttemptRecord:
    observer = AttemptObserver(START, PROVIDER, CONFIG)
    observer.on_response(200, HEADERS, 0.0)
    for i, event in enumerate(stream_events(40)):
        observer.on_chunk(event, 0.001 * i)
    record = observer.end(Ending.EOF, 0.05)
    assert record is not None
    return record


def a_json_record() -> AttemptRecord:
    """A non-streaming Message with the simulator's headers (12 rate-limit values) and body."""
    import json

    now = time.time()
    ctx = Context(
        path="/v1/messages",
        body={},
        scenario=Scenario(tokens=5, input=472),
        request_id="req_1",
        model=START.request_model,
        stream=False,
        received_at=time.perf_counter(),
        ratelimit=RateLimitSnapshot(4000, 3999, 2_400_000, 2_398_000, 2_000_000, 1_999_000, 400_000, 399_000, 7.0, now),
    )
    api = AnthropicMessagesApi(ctx)
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in api.common_headers()]
    observer = AttemptObserver(JSON_START, PROVIDER, CONFIG)
    observer.on_response(200, headers, 0.0)
    observer.on_chunk(json.dumps(api.json_body()).encode(), 0.01)
    record = observer.end(Ending.EOF, 0.02)
    assert record is not None and record.rate_limits and record.usage.output_tokens, record
    return record


JSON_START = START._replace(request_stream=False)


def sink_time(sink: object, record: AttemptRecord) -> Callable[[int], float]:
    start, end = sink.start, sink.end  # type: ignore[attr-defined]
    begun = START if record.request_stream else JSON_START

    def run(loops: int) -> float:
        clock = time.perf_counter
        t0 = clock()
        for _ in range(loops):
            end(record, start(begun))
        return clock() - t0

    return run


def passthrough_time() -> Callable[[int], float]:
    tap = llmtap.Tap(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))
    request = httpx2.Request("GET", "https://api.github.com/repos/octo/hello/issues", headers={"accept": "*/*"})
    assert tap._begin(request) is None  # not an LLM API: the hook passes it through

    def run(loops: int) -> float:
        begin = tap._begin
        t0 = time.perf_counter()
        for _ in range(loops):
            begin(request)
        return time.perf_counter() - t0

    return run


def handoff_time() -> Callable[[int], float]:
    """What a dropped stream costs inside the garbage collector: one hand-off (drained outside the timing)."""
    tap = llmtap.Tap(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))

    def run(loops: int) -> float:
        attempts = [tap._begin(httpx2.Request("POST", "https://api.anthropic.com/v1/messages")) for _ in range(loops)]
        t0 = time.perf_counter()
        for attempt in attempts:
            _handoff.defer(tap._end, attempt, Ending.DROPPED, 0.0, None)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - t0
        _handoff.drain()
        return elapsed

    return run


class _Protocol:
    """What an aiohttp ``StreamReader`` asks of its connection's protocol."""

    connected = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


def aiohttp_read_time(observed: bool) -> Callable[[int], float]:
    """``readany()`` of a real in-memory ``aiohttp.StreamReader`` fed one delta event before each read,
    bare or through the adapter an observed response's ``content`` becomes (``_aiohttp.ObservedContent``)."""
    import asyncio

    from aiohttp import StreamReader

    from llmtap._hooks.aiohttp_session import ObservedContent

    event = stream_events(1)[3]  # one content_block_delta
    tap = llmtap.Tap(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))

    async def reads(loops: int) -> float:
        reader = StreamReader(_Protocol(), 1 << 30, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
        content: StreamReader | ObservedContent = reader
        if observed:
            attempt = tap._begin(httpx2.Request("POST", "https://api.anthropic.com/v1/messages"))
            assert attempt is not None
            attempt.observer.on_response(200, HEADERS, time.perf_counter())
            content = ObservedContent(reader, tap, attempt)
        total = 0.0
        for _ in range(loops):
            reader.feed_data(event)
            t0 = time.perf_counter()
            await content.readany()
            total += time.perf_counter() - t0
        return total

    return lambda loops: asyncio.run(reads(loops))


class _Body(httpx2.AsyncByteStream, httpx2.SyncByteStream):
    """A response body in memory, one event per read, sync and async (what the transport's stream yields)."""

    def __init__(self, events: Sequence[bytes]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        yield from self.events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event


def shell_time(events: Sequence[bytes], is_async: bool, observed: bool) -> Callable[[int], float]:
    """Seconds for ``loops`` streams of ``events`` read as httpx's ``iter_raw`` / ``aiter_raw`` reads its
    stream, bare or through llmtap's shell (``_core.stream``) with its observer (no sink): per chunk, what the
    shell and the observer add."""
    import asyncio

    from llmtap._core.stream import shells_for

    shell = shells_for(httpx2)[1 if is_async else 0]
    tap = llmtap.Tap(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))

    def body() -> object:
        stream = _Body(events)
        if not observed:
            return stream
        attempt = tap._begin(httpx2.Request("POST", "https://api.anthropic.com/v1/messages"))
        assert attempt is not None
        attempt.observer.on_response(200, HEADERS, time.perf_counter())
        return shell(stream, tap, attempt)  # its end (once per stream) timed too: ~0.01 µs per chunk here

    async def aiter_raw(stream: Any) -> AsyncIterator[bytes]:
        async for chunk in stream:
            yield chunk

    async def areads(loops: int) -> float:
        total = 0.0
        for _ in range(loops):
            stream = body()
            t0 = time.perf_counter()
            async for _read in aiter_raw(stream):
                pass
            total += time.perf_counter() - t0
        return total

    def iter_raw(stream: Any) -> Iterator[bytes]:
        yield from stream

    def reads(loops: int) -> float:
        total = 0.0
        for _ in range(loops):
            stream = body()
            t0 = time.perf_counter()
            for _read in iter_raw(stream):
                pass
            total += time.perf_counter() - t0
        return total

    return (lambda loops: asyncio.run(areads(loops))) if is_async else reads


def main() -> None:
    runner = pyperf.Runner()
    events = stream_events(2000)
    n = len(events)
    runner.bench_time_func("observer, per event (1 event per read)", observer_time(events, HEADERS), inner_loops=n)
    fives = [b"".join(events[i : i + 5]) for i in range(0, n, 5)]
    runner.bench_time_func("observer, per event (5 events per read)", observer_time(fives, HEADERS), inner_loops=n)
    runner.bench_time_func("observer, per event (gzip)", observer_time(gzipped(events), GZIP_HEADERS), inner_loops=n)
    runner.bench_time_func(
        "observer, per event (Bedrock event-stream, 1 message per read)",
        observer_time(bedrock_messages(events), BEDROCK_HEADERS, BEDROCK),
        inner_loops=n,
    )
    record = a_record()
    # the instruments a default Settings() leaves off (cost, the latest semconv generation), as the tap does
    off = tuple(i.name for i in INSTRUMENTS if i.requires or i.semconv_version == "latest")
    sinks = {
        "prometheus": PrometheusExporter(CollectorRegistry(), exclude=off),
        "otel metrics": OtelMetricsExporter(MeterProvider(metric_readers=[InMemoryMetricReader()]), exclude=off),
        "spans": TracingExporter(TracerProvider()),
    }
    json_record = a_json_record()
    for name, sink in sinks.items():
        runner.bench_time_func(f"sink end(), per attempt: {name}", sink_time(sink, record))
        runner.bench_time_func(f"sink end(), per non-stream attempt: {name}", sink_time(sink, json_record))
    runner.bench_time_func("hook on non-LLM traffic, per request", passthrough_time())
    runner.bench_time_func("hand-off of a dropped stream (in the collector)", handoff_time())
    for kind, is_async in (("sync", False), ("async", True)):
        for state in ("bare", "observed"):
            runner.bench_time_func(
                f"httpx {kind} stream, per chunk: {state}",
                shell_time(events, is_async, state == "observed"),
                inner_loops=n,
            )
    runner.bench_time_func("aiohttp readany(), per read: bare", aiohttp_read_time(observed=False))
    runner.bench_time_func("aiohttp readany(), per read: observed", aiohttp_read_time(observed=True))


if __name__ == "__main__":
    main()
