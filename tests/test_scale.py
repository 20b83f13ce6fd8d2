"""Scale in one process, reduced for ``make test`` (the full size is ``make scale``: benchmarks/scale.py).

1,000 concurrent async streams through the real anthropic SDK and 64 threads sharing one sync client, against
the simulator in a child process: llmtap's totals equal what the simulator served, exactly.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from types import ModuleType

import pytest

from llmtap._core import stream as _stream
from llmtap._core.metrics import HISTOGRAM, INSTRUMENTS
from tests.support.own import PACKAGE, is_own_file
from tests.support.prom import ALERTS, ROOT, SLO_RULES, rules
from tests.support.scripts import load_script


def _load_scale() -> ModuleType:
    """benchmarks/scale.py, loaded as a module."""
    return load_script("benchmarks/scale.py", "llmtap_bench_scale")


@pytest.mark.slow
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


# -- series per process (benchmarks/scale.py --series) and the fleet guide that states them ---------------

FLEET_GUIDE = ROOT / "docs" / "guides" / "fleet.md"
_FIGURES = re.compile(r"^\| (1 model, 1 provider|10 models \u00d7 3 providers) \|((?: [\d,]+ \|){5})$", re.M)


def stated_series() -> dict[int, tuple[int, ...]]:
    """Models -> the fleet guide's series per process (/metrics, OTLP explicit, exponential, mixed) and per
    multiprocess host."""
    rows = {
        int(label.split()[0]): tuple(int(c.strip().replace(",", "")) for c in cells.strip(" |").split("|"))
        for label, cells in _FIGURES.findall(FLEET_GUIDE.read_text())
    }
    assert set(rows) == {1, 10}, "docs/guides/fleet.md: the series table is missing a row"
    return rows


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_the_fleet_guide_states_the_series_measured_now() -> None:
    """The fleet guide's series per process are what ``benchmarks/scale.py --series`` measures: a change that
    adds series fails here until the guide (and so the fleet figures) says so; its 1,000-worker figures are
    those times 1,000."""
    scale = _load_scale()
    stated = stated_series()
    for models, sdks in ((1, scale.SERIES_SDKS[:1]), (10, scale.SERIES_SDKS)):
        r = scale.measure_series(models, sdks)
        measured = (
            r.exposition_samples,
            r.otlp_series["explicit"],
            r.otlp_series["exponential"],
            r.otlp_series["mixed"],
        )
        assert measured == stated[models][:4], f"{models} model(s): update docs/guides/fleet.md on purpose"
        # what was counted: one exponential point a series, fewer series than explicit buckets make
        assert r.otlp_points["exponential"] == r.otlp_points["explicit"] > 0
        assert r.otlp_series["exponential"] < r.otlp_series["mixed"] < r.otlp_series["explicit"]
    # one host in multiprocess mode (the 10 x 3 host is left to `benchmarks/scale.py --series`: ~40 s)
    assert scale.measure_host_series(scale.HOST_WORKERS, 1, 1) == stated[1][4]
    text = FLEET_GUIDE.read_text()
    metrics, explicit, exponential, mixed, host = stated[10]
    for figure in (metrics, explicit, exponential, mixed):
        assert f"| {figure * 1000:,} |" in text, f"the 1,000-worker row for {figure:,} a process"
    assert f"| {host * 125:,} |" in text, "the multiprocess row: 125 hosts of 8 workers"


def _mixed_recipe() -> list[str]:
    m = re.search(r"^MIXED = \[\n(.*?)^\]", FLEET_GUIDE.read_text(), re.M | re.S)
    assert m, "docs/guides/fleet.md: the mixed recipe is missing"
    return re.findall(r'"([a-z_.]+)"', m.group(1))


def test_the_mixed_recipe_leaves_every_rule_its_classic_histograms() -> None:
    """The guide's mixed recipe makes every histogram exponential but those the shipped alert and SLO rules
    read (``_bucket``, ``_count``, ``_sum``), which are ``scale.RULE_HISTOGRAMS``."""
    scale = _load_scale()
    histograms = {i.name: i.prometheus() for i in INSTRUMENTS if i.kind == HISTOGRAM}
    recipe = _mixed_recipe()
    assert sorted(recipe) == sorted(set(histograms) - scale.RULE_HISTOGRAMS)
    exprs = [r["expr"] for path in (ALERTS, SLO_RULES) for r in rules(path)]
    read = {
        name for name, family in histograms.items() for e in exprs if re.search(rf"\b{family}_(bucket|count|sum)\b", e)
    }
    assert read == scale.RULE_HISTOGRAMS  # the kept ones are read (positive control), the recipe's are not
