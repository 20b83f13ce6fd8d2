"""Many worker processes: prometheus-client's multiprocess mode aggregates llmtap's metrics.

prometheus-client picks its value storage when it is imported, so this runs in a child process
with ``PROMETHEUS_MULTIPROC_DIR`` set, two times (two "workers"), then collects like a server would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmtap.testing import sample

WORKER = textwrap.dedent(
    """
    import anthropic, llmtap
    from llmtap.simulator import Scenario, Simulator
    with Simulator() as sim:
        llmtap.instrument(llmtap.Settings(base_urls=(sim.base_url,)))
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="k")
        for _ in client.messages.create(model="m", max_tokens=8, stream=True,
                messages=[{"role": "user", "content": "hi"}], extra_headers=Scenario(tokens=5, gap=0.002).headers()):
            pass
        client.close()
        llmtap.uninstrument()
    """
)
COLLECT = textwrap.dedent(
    """
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    print(generate_latest(registry).decode())
    """
)


@pytest.mark.slow
def test_two_workers_aggregate(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", WORKER], env=env, check=True, timeout=60)
    out = subprocess.run([sys.executable, "-c", COLLECT], env=env, check=True, capture_output=True, text=True).stdout
    assert sample(out, "llmtap_attempts_total", status_code="200") == 2
    assert sample(out, "llmtap_streams_total", outcome="completed") == 2
    assert sample(out, "llmtap_tokens_total", gen_ai_token_type="output") == 10
    # gaps merged bucket-wise into the histogram work in multiprocess storage too
    assert sample(out, "gen_ai_client_operation_time_per_output_chunk_seconds_count") >= 2 * 5
    assert sample(out, "llmtap_streams_in_flight") == 0
    assert sample(out, "llmtap_ratelimit_limit", resource="requests") > 0
