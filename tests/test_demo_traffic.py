"""The demo's traffic, driven through ``llmtap._drive``: its workers produce every stream outcome."""

from __future__ import annotations

import asyncio
import threading

import llmtap
from llmtap._cli import demo
from llmtap.simulator import Simulator
from llmtap.testing import capture

#: the seeds of the sync anthropic, async anthropic and openai workers (the draws are deterministic per seed)
SEEDS = (5, 23, 252)
PATHS = {"/v1/messages", "/v1/chat/completions", "/v1/responses"}


def test_the_demo_workers_produce_every_outcome() -> None:
    """The sync anthropic, async anthropic and openai workers, with the "faults" mix, until every outcome
    was recorded and both OpenAI APIs were called (or 90 s). The workers' seeds (``SEEDS``) are ones whose
    draws reach every outcome within each worker's first few calls: ~6 s, where seeds 1, 2, 3 took 20-40 s."""
    sync_seed, async_seed, openai_seed = SEEDS
    stop = threading.Event()
    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,), stall_threshold_seconds=1.0)) as cap:
        threads = [
            threading.Thread(
                target=demo._sync_worker,
                args=(sim.base_url, "faults", stop, sync_seed, 0.01, *demo._SYNC_ANTHROPIC),
            ),
            threading.Thread(
                target=lambda: asyncio.run(demo._async_worker(sim.base_url, "faults", stop, async_seed, 0.01))
            ),
            threading.Thread(
                target=demo._sync_worker, args=(sim.base_url, "faults", stop, openai_seed, 0.01, *demo._OPENAI)
            ),
        ]
        for thread in threads:
            thread.start()
        try:
            for _ in range(900):
                records = list(cap.records)
                if {r.outcome for r in records} == set(llmtap.Outcome) and {r.url_path for r in records} >= PATHS:
                    break
                stop.wait(0.1)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        outcomes = {r.outcome for r in cap.records}
        assert outcomes == set(llmtap.Outcome), set(llmtap.Outcome) - outcomes
        assert {r.url_path for r in cap.records} >= PATHS
