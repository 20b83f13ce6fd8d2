"""Scale in one process, reduced for ``make test`` (the full size is ``make scale``: benchmarks/scale.py).

1,000 concurrent async streams through the real anthropic SDK and 64 threads sharing one sync client, against
the simulator in a child process: llmtap's totals equal what the simulator served, exactly.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from types import ModuleType

import pytest

from llmtap._core import stream as _stream
from tests.support.own import PACKAGE, is_own_file
from tests.support.scripts import load_script


def _load_scale() -> ModuleType:
    """benchmarks/scale.py, loaded as a module."""
    return load_script("benchmarks/scale.py", "llmtap_bench_scale")


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
    # memory held per open stream is attributed to llmtap's own code only, by its directory (the budget,
    # MEMORY_BUDGET_PER_STREAM, is checked by `make scale`: no fixed memory bound in `make test`)
    assert report.bytes_per_stream > 0 and report.llmtap_files
    outside = [f for f in report.llmtap_files if not is_own_file(f)]
    assert outside == [] and not any("site-packages" in f for f in report.llmtap_files), outside
    stream_module = Path(_stream.__file__).resolve()
    assert any(Path(f).resolve() == stream_module for f in report.llmtap_files)  # the stream state is counted


def test_memory_attribution_is_by_directory_not_name(tmp_path: Path) -> None:
    """A clone in a folder named `llmtap` holds a virtualenv whose SDK files match `*/llmtap/*`: the
    filters match by the package's own directory, so those files are not llmtap's."""
    scale = _load_scale()
    venv_file = str(tmp_path / "llmtap" / ".venv" / "lib" / "site-packages" / "anthropic" / "_client.py")
    own_file = str(Path(_stream.__file__).resolve())
    filters = scale.own_code_filters()

    def counted(filename: str) -> bool:  # how filter_traces() applies one inclusive and one exclusive filter
        return all(fnmatch.fnmatch(filename, f.filename_pattern) == f.inclusive for f in filters)

    assert counted(own_file)  # positive control
    assert not counted(venv_file)
    assert not counted(str(PACKAGE / "simulator" / "_server.py"))
