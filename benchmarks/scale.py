"""Scale in one process: many concurrent async streams, and many threads sharing one sync client.

    python benchmarks/scale.py                      # 10,000 async streams + 64 threads x 20 calls (make scale)
    python benchmarks/scale.py --streams 1000 --calls 3
    python benchmarks/scale.py --series             # series per process: 1 model x 1 provider, 10 x 3

Everything goes through the real ``anthropic`` SDK against ``llmtap.simulator`` in a child process, with
llmtap instrumented (Prometheus, spans and OTel metrics on). Checked: llmtap's totals (attempts, streams by
outcome, tokens) equal what the simulator served, exactly; the in-flight gauge is back to 0; and while every
async stream is open at once, the memory held by allocations in llmtap's own code (tracemalloc), per stream.
``tests/test_scale.py`` runs a reduced version in ``make test``.

``--series`` answers another question, the series one process adds (docs/guides/fleet.md): one model on one
provider, then ten models on each of three providers (the anthropic, openai and google-genai SDKs against the
in-process simulator; per model one completed stream and one non-streaming call, the series budget's
baseline). Counted: the samples of the ``/metrics`` exposition (each is a series), and the data points of
the OTLP request the OTLP exporter would send (``encode_metrics``), once with the SDK's explicit-bucket
histograms and once with exponential ones, with the series each becomes in Prometheus (an explicit-bucket
point: a ``_bucket`` per bucket, ``_sum``, ``_count``; an exponential point: one native histogram); and
the ``/metrics`` of one host in prometheus-client's multiprocess mode, two worker processes with that
traffic. ``tests/test_scale.py`` checks the figures the fleet guide states.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdk import ChildSimulator, own_code_filters  # benchmarks/sdk.py: the simulator in a child process

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from llmtap._drive import Sdk
    from llmtap.simulator import Simulator

STREAMS_PER_CLIENT = 200
CONNECTIONS_PER_SIMULATOR = 2500
PROMPT = "Say hello."

# The child simulator: a larger listen backlog (10k clients connect at once; the default 128 would make the
# kernel drop SYNs and the clients retry after 1 s, 3 s, ...) and every file descriptor the hard limit allows.
# It answers "totals" on stdin with what it served, as JSON.
_SIM_CHILD = """
import collections, json, resource, sys, threading
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
threading.stack_size(256 * 1024)
from llmtap.simulator import Simulator
from llmtap.simulator import _server
_server._HTTPServer.request_queue_size = 4096
sim = Simulator().start()
print(sim.base_url, flush=True)
for line in sys.stdin:
    served = [s for s in sim.served if s.api != "health"]
    totals = {
        "requests": len(served),
        "outcomes": dict(collections.Counter(s.outcome_sent for s in served)),
        "streams": sum(s.stream for s in served),
        "input_tokens": sum(s.input_tokens for s in served),
        "output_tokens": sum(s.output_tokens for s in served),
        "deltas": sum(s.deltas_sent for s in served),
    }
    print(json.dumps(totals), flush=True)
sim.stop()
"""


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (one socket per open stream); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class ScaleSimulator(ChildSimulator):
    """``llmtap.simulator.Simulator`` in a child process (its own GIL and threads), with served totals."""

    def __init__(self) -> None:
        super().__init__(_SIM_CHILD)

    def totals(self) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("totals\n")
        self._proc.stdin.flush()
        result: dict[str, Any] = json.loads(self._proc.stdout.readline())
        return result

    def wait_totals(self, requests: int, timeout: float = 30.0) -> dict[str, Any]:
        """The totals once ``requests`` requests have been recorded (the client can see an end first)."""
        deadline = time.monotonic() + timeout
        while True:
            totals = self.totals()
            if totals["requests"] >= requests or time.monotonic() > deadline:
                return totals
            time.sleep(0.05)


class SimulatorGroup:
    """Several child simulators: one simulator process serves a thread per connection, and at about 9,000
    concurrent connections it spends its time in the kernel (measured: 86 % system time, no progress), so
    ``make scale`` spreads the connections over processes of at most CONNECTIONS_PER_SIMULATOR each."""

    def __init__(self, count: int) -> None:
        self.sims: list[ScaleSimulator] = []
        try:
            for _ in range(count):
                self.sims.append(ScaleSimulator())
        except BaseException:
            self.close()
            raise
        self.base_urls = [sim.base_url for sim in self.sims]

    def wait_totals(self, requests: int, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            parts = [sim.totals() for sim in self.sims]
            total: dict[str, Any] = {"outcomes": Counter()}
            for part in parts:
                total["outcomes"].update(part["outcomes"])
                for key in ("requests", "streams", "input_tokens", "output_tokens", "deltas"):
                    total[key] = total.get(key, 0) + part[key]
            if total["requests"] >= requests or time.monotonic() > deadline:
                total["outcomes"] = dict(total["outcomes"])
                return total
            time.sleep(0.05)

    def close(self) -> None:
        for sim in self.sims:
            sim.close()

    def __enter__(self) -> SimulatorGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def samples(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The sum of every sample called ``name`` whose labels include ``labels``."""
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


@dataclass
class Report:
    streams: int
    threads: int
    calls_per_thread: int
    served: dict[str, Any] = field(default_factory=dict)
    llmtap: dict[str, Any] = field(default_factory=dict)
    in_flight_peak: float = 0.0
    in_flight_end: float = 0.0
    llmtap_bytes_open: int = 0
    #: the files whose allocations ``llmtap_bytes_open`` counts
    llmtap_files: list[str] = field(default_factory=list)
    traced: int = 0
    seconds_async: float = 0.0
    seconds_threads: float = 0.0
    mismatches: list[str] = field(default_factory=list)

    @property
    def bytes_per_stream(self) -> float:
        return self.llmtap_bytes_open / max(1, self.traced)


MEMORY_BUDGET_PER_STREAM = 16 * 1024
"""Bytes llmtap's code may hold per open stream (``make scale`` fails above it; measured: ~3 KB)."""


def _llmtap_bytes() -> tuple[int, list[str]]:
    """Bytes held by allocations in llmtap's code, and the files that made them."""
    stats = tracemalloc.take_snapshot().filter_traces(own_code_filters()).statistics("filename")
    return sum(stat.size for stat in stats), sorted({stat.traceback[0].filename for stat in stats})


async def _open_streams(clients: Sequence[Sdk], count: int, tokens: int, traced: int) -> tuple[float, int, list[str]]:
    """Open ``count`` streams, read each to its first content delta and hold them all open (the driver's
    ``hold``), then read them all to the end. tracemalloc runs only while the last ``traced`` streams open
    (it slows every allocation of the process several-fold). Returns the in-flight gauge while all were open
    and the bytes that allocations in llmtap's code made during the traced openings still hold then."""
    from llmtap._drive import arun

    opened = 0
    target = 0
    reached = asyncio.Event()
    release = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def one(sdk: Sdk) -> None:
        nonlocal opened
        result = await arun(sdk, "hold", "claude-scale", headers=_scenario(tokens), early=1)
        if result.error is not None:
            raise result.error
        stream, events = result.value
        async with stream:
            opened += 1
            if opened >= target:
                reached.set()
            await release.wait()
            async for _event in events:
                pass

    async def open_more(n: int) -> None:
        nonlocal target
        target = opened + n
        reached.clear()
        first = len(tasks)
        tasks.extend([asyncio.create_task(one(clients[(first + i) % len(clients)])) for i in range(n)])
        waiter = asyncio.create_task(reached.wait())
        pending: set[asyncio.Task[Any]] = {waiter, *tasks}
        while not waiter.done():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not waiter and task.exception() is not None:
                    release.set()
                    raise task.exception()  # type: ignore[misc]

    if count > traced:
        await open_more(count - traced)
    held = 0
    files: list[str] = []
    if traced:
        tracemalloc.start()
        try:
            await open_more(traced)
            held, files = _llmtap_bytes()
        finally:
            tracemalloc.stop()
    gauge = _IN_FLIGHT()
    release.set()
    await asyncio.gather(*tasks)
    return gauge, held, files


_IN_FLIGHT: Any = None


def _scenario(tokens: int) -> dict[str, str]:
    return {"x-llmtap-sim": f"tokens={tokens}"}


@contextmanager
def instrumented(base_urls: Sequence[str]) -> Iterator[CollectorRegistry]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    import llmtap

    registry = CollectorRegistry()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=1 << 16))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    llmtap.instrument(
        llmtap.Settings(base_urls=tuple(base_urls)),
        registry=registry,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    try:
        yield registry
    finally:
        llmtap.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def run(streams: int, threads: int, calls_per_thread: int, tokens: int = 20, *, traced: int = 1000) -> Report:
    """The scale check; see the module docstring. Never raises on a mismatch: see ``Report.mismatches``."""
    import anthropic
    import httpx2

    from llmtap._drive import Action, Config, adapter, run

    global _IN_FLIGHT
    raise_fd_limit()
    report = Report(streams, threads, calls_per_thread)
    sims = -(-(streams + threads) // CONNECTIONS_PER_SIMULATOR)
    with SimulatorGroup(sims) as group, instrumented(group.base_urls) as registry:
        _IN_FLIGHT = lambda: samples(registry, "llmtap_streams_in_flight")  # noqa: E731
        # 1. many concurrent async streams (one connection each)
        limits = httpx2.Limits(max_connections=STREAMS_PER_CLIENT, max_keepalive_connections=STREAMS_PER_CLIENT)
        started = time.perf_counter()
        traced = min(traced, streams)

        async def main() -> tuple[float, int, list[str]]:
            # httpcore's pool scans all its connections for every request (quadratic in connections per
            # client), so the streams are spread over clients of STREAMS_PER_CLIENT connections each.
            def http() -> dict[str, Any]:  # one pool per client
                return {"http_client": anthropic.DefaultAsyncHttpxClient(limits=limits, timeout=300, verify=False)}

            clients = [
                adapter("anthropic", Config(group.base_urls[i % sims], "async", api_key="scale", timeout=300,
                                            options=http()))
                for i in range(-(-streams // STREAMS_PER_CLIENT))
            ]  # fmt: skip
            try:
                return await _open_streams(clients, streams, tokens, traced)
            finally:
                for client in clients:
                    await client.close()

        report.in_flight_peak, report.llmtap_bytes_open, report.llmtap_files = asyncio.run(main())
        report.traced = traced
        report.seconds_async = time.perf_counter() - started

        # 2. many threads sharing one sync client: streams and non-streaming calls, alternately
        started = time.perf_counter()
        limits = httpx2.Limits(max_connections=threads, max_keepalive_connections=threads)
        http = {"http_client": anthropic.DefaultHttpxClient(limits=limits)}
        client = adapter("anthropic", Config(group.base_urls[0], api_key="scale", timeout=60, options=http))
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            for call in range(calls_per_thread):
                action: Action = "stream" if (index + call) % 2 else "create"
                error = run(client, action, "claude-scale", headers=_scenario(tokens), prompt=PROMPT).error
                if error is not None:
                    errors.append(error)
                    return

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        client.close()
        report.seconds_threads = time.perf_counter() - started
        if errors:
            raise errors[0]

        expected = streams + threads * calls_per_thread
        report.served = group.wait_totals(expected)
        report.in_flight_end = samples(registry, "llmtap_streams_in_flight")
        report.llmtap = {
            "attempts": samples(registry, "llmtap_attempts_total"),
            "streams": {
                outcome: samples(registry, "llmtap_streams_total", outcome=outcome)
                for outcome in report.served["outcomes"]
            },
            "input_tokens": samples(registry, "llmtap_tokens_total", gen_ai_token_type="input"),
            "output_tokens": samples(registry, "llmtap_tokens_total", gen_ai_token_type="output"),
        }
    report.mismatches = compare(report, expected)
    return report


def compare(report: Report, expected: int) -> list[str]:
    served, seen = report.served, report.llmtap
    problems: list[str] = []
    if served["requests"] != expected:
        problems.append(f"the simulator served {served['requests']} requests, {expected} were sent")
    if seen["attempts"] != served["requests"]:
        problems.append(f"llmtap counted {seen['attempts']:.0f} attempts, the simulator served {served['requests']}")
    streams_completed = served["outcomes"].get("completed", 0) - (served["requests"] - served["streams"])
    if seen["streams"].get("completed", 0) != streams_completed:
        problems.append(f"llmtap counted {seen['streams']} streams, the simulator completed {streams_completed}")
    for key in ("input_tokens", "output_tokens"):
        if seen[key] != served[key]:
            problems.append(f"llmtap counted {seen[key]:.0f} {key}, the simulator served {served[key]}")
    if report.in_flight_end != 0:
        problems.append(f"llmtap_streams_in_flight is {report.in_flight_end} after the end")
    if report.in_flight_peak != report.streams:
        problems.append(f"llmtap_streams_in_flight was {report.in_flight_peak} with {report.streams} streams open")
    return problems


SERIES_SDKS = ("anthropic", "openai-chat", "gemini")
"""The three providers of ``--series`` (keys of ``llmtap._drive.SDKS``)."""


@dataclass
class Series:
    """What one process exports after a traffic mix (see ``--series``)."""

    models: int
    providers: int
    exposition_samples: int = 0
    """Lines of the ``/metrics`` text exposition that are samples: each is one series."""
    exposition_bytes: int = 0
    exposition_histogram_samples: int = 0
    """Of those, the histograms' (``_bucket``, ``_sum``, ``_count``)."""
    otlp_points: dict[str, int] = field(default_factory=dict)
    """OTLP data points by histogram aggregation (``explicit``, ``exponential``)."""
    otlp_series: dict[str, int] = field(default_factory=dict)
    """The series those points become in Prometheus (``target_info`` included), by aggregation."""
    host_samples: int = 0
    """The samples of one host's ``/metrics`` in prometheus-client's multiprocess mode, :data:`HOST_WORKERS`
    worker processes each with the same traffic (0: not measured)."""


HOST_WORKERS = 2
"""Worker processes of the multiprocess-mode host ``--series`` measures (each one's label sets are the same:
more workers add no series, only time)."""


RULE_HISTOGRAMS = frozenset(
    {"llmtap.call.duration", "llmtap.call.time_to_first_token", "llmtap.context_window.utilization"}
)
"""The histograms the shipped alert and SLO rules read (``_count``; ``_bucket{le=...}``, exact on explicit
buckets, an estimate on native ones): kept explicit in the fleet guide's mixed recipe, every other one
exponential (``tests/test_scale.py`` checks it against the rules)."""


def _prometheus_series(request: Any, native: frozenset[str] = frozenset()) -> tuple[int, int]:
    """The data points of an OTLP ``ExportMetricsServiceRequest`` and the Prometheus series they become (the
    Collector's and Prometheus' OTLP translation: a sum or gauge point is one series, an explicit-bucket
    histogram point one ``_bucket`` per bucket plus ``_sum`` and ``_count``, an exponential one a native
    histogram; one ``target_info`` per resource). ``native``: explicit-bucket histograms counted as if they
    were exponential (one series a point)."""
    points = series = 0
    for resource_metrics in request.resource_metrics:
        series += 1  # target_info
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    points += 1
                    classic = kind == "histogram" and metric.name not in native
                    series += len(point.bucket_counts) + 2 if classic else 1
    return points, series


def drive_series(sim: Simulator, models: int, sdks: Sequence[str]) -> None:
    """``--series``' traffic: per SDK of ``sdks`` and model, one completed stream and one non-streaming call."""
    from llmtap._drive import Config, adapter, run

    for name in sdks:
        sdk = adapter(name, Config(base_url=sim.base_url))
        try:
            for m in range(models):
                for action in ("stream", "create"):
                    result = run(sdk, action, f"model-{m}", headers=_scenario(4))
                    if result.error is not None:
                        raise result.error
        finally:
            sdk.close()
    sim.wait_served(len(sdks) * models * 2)


_SERIES_WORKER = """
import sys
sys.path.insert(0, sys.argv[1])
import llmtap, scale
from llmtap.simulator import Simulator
with Simulator() as sim:
    llmtap.instrument(llmtap.Settings(base_urls=(sim.base_url,), traces=False))
    try:
        scale.drive_series(sim, int(sys.argv[2]), scale.SERIES_SDKS[: int(sys.argv[3])])
    finally:
        llmtap.uninstrument()
"""
"""One worker of a host in prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before it
starts, as the mode requires), driving ``--series``' traffic."""


def measure_host_series(workers: int, models: int, sdks: int) -> int:
    """The series of one host's ``/metrics`` in prometheus-client's multiprocess mode, ``workers`` worker
    processes each driving ``models`` models through the first ``sdks`` of :data:`SERIES_SDKS` (as one scrape
    of the example's ``/metrics`` sees them: ``MultiProcessCollector`` over the directory)."""
    import subprocess
    import tempfile

    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": directory}
        here = os.path.dirname(os.path.abspath(__file__))
        for _ in range(workers):
            argv = [sys.executable, "-c", _SERIES_WORKER, here, str(models), str(sdks)]
            subprocess.run(argv, env=env, check=True, timeout=300)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        text = generate_latest(registry).decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def measure_series(models: int, sdks: Sequence[str]) -> Series:
    """Drive ``models`` models through each SDK of ``sdks`` (one completed stream and one non-streaming call
    each) with the Prometheus exporter and the OpenTelemetry one on (two readers: explicit-bucket and
    exponential histograms), and count what one process exports."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import Histogram, MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry, generate_latest

    import llmtap
    from llmtap._core.metrics import HISTOGRAM, INSTRUMENTS
    from llmtap.simulator import Simulator

    readers = {
        "explicit": InMemoryMetricReader(),
        "exponential": InMemoryMetricReader(preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()}),
    }
    provider = MeterProvider(metric_readers=list(readers.values()), resource=Resource.create({"service.name": "w"}))
    registry = CollectorRegistry()
    report = Series(models, len(sdks))
    with Simulator() as sim:
        llmtap.instrument(
            llmtap.Settings(base_urls=(sim.base_url,), traces=False), registry=registry, meter_provider=provider
        )
        try:
            drive_series(sim, models, sdks)
            text = generate_latest(registry)
            for aggregation, reader in readers.items():
                data = reader.get_metrics_data()
                assert data is not None
                request = encode_metrics(data)
                report.otlp_points[aggregation], report.otlp_series[aggregation] = _prometheus_series(request)
                if aggregation == "explicit":  # the mixed recipe: every histogram exponential but the rules'
                    histograms = {
                        m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                    }
                    _, report.otlp_series["mixed"] = _prometheus_series(
                        request, frozenset(histograms - RULE_HISTOGRAMS)
                    )
        finally:
            llmtap.uninstrument()
            provider.shutdown()
    report.exposition_bytes = len(text)
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    report.exposition_samples = len(lines)
    histograms = {i.prometheus() for i in INSTRUMENTS if i.kind == HISTOGRAM}
    report.exposition_histogram_samples = sum(
        1 for line in lines if re.sub(r"_(bucket|sum|count)$", "", line.split("{")[0].split()[0]) in histograms
    )
    return report


def print_series(reports: Sequence[Series], workers: int = 1000, per_host: int = 8) -> None:
    """The measured series per process, and what a fleet of ``workers`` adds (one series per process, or per
    host of ``per_host`` workers where prometheus-client's multiprocess mode sums a host's workers)."""
    for r in reports:
        print(
            f"{r.models} model(s) x {r.providers} provider(s): /metrics {r.exposition_samples:,} series "
            f"({r.exposition_histogram_samples:,} of them histograms', {r.exposition_bytes:,} B); "
            f"OTLP explicit {r.otlp_points['explicit']:,} points -> "
            f"{r.otlp_series['explicit']:,} series; OTLP exponential {r.otlp_points['exponential']:,} points -> "
            f"{r.otlp_series['exponential']:,} series; "
            f"mixed (the rules' {len(RULE_HISTOGRAMS)} explicit) {r.otlp_series['mixed']:,}"
        )
        hosts = -(-workers // per_host)
        print(
            f"  one host of {HOST_WORKERS} workers in multiprocess mode: /metrics {r.host_samples:,} series"
            f"\n  x {workers:,} workers: per process {workers * r.exposition_samples:,} (/metrics), "
            f"{workers * r.otlp_series['explicit']:,} (OTLP explicit), {workers * r.otlp_series['exponential']:,} "
            f"(OTLP exponential), {workers * r.otlp_series['mixed']:,} (mixed); "
            f"multiprocess mode, {hosts} hosts of {per_host}: {hosts * r.host_samples:,}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", action="store_true", help="count the series one process exports, and exit")
    parser.add_argument("--streams", type=int, default=10_000, help="concurrent async streams (default 10,000)")
    parser.add_argument("--threads", type=int, default=64, help="threads sharing one sync client (default 64)")
    parser.add_argument("--calls", type=int, default=20, help="calls per thread (default 20)")
    parser.add_argument("--tokens", type=int, default=20, help="content deltas per response (default 20)")
    parser.add_argument("--traced", type=int, default=1000, help="streams opened under tracemalloc (default 1,000)")
    args = parser.parse_args(argv)
    if args.series:
        reports = [measure_series(1, SERIES_SDKS[:1]), measure_series(10, SERIES_SDKS)]
        for r in reports:
            r.host_samples = measure_host_series(HOST_WORKERS, r.models, r.providers)
        print_series(reports)
        return 0
    print(f"fd limit {raise_fd_limit()}; {args.streams:,} async streams, {args.threads} threads x {args.calls} calls")
    report = run(args.streams, args.threads, args.calls, args.tokens, traced=args.traced)
    served = report.served
    print(f"async streams: {report.seconds_async:.1f} s; threads: {report.seconds_threads:.1f} s")
    print(
        f"simulator served {served['requests']:,} requests ({served['streams']:,} streams), outcomes "
        f"{dict(Counter(served['outcomes']))}, {served['input_tokens']:,} input / {served['output_tokens']:,} "
        "output tokens"
    )
    print(
        f"llmtap counted {report.llmtap['attempts']:,.0f} attempts, streams {report.llmtap['streams']}, "
        f"{report.llmtap['input_tokens']:,.0f} input / {report.llmtap['output_tokens']:,.0f} output tokens"
    )
    print(f"llmtap_streams_in_flight: {report.in_flight_peak:,.0f} with all open, {report.in_flight_end:.0f} at end")
    print(
        f"memory held by llmtap's code for the last {report.traced:,} of {report.streams:,} open streams: "
        f"{report.llmtap_bytes_open:,} B, {report.bytes_per_stream:,.0f} B per in-flight stream (tracemalloc)"
    )
    problems = list(report.mismatches)
    if report.bytes_per_stream > MEMORY_BUDGET_PER_STREAM:
        problems.append(f"{report.bytes_per_stream:,.0f} B per open stream, budget {MEMORY_BUDGET_PER_STREAM:,} B")
    for problem in problems:
        print("MISMATCH:", problem)
    print("PASS" if not problems else "FAIL")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
