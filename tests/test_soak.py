"""Soak with exact accounting: many mixed streams (threads and async tasks, every outcome class,
retries) through the real Anthropic SDK against the simulator, then the simulator's own tally is
compared with llmtap's counters, exactly.

It runs under garbage-collector pressure (aggressive thresholds, the heap alive at the start frozen
out of view so full collections come often), and some streams the app abandons in reference cycles,
so only the cyclic collector finds them, on whatever thread allocates at that moment, possibly one
that holds a lock llmtap's ending needs. Nothing of llmtap's may run inside the collector: the test's
sink counts the calls it gets from inside a collection (there must be none), and a watchdog fails
the run, with every thread's stack, when nothing progresses for ``LLMTAPTEST_SOAK_STALL`` seconds
(default 60).

``make test`` runs a reduced soak (``LLMTAPTEST_SOAK_STREAMS``, default 600 logical calls); ``make soak``
runs 10,000 and reports the tracemalloc slope of memory allocated in llmtap's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import random
import threading
import time
import tracemalloc
import warnings
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from prometheus_client import CollectorRegistry

import llmtap
from llmtap import Outcome
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord
from llmtap._drive import HELD as DRIVER_HELD
from llmtap._drive import Action, Config, Mode, Result, Sdk, adapter, arun, run
from llmtap._instrumentor import LlmtapInstrumentor
from llmtap._log import internal_errors
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import sample
from tests.support.gcwatch import InsideGc, Watchdog, gc_pressure
from tests.support.scripts import load_script

# Only the read times out, and only in the timeout kind: the request always arrives. Connecting is given
# as long as the watchdog gives a stall (the SDK's own 5 s is a timing tolerance: on a loaded machine,
# under collector pressure, a connect can wait longer, and the attempt that never reached the simulator
# would then be retried beside the plan).
CONNECT = 60.0
READ_TIMEOUT = httpx2.Timeout(CONNECT, read=0.05)
PATIENT = httpx2.Timeout(600.0, connect=CONNECT)
STREAMS = int(os.environ.get("LLMTAPTEST_SOAK_STREAMS", "600"))
THREADS = int(os.environ.get("LLMTAPTEST_SOAK_THREADS", "12"))  # sync workers; async tasks run 16 at a time
STALL = float(os.environ.get("LLMTAPTEST_SOAK_STALL", "60"))  # seconds without any progress: a hang
# objects the test's sink allocates under its lock per record (see Tally)
SINK_WORK = int(os.environ.get("LLMTAPTEST_SOAK_SINK_WORK", "2000"))
GC_THRESHOLD = tuple(int(n) for n in os.environ.get("LLMTAPTEST_SOAK_GC", "200,2,2").split(","))


@dataclass(frozen=True)
class Plan:
    """One logical call: how the server answers and what the app does."""

    kind: str
    scenario: Scenario
    outcomes: tuple[Outcome, ...]  # of its attempts, in order
    action: Action = "stream"  # what the app does with the call (llmtap._drive.ACTIONS)
    early: int = 2  # content pieces read before it leaves early (close, drop_read, hold)
    in_cycle: bool = False  # the app abandons the stream in a reference cycle (the server may finish it)
    modes: tuple[bool, ...] = (False, True)  # run in a thread (False), as an async task (True)

    @property
    def attempts(self) -> int:
        return len(self.outcomes)


C, E, A, R = Outcome.COMPLETED, Outcome.SERVER_ERROR, Outcome.ABANDONED, Outcome.REJECTED
HELD = DRIVER_HELD.replace(stall=600.0)  # the driver's held stream; 600 s: only a cap
PLANS: dict[str, tuple[Plan, float]] = {
    "completed": (Plan("completed", Scenario(tokens=6), (C,)), 0.30),
    "retry_529": (Plan("retry_529", Scenario(tokens=4, fail=1, fail_status=529, retry_after=0.001), (R, C)), 0.08),
    "retry_429": (Plan("retry_429", Scenario(tokens=4, fail=2, fail_status=429, retry_after=0.001), (R, R, C)), 0.04),
    "error_event": (Plan("error_event", Scenario(tokens=6, error_event_at=2), (E,)), 0.10),
    "drop": (Plan("drop", Scenario(tokens=6, drop_at=2), (Outcome.CONNECTION_ERROR,)), 0.10),
    "no_stop": (Plan("no_stop", Scenario(tokens=6, no_stop=True), (Outcome.INCOMPLETE,)), 0.10),
    # the server holds the stream after 3 deltas until the app has left (HELD), so its end cannot have
    # arrived before, however late the app's thread or loop is scheduled
    "close": (Plan("close", HELD.replace(tokens=20), (Outcome.CLIENT_CLOSED,), "close"), 0.10),
    # read into its first delta, then dropped: the SDK's generator is finalised and closes the response
    "drop_unread": (
        Plan("drop_unread", HELD.replace(tokens=21), (Outcome.ABANDONED,), "drop_read", early=1, modes=(False,)),
        0.06,
    ),
    "cancel": (
        Plan("cancel", HELD.replace(tokens=22), (Outcome.CANCELLED,), "cancel", modes=(True,)),
        0.06,
    ),
    "timeout": (Plan("timeout", Scenario(headers_delay=2.0), (Outcome.TIMEOUT,)), 0.03),
    "nonstream": (Plan("nonstream", Scenario(tokens=6), (C,), "create"), 0.03),
    # abandoned in a reference cycle: only the cyclic collector finds them. Unread (the SDK's generator
    # never started): nothing closes the response, llmtap's finaliser must end the attempt (and the
    # leaked pooled connection is the app's; kept few). Partly read (async only: a sync one would have
    # the collector close the response through httpcore's pool lock, the same hazard outside llmtap).
    "cycle_unread": (Plan("cycle_unread", Scenario(tokens=24), (A,), "hold", early=0, in_cycle=True), 0.02),
    "retry_cycle": (
        Plan(
            "retry_cycle",
            Scenario(tokens=26, fail=1, fail_status=429, retry_after=0.001),
            (R, A),
            "hold",
            early=0,
            in_cycle=True,
        ),
        0.01,
    ),
    "cycle_partly": (
        Plan("cycle_partly", HELD.replace(tokens=25), (A,), "hold", in_cycle=True, modes=(True,)),
        0.04,
    ),
}


def plans(total: int, seed: int = 7) -> list[tuple[Plan, bool]]:
    """``total`` plans, every kind present, each run in a thread (False) or as an async task (True)."""
    rng = random.Random(seed)
    kinds = list(PLANS)
    weights = [w for _, w in PLANS.values()]
    chosen = kinds + rng.choices(kinds, weights, k=max(total - len(kinds), 0))
    out = []
    for n, kind in enumerate(chosen[:total]):
        plan = PLANS[kind][0]
        asynchronous = n % 2 == 1
        out.append((plan, asynchronous if asynchronous in plan.modes else plan.modes[0]))
    return out


# -- the app ------------------------------------------------------------------------------------------


APP_SAW: Counter[tuple[str, str]] = Counter()  # (kind, what the app got), for diagnostics


class Cycles:
    """The streams the app abandoned in reference cycles, and how many the collector has found."""

    def __init__(self) -> None:
        self.abandoned = self.found = 0
        self._lock = threading.Lock()

    def abandon(self, *objects: Any) -> None:
        """Drop ``objects`` (the stream first) in a cycle: unreachable, yet not freed by reference counting."""
        holder: list[Any] = list(objects)
        holder.append(holder)
        weakref.finalize(objects[0], self._found)
        with self._lock:
            self.abandoned += 1

    def _found(self) -> None:  # runs inside the collector: one integer, no lock
        self.found += 1


CYCLES = Cycles()


def _saw(plan: Plan, result: Result) -> None:
    """What the app got: ok, a stream it abandoned in a cycle, or the error the SDK raised (its errors
    for error events, drops and timeouts; anything else is raised: the app would not have caught it)."""
    if result.error is not None:
        if not isinstance(result.error, anthropic.APIError | httpx2.HTTPError):
            raise result.error
        APP_SAW[(plan.kind, type(result.error).__name__)] += 1
    elif plan.action == "hold":
        CYCLES.abandon(*result.value)  # the stream (and its iterator, when read) in a reference cycle
        APP_SAW[(plan.kind, "abandoned")] += 1
    else:
        APP_SAW[(plan.kind, "ok")] += 1


def run_sync(clients: dict[str, Sdk], plan: Plan) -> None:
    client = clients["timeout" if plan.kind == "timeout" else "retrying"]
    # the model names the kind
    _saw(plan, run(client, plan.action, f"soak-{plan.kind}", headers=plan.scenario.headers(), early=plan.early))


async def run_async(clients: dict[str, Sdk], plan: Plan) -> None:
    client = clients["timeout" if plan.kind == "timeout" else "retrying"]
    result = await arun(client, plan.action, f"soak-{plan.kind}", headers=plan.scenario.headers(), early=plan.early)
    _saw(plan, result)


# -- accounting ---------------------------------------------------------------------------------------


class Tally:
    """A sink that keeps counts only (keeping the records would be the memory growth we measure).

    Its lock is a plain one and it allocates under it (``SINK_WORK`` objects per record, as a sink that
    formats or aggregates might), so collections often start on a thread that holds it: a collection
    must not call back into it (before llmtap handed such endings off, the soak hung within seconds).
    It counts the calls it gets from inside a collection, which must be none.
    """

    name = "tally"

    def __init__(self, inside: InsideGc) -> None:
        self.outcomes: Counter[Outcome] = Counter()
        self.by_status: Counter[tuple[str, int | None]] = Counter()
        self.unanswered: Counter[tuple[str, str | None]] = Counter()
        self.by_kind: Counter[tuple[str, str, int | None, str | None]] = Counter()
        self.completed_output_tokens = 0
        self.attempts = self.calls = self.inside_gc = 0
        self._inside = inside
        self._lock = threading.Lock()

    def start(self, attempt: AttemptStart) -> object:
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        inside = self._inside.now()
        with self._lock:
            if SINK_WORK:
                self._work = [(n, record) for n in range(SINK_WORK)]  # objects the collector tracks
            self.inside_gc += inside
            self.attempts += 1
            self.outcomes[record.outcome] += 1
            self.by_status[(record.outcome.value, record.status_code)] += 1
            self.by_kind[(record.request_model, record.outcome.value, record.status_code, record.error_type)] += 1
            if record.status_code is None:
                self.unanswered[(record.outcome.value, record.error_type)] += 1
            if record.outcome is Outcome.COMPLETED:
                self.completed_output_tokens += record.usage.output_tokens or 0

    def call_end(self, record: CallRecord) -> None:
        inside = self._inside.now()
        with self._lock:
            self.inside_gc += inside
            self.calls += 1

    def close(self) -> None:
        pass


class OpenSpans(SpanProcessor):
    """Counts spans started and ended: none may be left open."""

    def __init__(self) -> None:
        self.started = self.ended = 0
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        with self._lock:
            self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1


def _own_bytes(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes currently allocated by llmtap's own code (the simulator and tests excluded), attributed by
    the package's directory as ``make scale`` does (benchmarks/scale.py)."""
    own = snapshot.filter_traces(load_script("benchmarks/scale.py", "llmtap_bench_scale").own_code_filters())
    return sum(stat.size for stat in own.statistics("filename"))


def _slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of bytes over streams, in bytes per 1,000 streams."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


@dataclass
class SoakResult:
    plans: list[tuple[Plan, bool]]
    served: list[Any]
    registry: CollectorRegistry
    recording: Tally
    spans: OpenSpans
    memory: list[tuple[int, int]]
    seconds: float
    errors_before: dict[str, int]
    found_during_run: int  # streams abandoned in cycles that automatic collections found during the run
    collections: tuple[int, ...]  # automatic and explicit collections during the run, per generation


def _drain(registry: CollectorRegistry) -> None:
    """Find what the app abandoned in cycles, then scrape (the latest point at which llmtap counts it). The
    collection may close a client connection an abandoned stream held (the soak's, or one an earlier test's
    client left to the collector): its ``ResourceWarning`` is ignored, as the conftest's collections ignore it
    (llmtap opens no client sockets)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    for _ in registry.collect():
        pass


def _clients(base_url: str, mode: Mode) -> dict[str, Sdk]:
    """The app's anthropic clients: one retrying with patience, one with a short read timeout."""
    return {
        "retrying": adapter("anthropic", Config(base_url, mode, api_key="k", max_retries=3, timeout=PATIENT)),
        "timeout": adapter("anthropic", Config(base_url, mode, api_key="k", max_retries=0, timeout=READ_TIMEOUT)),
    }


def soak(total: int, trace_memory: bool) -> SoakResult:
    work = plans(total)
    attempts = sum(p.attempts for p, _ in work)
    registry = CollectorRegistry()
    spans = OpenSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(spans)
    inside = InsideGc()
    recording = Tally(inside)
    errors_before = internal_errors()
    memory: list[tuple[int, int]] = []
    APP_SAW.clear()
    global CYCLES
    CYCLES = Cycles()
    done = [0]
    failures: list[BaseException] = []  # what a worker raised that the app would not have caught
    lock = threading.Lock()
    cleanup = contextlib.ExitStack()
    watchdog: Watchdog | None = None
    try:
        sim = cleanup.enter_context(Simulator())
        instrumentor = LlmtapInstrumentor()
        instrumentor.instrument(
            settings=llmtap.Settings(base_urls=(sim.base_url,), otel_metrics=False),
            registry=registry,
            tracer_provider=tracer_provider,
            extra_sinks=[recording],
        )
        cleanup.callback(instrumentor.uninstrument)
        sync_clients = _clients(sim.base_url, "sync")
        for client in sync_clients.values():
            cleanup.callback(client.close)
        cleanup.enter_context(inside.installed())
        watchdog = cleanup.enter_context(
            Watchdog(lambda: (done[0], recording.attempts, recording.calls, len(sim.served)), STALL, "soak")
        )

        def finished() -> None:
            with lock:
                done[0] += 1
                if trace_memory and done[0] % max(total // 10, 1) == 0:
                    memory.append((done[0], _own_bytes(tracemalloc.take_snapshot())))

        def sync_worker(jobs: queue.SimpleQueue[Plan | None]) -> None:
            while (plan := jobs.get()) is not None:
                try:
                    run_sync(sync_clients, plan)
                except BaseException as exc:
                    failures.append(exc)
                finished()

        async def async_all(items: list[Plan]) -> None:
            clients = _clients(sim.base_url, "async")
            gate = asyncio.Semaphore(16)

            async def one(plan: Plan) -> None:
                async with gate:
                    await run_async(clients, plan)
                finished()

            await asyncio.gather(*(one(p) for p in items))
            gc.collect()  # generators abandoned in cycles are closed (by tasks) while this loop still runs
            for _ in range(5):
                await asyncio.sleep(0)
            for client in clients.values():
                await client.close()

        def run_loop(items: list[Plan]) -> None:
            try:
                asyncio.run(async_all(items))
            except BaseException as exc:
                failures.append(exc)

        collections_before = [s["collections"] for s in gc.get_stats()]
        started = time.perf_counter()
        with gc_pressure(GC_THRESHOLD):
            if trace_memory:
                tracemalloc.start(1)
            # daemon threads, waited for through the watchdog: a hang fails the run instead of the suite
            loop_thread = threading.Thread(
                target=run_loop, args=([p for p, a in work if a],), name="soak-loop", daemon=True
            )
            loop_thread.start()
            jobs: queue.SimpleQueue[Plan | None] = queue.SimpleQueue()
            for plan, asynchronous in work:
                if not asynchronous:
                    jobs.put(plan)
            for n in range(THREADS):
                jobs.put(None)
                threading.Thread(target=sync_worker, args=(jobs,), name=f"soak-sync-{n}", daemon=True).start()
            watchdog.wait_for(lambda: bool(failures) or (done[0] >= total and not loop_thread.is_alive()))
            if failures:
                raise failures[0]
            if trace_memory:
                tracemalloc.stop()  # the accounting below is not measured (and would crawl under it)
            found_during_run = CYCLES.found
        collections = tuple(s["collections"] - b for s, b in zip(gc.get_stats(), collections_before, strict=True))

        def settled() -> bool:
            _drain(registry)
            return recording.attempts >= attempts and recording.calls >= total

        watchdog.wait_for(settled)
        try:
            watchdog.wait_for(lambda: len(sim.served) >= attempts)
        except AssertionError:
            _missing(work, sim.served, recording)
            raise
        served = sim.wait_served(attempts)
        seconds = time.perf_counter() - started
        result = SoakResult(
            work, served, registry, recording, spans, memory, seconds, errors_before, found_during_run, collections
        )
        _check(result)  # before uninstrumenting: that unregisters the metrics
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        if watchdog is not None and watchdog.stalled is not None:
            # threads are stuck, perhaps on the locks the cleanup needs: clean up beside them, bounded
            closer = threading.Thread(target=cleanup.close, name="soak-cleanup", daemon=True)
            closer.start()
            closer.join(10.0)
        else:
            cleanup.close()
    return result


def _missing(work: list[tuple[Plan, bool]], served: list[Any], recording: Tally) -> None:
    """Print, per kind of call, attempts made against requests the simulator recorded."""
    by_scenario = {p.scenario: p.kind for p, _ in work}
    made: Counter[tuple[str, bool]] = Counter()
    for plan, asynchronous in work:
        made[(plan.kind, asynchronous)] += plan.attempts
    got = Counter(by_scenario.get(s.scenario, "?") for s in served)
    for kind in PLANS:
        sent = made[(kind, False)] + made[(kind, True)]
        if sent != got[kind]:
            print(f"soak: {kind}: {sent} attempts (sync {made[(kind, False)]}), simulator recorded {got[kind]}")
    print(f"soak: attempts without a response: {dict(recording.unanswered)}")
    _by_kind(recording)


def _by_kind(recording: Tally) -> None:
    print("soak: llmtap records by kind (model, outcome, status, error type):")
    for key, count in sorted(recording.by_kind.items(), key=str):
        print(f"    {key}: {count}")


def _check(result: SoakResult) -> None:
    try:
        _check_exact(result)
    except AssertionError:
        print("soak: llmtap records", result.recording.by_status)
        _by_kind(result.recording)
        print("soak: the app saw", sorted(APP_SAW.items()))
        print("soak: simulator served", Counter((s.status, s.outcome_sent) for s in result.served))
        raise


def _check_exact(result: SoakResult) -> None:
    work, served, registry = result.plans, result.served, result.registry
    attempts = sum(p.attempts for p, _ in work)
    expected = Counter(o for p, _ in work for o in p.outcomes)
    streamed_expected = Counter(o for p, _ in work if p.kind != "nonstream" for o in p.outcomes)
    # A read timeout is a race the app can lose on a loaded machine (its loop or thread not scheduled
    # for the whole headers delay): the app then gets its answer, and so must llmtap record it.
    late = APP_SAW[("timeout", "ok")]
    for counts in (expected, streamed_expected):
        counts[Outcome.TIMEOUT] -= late
        counts[Outcome.COMPLETED] += late
    # the simulator's tally and llmtap's, exactly
    assert len(served) == attempts
    assert sample(registry, "llmtap_attempts_total") == attempts
    statuses = Counter(s.status for s in served)
    for status in (429, 529):
        assert sample(registry, "llmtap_attempts_total", status_code=str(status)) == statuses[status]
    timeouts = expected[Outcome.TIMEOUT]
    assert sample(registry, "llmtap_attempts_total", status_code="200") == statuses[200] - timeouts
    assert sample(registry, "llmtap_attempts_total", status_code="") == timeouts
    for outcome in Outcome:
        assert sample(registry, "llmtap_streams_total", outcome=outcome.value) == streamed_expected[outcome], outcome
    assert +result.recording.outcomes == +expected
    # the collector found every stream abandoned in a cycle, some during the run (the positive control
    # of the next line), and llmtap ended none of their attempts inside it
    assert CYCLES.found == CYCLES.abandoned == sum(p.in_cycle for p, _ in work)
    assert result.found_during_run > 0, "no automatic collection found an abandoned stream: no GC pressure"
    assert result.recording.inside_gc == 0, (
        f"llmtap called a sink {result.recording.inside_gc} times from inside the garbage collector"
    )
    retries = sum(p.attempts - 1 for p, _ in work)
    assert sample(registry, "llmtap_retries_total") == retries
    assert sample(registry, "llmtap_call_duration_seconds_count") == len(work)
    # nothing left open
    assert sample(registry, "llmtap_streams_in_flight") == 0
    assert result.spans.started == result.spans.ended == attempts
    assert internal_errors() == result.errors_before
    # output tokens: what the simulator sent for completed attempts equals what llmtap counted (a body
    # the app abandoned unread in a cycle may be sent whole: the app never saw its end, nor llmtap)
    unread = {p.scenario for p, _ in work if p.in_cycle}
    sent = sum(s.output_tokens for s in served if s.outcome_sent == "completed" and s.scenario not in unread)
    counted = result.recording.completed_output_tokens
    assert counted == sent


@pytest.fixture(scope="module")
def soaked() -> Iterator[SoakResult]:
    yield soak(STREAMS, trace_memory=STREAMS >= 2000)


@pytest.mark.slow
def test_soak_accounting_is_exact(soaked: SoakResult) -> None:
    kinds = Counter(p.kind for p, _ in soaked.plans)
    assert set(kinds) == set(PLANS)  # every outcome class, both modes
    assert {a for _, a in soaked.plans} == {True, False}
    attempts = sum(p.attempts for p, _ in soaked.plans)
    line = (
        f"\nsoak: {len(soaked.plans)} calls, {attempts} attempts in {soaked.seconds:.1f}s, accounting exact; "
        f"{THREADS} threads + async; gc threshold {GC_THRESHOLD}, collections per generation "
        f"{soaked.collections}; {CYCLES.abandoned} streams abandoned in cycles, {soaked.found_during_run} "
        "found by automatic collections during the run, none ended inside the collector"
    )
    if soaked.memory:
        half = soaked.memory[len(soaked.memory) // 2 :]
        line += (
            f"; llmtap-allocated memory {soaked.memory[0][1]} -> {soaked.memory[-1][1]} bytes, "
            f"slope {_slope(soaked.memory):.0f} B/1000 streams overall, {_slope(half):.0f} over the second half"
        )
        assert _slope(half) < 4096, soaked.memory  # flat: caches are bounded, nothing grows per stream
    print(line)
