"""The demo's traffic, driven through ``llmtap._drive``: its workers produce every stream outcome."""

from __future__ import annotations

import asyncio
import threading

import llmtap
from llmtap._cli import demo
from llmtap.simulator import Simulator
from llmtap.testing import capture


def test_the_demo_workers_produce_every_outcome() -> None:
    """The sync anthropic, async anthropic and openai workers, with the "faults" mix, until every outcome
    was recorded (or 90 s); both OpenAI APIs were called."""
    stop = threading.Event()
    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,), stall_threshold_seconds=1.0)) as cap:
        threads = [
            threading.Thread(
                target=demo._sync_worker, args=(sim.base_url, "faults", stop, 1, 0.01, *demo._SYNC_ANTHROPIC)
            ),
            threading.Thread(target=lambda: asyncio.run(demo._async_worker(sim.base_url, "faults", stop, 2, 0.01))),
            threading.Thread(target=demo._sync_worker, args=(sim.base_url, "faults", stop, 3, 0.01, *demo._OPENAI)),
        ]
        for thread in threads:
            thread.start()
        try:
            for _ in range(900):
                if {r.outcome for r in list(cap.records)} == set(llmtap.Outcome):
                    break
                stop.wait(0.1)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        outcomes = {r.outcome for r in cap.records}
        assert outcomes == set(llmtap.Outcome), set(llmtap.Outcome) - outcomes
        assert {r.url_path for r in cap.records} >= {"/v1/messages", "/v1/chat/completions", "/v1/responses"}
