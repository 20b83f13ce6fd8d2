"""Scale in one process, reduced for ``make test`` (the full size is ``make scale``: benchmarks/scale.py).

1,000 concurrent async streams through the real anthropic SDK and 64 threads sharing one sync client, against
the simulator in a child process: llmtap's totals equal what the simulator served, exactly.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCALE = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


def _load_scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llmtap_bench_scale", SCALE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_totals_match_the_simulator_at_scale() -> None:
    scale = _load_scale()
    streams, threads, calls = 1000, 64, 3
    report = scale.run(streams, threads, calls, tokens=8, traced=100)

    assert report.mismatches == []
    # what was compared is not empty: every request was served, counted and had tokens
    assert report.served["requests"] == streams + threads * calls
    assert report.llmtap["attempts"] == report.served["requests"]
    assert report.llmtap["output_tokens"] == report.served["output_tokens"] > 0
    # in flight: all the async streams at once, none at the end
    assert report.in_flight_peak == streams
    assert report.in_flight_end == 0
    # memory held by llmtap per open stream: some, and bounded
    assert 0 < report.bytes_per_stream < 16 * 1024
