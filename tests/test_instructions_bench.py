"""``benchmarks/instructions.py`` (run in full by ``make bench``, under valgrind): its worker runs what it says
against the simulator, and its report tells a missed target from a met one. No count is asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType

from llmtap.simulator import Simulator
from tests.support.paths import ROOT
from tests.support.scripts import load_script


def _load() -> ModuleType:
    return load_script("benchmarks/instructions.py", "llmtap_bench_instructions")


def _worker(base_url: str, *args: str) -> int:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/instructions.py"),
            "--worker",
            "prom_spans",
            "--base-url",
            base_url,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(json.loads(done.stdout.strip().splitlines()[-1])["seen"])


def test_the_worker_counts_the_units_it_adds_and_the_floor_adds_none(sim: Simulator) -> None:
    bench = _load()
    requests = _worker(sim.base_url, "--units", "2", "--extra", "anthropic_create")
    events = _worker(sim.base_url, "--units", "1", "--extra", "bedrock_stream")
    floor = _worker(sim.base_url, "--units", "2")
    assert requests == 2 * bench.LOOPS["anthropic_create"]
    assert events > 100  # one stream of ~TOKENS deltas, each an event-stream message
    assert floor == 0


def test_the_report_fails_a_configuration_above_both_its_target_and_the_sdks_tracing() -> None:
    bench = _load()
    per = {
        "baseline": {"anthropic_create": 100.0, "anthropic_stream": 10.0},
        "anthropic_tracing": {"anthropic_create": 120.0, "anthropic_stream": 11.0},
        "prom_spans": {"anthropic_create": 119.0, "anthropic_stream": 12.0},  # under the SDK / above it
        "otlp": {"anthropic_create": 104.0, "anthropic_stream": 10.05},  # under both targets
    }
    missed = bench.report(per, ("anthropic_create", "anthropic_stream"))
    assert missed == ["anthropic_stream prom_spans"]
    per["prom_spans"]["anthropic_stream"] = 11.0  # level with the SDK's tracing: met
    assert bench.report(per, ("anthropic_create", "anthropic_stream")) == []


def test_the_callgrind_total_is_read_from_valgrinds_summary() -> None:
    bench = _load()
    stderr = (
        "==4242== Events    : Ir\n==4242== Collected : 9040527952\n==4242==\n==4242== I   refs:      9,040,527,952\n"
    )
    match = bench._COLLECTED.search(stderr)
    assert match is not None and int(match.group(1)) == 9_040_527_952
    assert bench._COLLECTED.search("==1== I   refs: 12") is None
