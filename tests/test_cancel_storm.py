"""A cancellation storm: an app's deadline cancels a hundred calls of the real async anthropic SDK at once, each
caught at a different point (waiting for the headers, for the first event, in the middle of a stream, in the
SDK's back-off after a 429). Every attempt is counted exactly once, as what it was; every call is ``cancelled``;
nothing stays in flight; llmtap has no error of its own; the app sees its ``CancelledError`` s untouched.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import anthropic

import llmtap
from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

PER_PHASE = 25
PHASES = {
    "headers": Scenario(headers_delay=60.0),
    "first_event": Scenario(tokens=5, ttft=60.0),
    "mid_stream": Scenario(tokens=40, stall_at=3, stall=60.0, stall_until_closed=True),
    "back_off": Scenario(fail=1, fail_status=429, retry_after=30),
}
HELD_OPEN = 3 * PER_PHASE
"""The requests the server holds open until the storm (every phase but the back-off's, answered 429)."""


def _wait_until(done: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def test_a_hundred_calls_cancelled_at_once_are_each_counted_once() -> None:
    # a simulator of its own: the server notices two phases' departures only when their delays are over, and
    # stopping it interrupts them (the session's would keep them in flight for the tests that follow)
    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap:
        errors_before = cap.sample("llmtap_internal_errors_total")  # a process's count: earlier tests' included
        _storm(sim, cap)
        assert cap.sample("llmtap_internal_errors_total") == errors_before  # none of llmtap's own


def _storm(sim: Simulator, cap: Capture) -> None:
    request: dict[str, Any] = {
        "model": "claude-storm",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    cancelled: Counter[str] = Counter()

    async def storm() -> None:
        client = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="k", max_retries=2, open_telemetry=False)

        async def call(scenario: Scenario) -> None:
            async with client.messages.stream(**request, extra_headers=scenario.headers()) as stream:
                async for _ in stream:
                    pass

        tasks = [asyncio.ensure_future(call(s)) for s in PHASES.values() for _ in range(PER_PHASE)]
        # every call in its phase: the held requests open at the server, the 429s ended (the SDK sleeps)
        await asyncio.to_thread(
            _wait_until,
            lambda: sim.in_flight == HELD_OPEN and len(cap.records) == PER_PHASE,
            f"the storm's {HELD_OPEN} held requests and {PER_PHASE} rejected attempts",
        )
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            cancelled[type(result).__name__] += 1
        await client.close()

    asyncio.run(storm())
    assert cancelled == {"CancelledError": 4 * PER_PHASE}  # the app's own, untouched
    cap.wait(4 * PER_PHASE, calls=4 * PER_PHASE)
    # the server has seen the mid-stream clients leave and answered the 429s (the other two phases' departures
    # it notices when their delays are over)
    served = sim.wait_served(2 * PER_PHASE, timeout=30.0)
    assert [s.retry_count for s in served] == [0] * len(served)  # no retry was sent
    assert Counter(r.outcome for r in cap.records) == {Outcome.CANCELLED: HELD_OPEN, Outcome.REJECTED: PER_PHASE}
    assert Counter(c.outcome for c in cap.calls) == {Outcome.CANCELLED: 4 * PER_PHASE}
    assert Counter(s.status for s in served) == {200: PER_PHASE, 429: PER_PHASE}
    assert cap.sample("llmtap_streams_total", outcome="cancelled") == HELD_OPEN
    assert cap.sample("llmtap_streams_in_flight") == 0
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="cancelled") == 4 * PER_PHASE
