#!/usr/bin/env python
"""llmtap overhead benchmarks: what observing LLM API traffic adds, per SSE event and per request.

Run from the repository root::

    .venv/bin/python benchmarks/run.py            # full run, about 30 s on 2 cores
    .venv/bin/python benchmarks/run.py --quick    # fewer repeats, about 10 s
    .venv/bin/python benchmarks/run.py --json out.json --strict

Prints one table: each figure, its target (from the issue) and PASS/FAIL. The exit status is 0
regardless, unless ``--strict`` is given (then 1 when any target fails). ``--profile`` adds a
cProfile of the pure per-event path. See ``benchmarks/README.md`` for what each figure means.

Method: every timed loop runs with the garbage collector disabled (collected just before), after
warm-up runs; instrumented and bare runs alternate (ABBA order) and a figure is the median of the
per-run figures, with the interquartile range of the per-run figures as its spread.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import statistics
import sys
import time
import tracemalloc
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx2
from anthropic._models import FinalRequestOptions
from anthropic.types import MessageParam
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import llmtap
from llmtap._observer import AttemptObserver, Ending, ObserverConfig
from llmtap._providers.anthropic import PROVIDER
from llmtap._record import AttemptRecord, AttemptStart, Outcome
from llmtap._settings import CHUNK_GAP_BUCKETS
from llmtap._stream import observe_sync, shells_for
from llmtap._tap import Attempt
from llmtap.simulator import Scenario, Simulator, delta_text
from llmtap.simulator._anthropic import AnthropicMessages
from llmtap.simulator._exchange import Context, RateLimitSnapshot, json_bytes
from llmtap.testing import capture

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdk import ChildSimulator  # benchmarks/sdk.py: the simulator in a child process

Thunk = Callable[[], object]

# ------------------------------------------------------------------------------------------------
# Targets (from the issue)

EVENT_TARGET_NS = 300.0  # ≤ 0.3 µs added per SSE event
REQUEST_TARGET_US = 60.0  # ≤ 60 µs per non-streaming request, metrics and spans on
MEMORY_GROWTH_TARGET_B = 4096.0  # O(1) per stream: 100k events may not retain more than 1k events + 4 KiB

MODEL = "claude-sonnet-4-5-20250929"
SDK_MODEL = "claude-bench"  # the SDK warns on (deprecated) real names; the simulator echoes anything


# ------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Figure:
    """One measured figure; ``target`` is an upper bound (``value <= target`` passes)."""

    key: str
    name: str
    value: float
    unit: str
    target: float | None = None
    spread: tuple[float, float] | None = None
    note: str = ""

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.value <= self.target else "FAIL"


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_table(figures: Sequence[Figure]) -> None:
    rows = [("#", "figure", "measured", "spread (IQR)", "target", "status")]
    for f in figures:
        spread = f"{_fmt(f.spread[0])} .. {_fmt(f.spread[1])}" if f.spread else ""
        target = f"<= {_fmt(f.target)} {f.unit}" if f.target is not None else ""
        rows.append((f.key, f.name, f"{_fmt(f.value)} {f.unit}", spread, target, f.status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [c.ljust(w) if i in (0, 1, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    notes = [f for f in figures if f.note]
    if notes:
        print()
        for f in notes:
            print(f"[{f.key}] {f.note}")


# ------------------------------------------------------------------------------------------------
# Timing helpers


def timed(run: Thunk) -> int:
    """Nanoseconds one call of ``run`` takes, with the garbage collector collected and then off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        run()
        return time.perf_counter_ns() - start
    finally:
        if enabled:
            gc.enable()


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def paired(
    make_instrumented: Callable[[], Thunk],
    make_bare: Callable[[], Thunk],
    *,
    repeats: int,
    warmup: int,
) -> tuple[list[int], list[int]]:
    """Alternating (ABBA) timings of fresh instrumented and bare runs; ``make_*`` is untimed set-up."""
    for _ in range(warmup):
        make_instrumented()()
        make_bare()()
    instrumented: list[int] = []
    bare: list[int] = []
    for i in range(repeats):
        if i % 2:
            instrumented.append(timed(make_instrumented()))
            bare.append(timed(make_bare()))
        else:
            bare.append(timed(make_bare()))
            instrumented.append(timed(make_instrumented()))
    return instrumented, bare


def added_per_unit(instrumented: Sequence[int], bare: Sequence[int], units: int, scale: float) -> list[float]:
    """Per-run (instrumented - bare) / units, in ns / ``scale``."""
    return [(a - b) / units / scale for a, b in zip(instrumented, bare, strict=True)]


def figure_from(
    key: str, name: str, values: Sequence[float], unit: str, target: float | None, note: str = ""
) -> Figure:
    return Figure(key, name, statistics.median(values), unit, target, quartiles(values), note)


# ------------------------------------------------------------------------------------------------
# Realistic Anthropic wire data


def _sim_api(deltas: int, *, stream: bool) -> AnthropicMessages:
    """The simulator's own Anthropic renderer, set up for one response (no second SSE renderer here)."""
    now = time.time()
    ctx = Context(
        path="/v1/messages",
        body={},
        scenario=Scenario(tokens=deltas, input=472, cache_read=1024),
        request_id="req_011CVbvh7Mhx3RrEeU5Jr2Qz",
        model=MODEL,
        stream=stream,
        received_at=time.perf_counter(),
        ratelimit=RateLimitSnapshot(
            4000, 3999, 2_400_000, 2_398_000, 2_000_000, 1_999_000, 400_000, 399_000, 7.0, now + 7
        ),
    )
    return AnthropicMessages(ctx)


def anthropic_stream(deltas: int) -> list[bytes]:
    """The SSE events of one streamed Message with ``deltas`` text deltas (one bytes object each), as the
    simulator renders them."""
    api = _sim_api(deltas, stream=True)
    events = api.preamble_events()
    events += [api.delta_event(i, delta_text(i)) for i in range(deltas)]
    return events + api.close_events() + api.stop_events()


def gzip_chunks(events: Sequence[bytes]) -> list[bytes]:
    """Each event gzip-compressed and sync-flushed on its own, as a gzip-ing proxy streams them."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunks = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    chunks[-1] += compressor.flush(zlib.Z_FINISH)
    return chunks


def grouped(events: Sequence[bytes], size: int) -> list[bytes]:
    return [b"".join(events[i : i + size]) for i in range(0, len(events), size)]


def response_headers(
    content_type: bytes, *, gzip: bool = False, length: int | None = None
) -> list[tuple[bytes, bytes]]:
    """What api.anthropic.com answers with (names as HTTP/1.1 clients receive them)."""
    now = time.time()
    headers = [
        (b"Date", datetime.fromtimestamp(now, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT").encode()),
        (b"Content-Type", content_type),
        (b"Connection", b"keep-alive"),
    ]
    if length is not None:
        headers.append((b"Content-Length", str(length).encode()))
    else:
        headers.append((b"Transfer-Encoding", b"chunked"))
    if gzip:
        headers.append((b"Content-Encoding", b"gzip"))
    headers += [(k.encode(), v.encode()) for k, v in _sim_api(1, stream=False).common_headers()]
    headers += [
        (b"strict-transport-security", b"max-age=31536000; includeSubDomains; preload"),
        (b"anthropic-organization-id", b"2b0a8e2c-6c1d-4a51-9d3b-8c7c3f1e0a55"),
        (b"via", b"1.1 google"),
        (b"cf-cache-status", b"DYNAMIC"),
        (b"X-Robots-Tag", b"none"),
        (b"Server", b"cloudflare"),
        (b"CF-RAY", b"9a7c2e1b4d5f6a7b-SJC"),
    ]
    return headers


def message_body() -> bytes:
    """A non-streaming Message (57 deltas of text), as the simulator renders it."""
    return json_bytes(_sim_api(57, stream=False).json_body())


def request_body() -> dict[str, Any]:
    """A ~2 KB Messages request: a system prompt and a short conversation."""
    system = "You are a concise assistant for site-reliability engineers. Answer with exact commands. " * 4
    turns = [
        "How do I alert when the p95 of an HTTP latency histogram exceeds 2 seconds for 10 minutes? " * 4,
        "Use histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket[5m]))) > 2 " * 3,
        "And how do I exclude health checks from that expression? Please show the full rule file. " * 4,
    ]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return {"model": MODEL, "max_tokens": 1024, "system": system, "messages": messages}


def sdk_request(base_url: str) -> httpx2.Request:
    """The very request the anthropic SDK sends for ``messages.create`` (headers, JSON body)."""
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-bench", max_retries=2)
    options = FinalRequestOptions.construct(method="post", url="/v1/messages", json_data=request_body())
    return client._build_request(options, retries_taken=0)


# ------------------------------------------------------------------------------------------------
# Pure pieces


class ListStream(httpx2.SyncByteStream):
    """A minimal response byte stream: yields prepared chunks; ``close()`` does nothing."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._chunks)

    def close(self) -> None:
        pass


OBSERVER_CONFIG = ObserverConfig(
    stall_threshold=llmtap.Settings().stall_threshold_seconds,
    gap_bounds=CHUNK_GAP_BUCKETS,
    max_event_bytes=llmtap.Settings().max_event_bytes,
    max_json_bytes=llmtap.Settings().max_json_bytes,
)


class RecordingTap:
    """What the shells need of a tap (its ``end``), keeping the records: no sinks, no call bookkeeping."""

    def __init__(self, records: list[AttemptRecord]) -> None:
        self.records = records

    def end(self, attempt: Attempt, ending: Ending, now: float, exc: BaseException | None = None) -> None:
        record = attempt.observer.end(ending, now, exc)
        if record is not None:
            self.records.append(record)


START = AttemptStart(
    PROVIDER.name, PROVIDER.operation, MODEL, "api.anthropic.com", 443, "/v1/messages", "POST", True, 4096, 0, None,
    None, (), (), 0.0, 0,
)  # fmt: skip


def standalone_observer(stream: bool = True) -> AttemptObserver:
    """An observer as ``Tap.begin`` builds it, without sinks (like ``tests/_replay.make_observer``)."""
    return AttemptObserver(START._replace(request_stream=stream), PROVIDER, OBSERVER_CONFIG)


def shell_over(shell_cls: type, chunks: Sequence[bytes], headers: list[tuple[bytes, bytes]],
               records: list[AttemptRecord]) -> Any:  # fmt: skip
    """The real shell around a list-backed stream, ending into ``records``."""
    observer = standalone_observer()
    observer.on_response(200, headers, time.perf_counter())
    return shell_cls(ListStream(chunks), RecordingTap(records), Attempt(observer, None, ()))


def _consume(iterable: Any) -> None:
    for _ in iterable:
        pass


# ------------------------------------------------------------------------------------------------
# 1. Observer per-event cost (pure core, no I/O)


def bench_observer(quick: bool) -> list[Figure]:
    deltas = 2000
    events = anthropic_stream(deltas)
    n_events = len(events)
    repeats, warmup = (9, 3) if quick else (41, 5)
    shell_cls = shells_for(httpx2)[0]
    clock = time.perf_counter
    sse_headers = response_headers(b"text/event-stream; charset=utf-8")
    gz_headers = response_headers(b"text/event-stream; charset=utf-8", gzip=True)
    figures: list[Figure] = []

    def check(records: list[AttemptRecord]) -> None:
        record = records[-1]
        complete = record.outcome is Outcome.COMPLETED and record.usage.output_tokens == deltas
        if not complete or record.parse_errors:
            raise AssertionError(f"observer did not see the whole stream: {record}")

    # 1a: the core alone, one event per chunk: on_chunk(chunk, perf_counter()) and on_eof
    records: list[AttemptRecord] = []

    def core_run() -> Thunk:
        observer = standalone_observer()
        observer.on_response(200, sse_headers, clock())
        on_chunk = observer.on_chunk

        def run() -> None:
            for chunk in events:
                on_chunk(chunk, clock())
            record = observer.end(Ending.EOF, clock())
            if record is not None:
                records.append(record)

        return run

    def bare_list() -> Thunk:
        return lambda: _consume(events)

    inst, bare = paired(core_run, bare_list, repeats=repeats, warmup=warmup)
    check(records)
    figures.append(
        figure_from(
            "1a",
            "observer core per SSE event (on_chunk + perf_counter), 1 event/chunk",
            added_per_unit(inst, bare, n_events, 1.0),
            "ns",
            EVENT_TARGET_NS,
            f"{deltas} text deltas of ~{statistics.mean(len(e) for e in events[3:-3]):.0f} B, {n_events} events "
            "per stream; once-per-stream on_eof (no sinks) included; on_response not timed.",
        )
    )

    # 1b-1d: the real ObservedStream shell around a list-backed inner stream vs iterating that stream bare
    def shell_case(
        key: str, label: str, chunks: Sequence[bytes], headers: list[tuple[bytes, bytes]], note: str
    ) -> None:
        shell_records: list[AttemptRecord] = []

        def instrumented() -> Thunk:
            shell = shell_over(shell_cls, chunks, headers, shell_records)
            return lambda: _consume(shell)

        def bare_run() -> Thunk:
            inner = ListStream(chunks)
            return lambda: _consume(inner)

        inst, bare = paired(instrumented, bare_run, repeats=repeats, warmup=warmup)
        check(shell_records)
        figures.append(figure_from(key, label, added_per_unit(inst, bare, n_events, 1.0), "ns", EVENT_TARGET_NS, note))

    shell_case(
        "1b",
        "ObservedStream shell + observer per SSE event, 1 event/chunk",
        events,
        sse_headers,
        "(iterating shells_for(httpx2) ObservedStream - iterating the bare inner stream) / events.",
    )
    gz = gzip_chunks(events)
    shell_case(
        "1c",
        "  same, content-encoding: gzip (sync-flushed per event)",
        gz,
        gz_headers,
        f"includes llmtap's own inflate of {sum(map(len, gz))} B -> {sum(map(len, events))} B per stream.",
    )
    five = grouped(events, 5)
    shell_case(
        "1d",
        "  same, 5 events per chunk",
        five,
        sse_headers,
        f"{len(five)} chunks per stream; cost divided by the {n_events} events.",
    )
    return figures


def profile_observer() -> None:
    """cProfile of the pure shell + observer path (``--profile``)."""
    events = anthropic_stream(2000)
    shell_cls = shells_for(httpx2)[0]
    headers = response_headers(b"text/event-stream")
    profiler = cProfile.Profile()
    for _ in range(3):
        _consume(shell_over(shell_cls, events, headers, []))
    profiler.enable()
    for _ in range(20):
        _consume(shell_over(shell_cls, events, headers, []))
    profiler.disable()
    print("\ncProfile of 20 streams x 2006 events through ObservedStream + AttemptObserver:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


# ------------------------------------------------------------------------------------------------
# Simulators: in-process (a thread sharing the GIL) and in a child process


# ------------------------------------------------------------------------------------------------
# 2. Per-event cost in the real SDK path (and 3e-3h, per request)


MSG: list[MessageParam] = [{"role": "user", "content": "Write a long answer."}]


@dataclass
class OffOn:
    """Alternating llmtap-off / llmtap-on timings of one block of SDK work: wall and this thread's CPU."""

    off_wall: list[int]
    off_cpu: list[int]
    on_wall: list[int]
    on_cpu: list[int]
    records: list[AttemptRecord]


def timed_both(run: Thunk) -> tuple[int, int]:
    """(wall ns, this thread's CPU ns) of one call of ``run``, garbage collector off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        run()
        return time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
    finally:
        if enabled:
            gc.enable()


def sdk_off_on(base_url: str, block: Thunk, warm: Thunk, *, repeats: int, warmup: int) -> OffOn:
    """Run ``block`` with llmtap off (not instrumented) and on (``testing.capture``), alternating.

    Each capture builds a fresh Tap, whose first attempt creates its Prometheus label children and
    the tracer: ``warm`` runs first inside every capture so the timed block is the steady state.
    """
    settings = llmtap.Settings(base_urls=(base_url,))
    for _ in range(warmup):
        block()
        with capture(settings):
            warm()
            block()
    result = OffOn([], [], [], [], [])
    for i in range(repeats):
        for instrumented in (False, True) if i % 2 == 0 else (True, False):
            if instrumented:
                with capture(settings) as cap:
                    warm()
                    skip = len(cap.records)
                    wall, cpu = timed_both(block)
                    result.on_wall.append(wall)
                    result.on_cpu.append(cpu)
                    result.records.extend(cap.records[skip:])
            else:
                wall, cpu = timed_both(block)
                result.off_wall.append(wall)
                result.off_cpu.append(cpu)
    return result


def bench_sdk_stream(base_url: str, where: str, quick: bool) -> list[Figure]:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-bench", max_retries=0)
    repeats, warmup = (8, 2) if quick else (40, 3)

    def stream(tokens: int) -> Thunk:
        headers = Scenario(tokens=tokens).headers()

        def run() -> None:
            for _ in client.messages.create(
                model=SDK_MODEL, max_tokens=4096, messages=MSG, stream=True, extra_headers=headers
            ):
                pass

        return run

    r = sdk_off_on(base_url, stream(2000), stream(5), repeats=repeats, warmup=warmup)
    record = r.records[-1]
    if len(r.records) != repeats or record.outcome is not Outcome.COMPLETED:
        raise AssertionError(f"llmtap did not observe every stream: {len(r.records)} records, last {record}")
    n = 2000 + 8  # message_start, content_block_start, ping, 2000 deltas, block stop, message_delta, message_stop
    note = (
        f"real anthropic.Anthropic streaming Scenario(tokens=2000) from the Simulator ({where}): {n} events "
        f"in {record.chunks} chunks per stream; {repeats} alternating off/on streams, medians. CPU = this "
        "thread's CPU time (time.thread_time_ns: excludes the simulator and waiting); wall also counts "
        "waiting for the socket."
    )
    return [
        figure_from(
            "2a", "SDK's own CPU per SSE event, llmtap off", [c / n / 1000 for c in r.off_cpu], "µs", None, note
        ),
        figure_from(
            "2b",
            "  added by llmtap per SSE event, CPU",
            added_per_unit(r.on_cpu, r.off_cpu, n, 1.0),
            "ns",
            EVENT_TARGET_NS,
        ),
        figure_from(
            "2c", "SDK's own wall time per SSE event, llmtap off", [w / n / 1000 for w in r.off_wall], "µs", None
        ),
        figure_from(
            "2d", "  added by llmtap per SSE event, wall", added_per_unit(r.on_wall, r.off_wall, n, 1.0), "ns", None
        ),
    ]


# ------------------------------------------------------------------------------------------------
# 3. Per non-streaming request overhead


def bench_request_pure(quick: bool) -> list[Figure]:
    base_url = "http://llm-gateway.internal:8080"
    request = sdk_request(base_url)
    body = message_body()
    headers = response_headers(b"application/json", length=len(body))
    per_run = 200 if quick else 400
    repeats = 7 if quick else 21
    clock = time.perf_counter
    figures: list[Figure] = []

    def make_tap(
        processor: bool = False, otel_metrics: bool = False, metrics: bool = True, traces: bool = True
    ) -> tuple[llmtap.Tap, InMemorySpanExporter]:
        tracer_provider = TracerProvider()
        exporter = InMemorySpanExporter()
        if processor:
            tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()]) if otel_metrics else None
        settings = llmtap.Settings(base_urls=(base_url,), metrics=metrics, traces=traces, otel_metrics=otel_metrics)
        tap = llmtap.Tap(
            settings, registry=CollectorRegistry(), tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        return tap, exporter

    def core_loop(tap: llmtap.Tap) -> Thunk:
        begin = tap.begin

        def run() -> None:
            for _ in range(per_run):
                attempt = begin(request)
                assert attempt is not None
                attempt.observer.on_response(200, headers, clock())
                attempt.observer.on_chunk(body, clock())
                tap.end(attempt, Ending.EOF, clock())

        return run

    def measure(tap: llmtap.Tap, exporter: InMemorySpanExporter, loop: Callable[[llmtap.Tap], Thunk]) -> list[float]:
        run = loop(tap)
        run()  # warm-up: label children, caches
        values = []
        for _ in range(repeats):
            exporter.clear()
            values.append(timed(run) / per_run / 1000)
        exporter.clear()
        return values

    cases: list[tuple[str, str, dict[str, bool], float | None]] = [
        ("3a", "Tap.begin+on_response+on_chunk+on_eof, Prometheus + spans (no processor)", {}, REQUEST_TARGET_US),
        ("3a.1", "  breakdown: no sinks (observer, record, call record)", {"metrics": False, "traces": False}, None),
        ("3a.2", "  breakdown: Prometheus sink only", {"traces": False}, None),
        ("3a.3", "  breakdown: span sink only (no processor)", {"metrics": False}, None),
        (
            "3b",
            "  3a + SimpleSpanProcessor(InMemorySpanExporter) (as testing.capture)",
            {"processor": True},
            REQUEST_TARGET_US,
        ),
        (
            "3c",
            "  3b + OTel metrics (SDK MeterProvider, InMemoryMetricReader)",
            {"processor": True, "otel_metrics": True},
            REQUEST_TARGET_US,
        ),
    ]
    notes = {
        "3a": (
            f"request built by the SDK's own _build_request ({len(request.content)} B JSON body), "
            f"{len(headers)} realistic response headers (12 anthropic-ratelimit-*), {len(body)} B Message body; "
            "spans: SDK TracerProvider with no span processor (recorded, ended, not exported); no logical call."
        ),
    }
    for key, label, options, target in cases:
        tap, exporter = make_tap(**options)
        try:
            values = measure(tap, exporter, core_loop)
        finally:
            tap.close()
        figures.append(figure_from(key, label, values, "µs", target, notes.get(key, "")))

    # 3d: the whole per-attempt path of the httpx2 patch: observe_sync (begin, span context attach/detach,
    # weakref.finalize, the shell) and reading the body through the ObservedStream, vs the same bare.
    tap, exporter = make_tap()
    shell_cls = shells_for(httpx2)[0]

    def send() -> httpx2.Response:
        return httpx2.Response(200, headers=headers, stream=ListStream((body,)), request=request)

    def read(response: httpx2.Response) -> None:
        stream = response.stream
        assert isinstance(stream, httpx2.SyncByteStream)
        for _ in stream:
            pass
        stream.close()

    def instrumented() -> Thunk:
        def run() -> None:
            for _ in range(per_run):
                read(observe_sync(tap, request, send, shell_cls))

        return run

    def bare_run() -> Thunk:
        def run() -> None:
            for _ in range(per_run):
                read(send())

        return run

    try:
        inst, bare = paired(instrumented, bare_run, repeats=repeats, warmup=2)
    finally:
        tap.close()
    figures.append(
        figure_from(
            "3d",
            "  full patched-send path (observe_sync + ObservedStream), config of 3a",
            added_per_unit(inst, bare, per_run, 1000.0),
            "µs",
            REQUEST_TARGET_US,
            "adds to 3a: OTel context attach/detach, weakref.finalize, the shell generator, close().",
        )
    )
    return figures


def bench_request_sdk(base_url: str, where: str, quick: bool) -> list[Figure]:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-bench", max_retries=0)
    headers = Scenario(tokens=60).headers()
    per_block = 20 if quick else 30
    repeats = 8 if quick else 40
    body = request_body()
    body["model"] = SDK_MODEL

    def requests(count: int) -> Thunk:
        def run() -> None:
            for _ in range(count):
                client.messages.create(**body, extra_headers=headers)

        return run

    r = sdk_off_on(base_url, requests(per_block), requests(2), repeats=repeats, warmup=1)
    if len(r.records) != repeats * per_block:
        raise AssertionError(f"llmtap observed {len(r.records)} of {repeats * per_block} requests")
    note = (
        f"client.messages.create, ~2 KB request, ~600 B response, Simulator ({where}); blocks of {per_block} "
        f"requests, {repeats} alternating off/on blocks; on = testing.capture: Prometheus, spans via "
        "SimpleSpanProcessor to memory, OTel metrics to the global (no-op) meter provider, recording sink, "
        "SDK call hook."
    )
    return [
        figure_from(
            "3e",
            "SDK non-streaming request CPU, llmtap off",
            [c / per_block / 1000 for c in r.off_cpu],
            "µs",
            None,
            note,
        ),
        figure_from(
            "3f",
            "  added by llmtap per request, CPU",
            added_per_unit(r.on_cpu, r.off_cpu, per_block, 1000.0),
            "µs",
            REQUEST_TARGET_US,
        ),
        figure_from(
            "3g",
            "SDK non-streaming request wall time, llmtap off",
            [w / per_block / 1000 for w in r.off_wall],
            "µs",
            None,
        ),
        figure_from(
            "3h",
            "  added by llmtap per request, wall",
            added_per_unit(r.on_wall, r.off_wall, per_block, 1000.0),
            "µs",
            None,
        ),
    ]


# ------------------------------------------------------------------------------------------------
# 4. Memory per stream


def bench_memory() -> list[Figure]:
    stream = anthropic_stream(100)
    preamble, delta_pool, ending = stream[:3], stream[3:-3], stream[-3:]
    figures: list[Figure] = []

    def feed(deltas: int, gzip: bool) -> tuple[int, int]:
        """(peak, retained) bytes traced while one observer eats ``deltas`` deltas (chunks prebuilt)."""
        body = [*preamble, *(delta_pool[i % len(delta_pool)] for i in range(deltas)), *ending]
        chunks = gzip_chunks(body) if gzip else body
        headers = response_headers(b"text/event-stream", gzip=gzip)
        head, tail = chunks[:-3], chunks[-3:]
        gc.collect()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            observer = standalone_observer()
            observer.on_response(200, headers, 1.0)
            now = 1.0
            for chunk in head:
                now += 0.01
                observer.on_chunk(chunk, now)
            retained = tracemalloc.get_traced_memory()[0] - baseline  # before the ending frees the state
            for chunk in tail:
                now += 0.01
                observer.on_chunk(chunk, now)
            observer.end(Ending.EOF, now)
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
        del observer
        return peak, retained

    for gzip in (False, True):
        small_peak, small_kept = feed(1_000, gzip)
        big_peak, big_kept = feed(100_000, gzip)
        label = "gzip" if gzip else "identity"
        key = "4b" if gzip else "4a"
        figures.append(Figure(f"{key}1", f"observer peak memory, 1k events ({label})", small_peak, "B"))
        figures.append(Figure(f"{key}2", f"observer peak memory, 100k events ({label})", big_peak, "B"))
        figures.append(
            Figure(
                f"{key}3",
                f"  growth 1k -> 100k events ({label}): peak / retained mid-stream",
                float(max(big_peak - small_peak, big_kept - small_kept)),
                "B",
                MEMORY_GROWTH_TARGET_B,
                note=(
                    f"tracemalloc from before the observer is built; retained mid-stream "
                    f"{small_kept} B (1k) vs {big_kept} B (100k); the figure is the larger growth."
                    + (" gzip includes zlib's inflate window." if gzip else "")
                ),
            )
        )
    return figures


# ------------------------------------------------------------------------------------------------
# 5. Non-LLM traffic


def bench_passthrough(quick: bool) -> list[Figure]:
    tap = llmtap.Tap(
        llmtap.Settings(base_urls=("http://llm-gateway.internal:8080",), otel_metrics=False),
        registry=CollectorRegistry(),
        tracer_provider=TracerProvider(),
    )
    request = httpx2.Request(
        "GET", "https://api.github.com/repos/octo/hello/issues?state=open", headers={"accept": "application/json"}
    )
    shell_cls = shells_for(httpx2)[0]
    calls = 20_000 if quick else 50_000
    repeats = 7 if quick else 21
    sentinel = object()

    def send() -> object:
        return sentinel

    def loop_begin() -> Thunk:
        begin = tap.begin

        def run() -> None:
            for _ in range(calls):
                begin(request)

        return run

    def loop_observe() -> Thunk:
        def run() -> None:
            for _ in range(calls):
                observe_sync(tap, request, send, shell_cls)

        return run

    def loop_bare() -> Thunk:
        def run() -> None:
            for _ in range(calls):
                send()

        return run

    try:
        assert tap.begin(request) is None
        begin_inst, begin_bare = paired(loop_begin, loop_bare, repeats=repeats, warmup=2)
        obs_inst, obs_bare = paired(loop_observe, loop_bare, repeats=repeats, warmup=2)
    finally:
        tap.close()
    return [
        figure_from(
            "5a",
            "Tap.begin for a non-LLM URL (returns None)",
            added_per_unit(begin_inst, begin_bare, calls, 1.0),
            "ns",
            None,
            "httpx2.Request to https://api.github.com/...; the (host, port, path) decision is cached.",
        ),
        figure_from(
            "5b",
            "  whole observe_sync pass-through for it",
            added_per_unit(obs_inst, obs_bare, calls, 1.0),
            "ns",
            None,
        ),
    ]


# ------------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (about a third of the time)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any target fails")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the per-event path")
    parser.add_argument(
        "--sim",
        choices=("child", "thread"),
        default="child",
        help=(
            "run the Simulator in a child process (default) or in a thread of this process; the thread shares "
            "the GIL with the SDK, which inflates and blurs the SDK figures (see benchmarks/README.md)"
        ),
    )
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)

    started = time.monotonic()
    # Everything imported so far is immortal for the collector: the gc.collect() before each timed run
    # then only walks what the benchmarks allocate (ms instead of ~0.1 s with the SDKs imported).
    gc.collect()
    gc.freeze()
    machine: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "llmtap": llmtap.__version__,
        "anthropic": anthropic.__version__,
        "httpx2": httpx2.__version__,
    }
    print(
        f"llmtap {machine['llmtap']} overhead benchmarks{' (quick)' if args.quick else ''} - "
        f"{machine['cpu']}, {machine['cpus']} CPUs, CPython {machine['python']}, anthropic {machine['anthropic']}"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    machine["loadavg_1min_at_start"] = round(load, 2)
    if load > 0.5:
        print(f"  warning: load average {load:.2f} at start: other processes compete for the CPUs, figures are noisier")
    figures: list[Figure] = []
    sections: list[tuple[str, Callable[[], list[Figure]]]] = [
        ("1 observer per event", lambda: bench_observer(args.quick)),
        ("3 per request, pure path", lambda: bench_request_pure(args.quick)),
        ("4 memory per stream", bench_memory),
        ("5 non-LLM traffic", lambda: bench_passthrough(args.quick)),
    ]
    where = "a child process" if args.sim == "child" else "a thread of this process"

    def sdk_sections() -> list[Figure]:
        with ChildSimulator() if args.sim == "child" else Simulator() as sim:
            return bench_sdk_stream(sim.base_url, where, args.quick) + bench_request_sdk(
                sim.base_url, where, args.quick
            )

    sections.append((f"2 and 3e-3h: the real SDK against the simulator in {where}", sdk_sections))
    for title, run in sections:
        print(f"  running {title} ...", end="", flush=True)
        section_start = time.monotonic()
        figures.extend(run())
        print(f" {time.monotonic() - section_start:.1f} s", flush=True)
    figures.sort(key=lambda f: f.key)
    elapsed = time.monotonic() - started
    print()
    print_table(figures)
    failed = [f for f in figures if f.status == "FAIL"]
    print()
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    machine["loadavg_1min_at_end"] = round(load_end, 2)
    print(
        f"{len(failed)} of {sum(f.target is not None for f in figures)} targets failed; {elapsed:.0f} s; "
        f"1-min load average {load:.2f} at start, {load_end:.2f} at end (this run itself adds about 1)."
    )
    if args.profile:
        profile_observer()
    if args.json:
        out = {
            "machine": machine,
            "quick": args.quick,
            "elapsed_seconds": elapsed,
            "figures": [{**asdict(f), "status": f.status} for f in figures],
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
