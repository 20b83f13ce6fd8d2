"""Soak with exact accounting: many mixed streams (threads and async tasks, every outcome class,
retries) through the real Anthropic SDK against the simulator, then the simulator's own tally is
compared with llmtap's counters, exactly.

``make test`` runs a reduced soak (``LLMTAP_SOAK_STREAMS``, default 600 logical calls); ``make soak``
runs 10,000 and reports the tracemalloc slope of memory allocated in llmtap's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from prometheus_client import CollectorRegistry

import llmtap
from llmtap import Outcome
from llmtap._instrumentor import LlmtapInstrumentor
from llmtap._log import internal_errors
from llmtap._record import AttemptRecord, AttemptStart, CallRecord
from llmtap.simulator import Scenario, Simulator

READ_TIMEOUT = httpx2.Timeout(10.0, read=0.05)  # only the read times out: the request always arrives
STREAMS = int(os.environ.get("LLMTAP_SOAK_STREAMS", "600"))
REQUEST: dict[str, Any] = {"model": "claude-soak", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}


@dataclass(frozen=True)
class Plan:
    """One logical call: how the server answers and what the app does."""

    kind: str
    scenario: Scenario
    outcomes: tuple[Outcome, ...]  # of its attempts, in order

    @property
    def attempts(self) -> int:
        return len(self.outcomes)


C, E = Outcome.COMPLETED, Outcome.SERVER_ERROR
PLANS: dict[str, tuple[Plan, float]] = {
    "completed": (Plan("completed", Scenario(tokens=6), (C,)), 0.30),
    "retry_529": (Plan("retry_529", Scenario(tokens=4, fail=1, fail_status=529, retry_after=0.001), (E, C)), 0.08),
    "retry_429": (Plan("retry_429", Scenario(tokens=4, fail=2, fail_status=429, retry_after=0.001), (E, E, C)), 0.04),
    "error_event": (Plan("error_event", Scenario(tokens=6, error_event_at=2), (E,)), 0.10),
    "drop": (Plan("drop", Scenario(tokens=6, drop_at=2), (Outcome.CONNECTION_ERROR,)), 0.10),
    "no_stop": (Plan("no_stop", Scenario(tokens=6, no_stop=True), (Outcome.INCOMPLETE,)), 0.10),
    # the server pauses after 3 deltas, so the end of the stream cannot have arrived when the app leaves
    "close": (Plan("close", Scenario(tokens=20, stall_at=3, stall=3.0), (Outcome.CLIENT_CLOSED,)), 0.10),
    "drop_unread": (Plan("drop_unread", Scenario(tokens=21, stall_at=3, stall=3.0), (Outcome.ABANDONED,)), 0.06),
    "cancel": (Plan("cancel", Scenario(tokens=22, stall_at=3, stall=3.0), (Outcome.CANCELLED,)), 0.06),
    "timeout": (Plan("timeout", Scenario(headers_delay=2.0), (Outcome.TIMEOUT,)), 0.03),
    "nonstream": (Plan("nonstream", Scenario(tokens=6), (C,)), 0.03),
}


def plans(total: int, seed: int = 7) -> list[tuple[Plan, bool]]:
    """``total`` plans, every kind present, each run in a thread (False) or as an async task (True)."""
    rng = random.Random(seed)
    kinds = list(PLANS)
    weights = [w for _, w in PLANS.values()]
    chosen = kinds + rng.choices(kinds, weights, k=max(total - len(kinds), 0))
    out = []
    for n, kind in enumerate(chosen[:total]):
        asynchronous = n % 2 == 1 or kind == "cancel"
        out.append((PLANS[kind][0], asynchronous and kind != "drop_unread"))
    return out


# -- the app ------------------------------------------------------------------------------------------


APP_SAW: Counter[tuple[str, str]] = Counter()  # (kind, what the app got), for diagnostics


def run_sync(clients: dict[str, anthropic.Anthropic], plan: Plan) -> None:
    client: Any = clients["timeout" if plan.kind == "timeout" else "retrying"]
    extra = {"extra_headers": plan.scenario.headers()}
    try:
        if plan.kind == "nonstream":
            client.messages.create(**REQUEST, **extra)
            return
        stream = client.messages.create(**REQUEST, stream=True, **extra)
        if plan.kind == "close":
            for n, _ in enumerate(stream):
                if n == 2:
                    break
            stream.close()
        elif plan.kind == "drop_unread":
            iterator = iter(stream)
            next(iterator)
            next(iterator)
            del iterator, stream  # the generator is finalised: the SDK closes the response in a finally
        else:
            for _ in stream:
                pass
        APP_SAW[(plan.kind, "ok")] += 1
    except (anthropic.APIError, httpx2.HTTPError) as exc:  # what the app sees of error events, drops, timeouts
        APP_SAW[(plan.kind, type(exc).__name__)] += 1


async def run_async(clients: dict[str, anthropic.AsyncAnthropic], plan: Plan) -> None:
    client: Any = clients["timeout" if plan.kind == "timeout" else "retrying"]
    extra = {"extra_headers": plan.scenario.headers()}
    try:
        if plan.kind == "nonstream":
            await client.messages.create(**REQUEST, **extra)
            return
        stream = await client.messages.create(**REQUEST, stream=True, **extra)
        if plan.kind == "close":
            n = 0
            async for _ in stream:
                n += 1
                if n == 3:
                    break
            await stream.close()
        elif plan.kind == "cancel":
            started = asyncio.Event()

            async def read() -> None:
                async for _ in stream:
                    started.set()

            task = asyncio.create_task(read())
            await started.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        else:
            async for _ in stream:
                pass
        APP_SAW[(plan.kind, "ok")] += 1
    except (anthropic.APIError, httpx2.HTTPError) as exc:  # what the app sees of error events, drops, timeouts
        APP_SAW[(plan.kind, type(exc).__name__)] += 1


# -- accounting ---------------------------------------------------------------------------------------


class Tally:
    """A sink that keeps counts only (keeping the records would be the memory growth we measure)."""

    name = "tally"

    def __init__(self) -> None:
        self.outcomes: Counter[Outcome] = Counter()
        self.by_status: Counter[tuple[str, int | None]] = Counter()
        self.unanswered: Counter[tuple[str, str | None]] = Counter()
        self.completed_output_tokens = 0
        self.attempts = self.calls = 0
        self._cond = threading.Condition()

    def start(self, attempt: AttemptStart) -> object:
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        with self._cond:
            self.attempts += 1
            self.outcomes[record.outcome] += 1
            self.by_status[(record.outcome.value, record.status_code)] += 1
            if record.status_code is None:
                self.unanswered[(record.outcome.value, record.error_type)] += 1
            if record.outcome is Outcome.COMPLETED:
                self.completed_output_tokens += record.usage.output_tokens or 0
            self._cond.notify_all()

    def call_end(self, record: CallRecord) -> None:
        with self._cond:
            self.calls += 1
            self._cond.notify_all()

    def wait(self, attempts: int, calls: int, timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.attempts >= attempts and self.calls >= calls, timeout):
                raise TimeoutError(f"{self.attempts} of {attempts} attempts, {self.calls} of {calls} calls ended")


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
    from tests.test_scale import _load_scale  # benchmarks/sdk.py via scale.py

    own = snapshot.filter_traces(_load_scale().own_code_filters())
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


def soak(total: int, trace_memory: bool) -> SoakResult:
    work = plans(total)
    registry = CollectorRegistry()
    spans = OpenSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(spans)
    recording = Tally()
    errors_before = internal_errors()
    memory: list[tuple[int, int]] = []
    APP_SAW.clear()
    with Simulator() as sim:
        instrumentor = LlmtapInstrumentor()
        instrumentor.instrument(
            settings=llmtap.Settings(base_urls=(sim.base_url,), otel_metrics=False),
            registry=registry,
            tracer_provider=tracer_provider,
            extra_sinks=[recording],
        )
        sync_clients = {
            "retrying": anthropic.Anthropic(api_key="k", base_url=sim.base_url, max_retries=3),
            "timeout": anthropic.Anthropic(api_key="k", base_url=sim.base_url, max_retries=0, timeout=READ_TIMEOUT),
        }
        done = [0]
        lock = threading.Lock()
        if trace_memory:
            tracemalloc.start(1)

        def finished() -> None:
            with lock:
                done[0] += 1
                if trace_memory and done[0] % max(total // 10, 1) == 0:
                    memory.append((done[0], _own_bytes(tracemalloc.take_snapshot())))

        def sync_one(plan: Plan) -> None:
            run_sync(sync_clients, plan)
            finished()

        async def async_all(items: list[Plan]) -> None:
            clients = {
                "retrying": anthropic.AsyncAnthropic(api_key="k", base_url=sim.base_url, max_retries=3),
                "timeout": anthropic.AsyncAnthropic(
                    api_key="k", base_url=sim.base_url, max_retries=0, timeout=READ_TIMEOUT
                ),
            }
            gate = asyncio.Semaphore(12)

            async def one(plan: Plan) -> None:
                async with gate:
                    await run_async(clients, plan)
                finished()

            await asyncio.gather(*(one(p) for p in items))
            for client in clients.values():
                await client.close()

        started = time.perf_counter()
        try:
            loop_thread = threading.Thread(target=asyncio.run, args=(async_all([p for p, a in work if a]),))
            loop_thread.start()
            with ThreadPoolExecutor(6) as pool:
                list(pool.map(sync_one, [p for p, a in work if not a]))
            loop_thread.join()
            if trace_memory:
                tracemalloc.stop()  # the accounting below is not measured (and would crawl under it)
            attempts = sum(p.attempts for p, _ in work)
            recording.wait(attempts, calls=total, timeout=120)
            try:
                served = sim.wait_served(attempts, timeout=60)
            except TimeoutError:
                _missing(work, sim.served, recording)
                raise
            seconds = time.perf_counter() - started
            result = SoakResult(work, served, registry, recording, spans, memory, seconds, errors_before)
            _check(result)  # before uninstrumenting: that unregisters the metrics
        finally:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
            for client in sync_clients.values():
                client.close()
            instrumentor.uninstrument()
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


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _check(result: SoakResult) -> None:
    try:
        _check_exact(result)
    except AssertionError:
        print("soak: llmtap records", result.recording.by_status)
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
    assert _sample(registry, "llmtap_attempts_total") == attempts
    statuses = Counter(s.status for s in served)
    for status in (429, 529):
        assert _sample(registry, "llmtap_attempts_total", status_code=str(status)) == statuses[status]
    timeouts = expected[Outcome.TIMEOUT]
    assert _sample(registry, "llmtap_attempts_total", status_code="200") == statuses[200] - timeouts
    assert _sample(registry, "llmtap_attempts_total", status_code="") == timeouts
    for outcome in Outcome:
        assert _sample(registry, "llmtap_streams_total", outcome=outcome.value) == streamed_expected[outcome], outcome
    assert +result.recording.outcomes == +expected
    retries = sum(p.attempts - 1 for p, _ in work)
    assert _sample(registry, "llmtap_retries_total") == retries
    assert _sample(registry, "llmtap_call_duration_seconds_count") == len(work)
    # nothing left open
    assert _sample(registry, "llmtap_streams_in_flight") == 0
    assert result.spans.started == result.spans.ended == attempts
    assert internal_errors() == result.errors_before
    # output tokens: what the simulator sent for completed attempts equals what llmtap counted
    sent = sum(s.output_tokens for s in served if s.outcome_sent == "completed")
    counted = result.recording.completed_output_tokens
    assert counted == sent


@pytest.fixture(scope="module")
def soaked() -> Iterator[SoakResult]:
    yield soak(STREAMS, trace_memory=STREAMS >= 2000)


def test_soak_accounting_is_exact(soaked: SoakResult) -> None:
    kinds = Counter(p.kind for p, _ in soaked.plans)
    assert set(kinds) == set(PLANS)  # every outcome class, both modes
    assert {a for _, a in soaked.plans} == {True, False}
    attempts = sum(p.attempts for p, _ in soaked.plans)
    line = f"\nsoak: {len(soaked.plans)} calls, {attempts} attempts in {soaked.seconds:.1f}s, accounting exact"
    if soaked.memory:
        half = soaked.memory[len(soaked.memory) // 2 :]
        line += (
            f"; llmtap-allocated memory {soaked.memory[0][1]} -> {soaked.memory[-1][1]} bytes, "
            f"slope {_slope(soaked.memory):.0f} B/1000 streams overall, {_slope(half):.0f} over the second half"
        )
        assert _slope(half) < 4096, soaked.memory  # flat: caches are bounded, nothing grows per stream
    print(line)
