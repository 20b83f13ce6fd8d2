"""dashboards/slo.toml -> dashboards/slo-rules.yaml: generated, current, valid, unit-tested with promtool, and
counting exactly the library's outcome groups and metric names.

The promtool checks skip when promtool is missing, unless ``LLMTAPTEST_REQUIRE_PROMETHEUS=1`` is set.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from llmtap._core.metrics import by_key
from llmtap._core.record import FAILED, SERVICE_SIDE, Outcome
from tests.support.prom import DASHBOARDS, ROOT, SLO_RULES, require, rules
from tests.support.scripts import load_script

SPEC = DASHBOARDS / "slo.toml"
UNIT_TEST = DASHBOARDS / "tests" / "slo_test.yaml"


def _slo() -> ModuleType:
    return load_script("dashboards/slo.py", "llmtap_dashboards_slo")


slo = _slo()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False, cwd=ROOT)


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules(SLO_RULES) if "alert" in r}


# ---------------------------------------------------------------------------------------------
# Generated from one place
# ---------------------------------------------------------------------------------------------


def test_committed_rules_are_what_the_spec_generates() -> None:
    result = run(sys.executable, "dashboards/slo.py", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_on_a_stale_rule_file(tmp_path: Path) -> None:
    stale = tmp_path / "slo-rules.yaml"
    stale.write_text(SLO_RULES.read_text().replace("> 14.4", "> 14"))
    result = run(sys.executable, "dashboards/slo.py", "--check", "--out", str(stale))
    assert result.returncode == 1 and "stale" in result.stderr
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text(SLO_RULES.read_text())  # positive control: the same command passes on the real file
    assert run(sys.executable, "dashboards/slo.py", "--check", "--out", str(fresh)).returncode == 0


def test_an_objective_changes_every_rule_that_depends_on_it(tmp_path: Path) -> None:
    spec = tmp_path / "slo.toml"
    text = SPEC.read_text()
    changed = re.sub(r"(\[slo\.call_availability\][^\[]*?objective = )0\.995", r"\g<1>0.999", text, count=1, flags=re.S)
    assert changed != text
    spec.write_text(changed)
    out = tmp_path / "rules.yaml"
    assert run(sys.executable, "dashboards/slo.py", "--spec", str(spec), "--out", str(out)).returncode == 0
    generated = {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"] if "alert" in r}
    for name, rule in generated.items():
        budget = "0.001" if name.startswith("LlmtapCallAvailability") else ("0.01" if "Latency" in name else "0.005")
        assert f"/ {budget} >" in rule["expr"], name


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("threshold_seconds = 5.12", "threshold_seconds = 5"), "not a bucket boundary"),
        (("objective = 0.99\n", "objective = 1.5\n"), "between 0 and 1"),
        (('long = "1h"', 'long = "1 hour"'), "duration"),
        (('severity = "warning"', 'severity = "ticket"'), "critical or warning"),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = SPEC.read_text()
    assert edit[0] in text
    spec = tmp_path / "slo.toml"
    spec.write_text(text.replace(edit[0], edit[1], 1))
    result = run(sys.executable, "dashboards/slo.py", "--spec", str(spec), "--out", str(tmp_path / "r.yaml"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "r.yaml").exists()


def test_the_slos_count_the_library_outcome_groups_and_metrics() -> None:
    spec = slo.load()
    by_name = {s.key: s for s in spec.slos}
    calls = by_name["call_availability"].ratio("5m")
    assert f'outcome=~"{"|".join(sorted(o.value for o in FAILED))}"' in _sorted_alternation(calls)
    streams = by_name["stream_availability"].ratio("5m")
    assert f'outcome=~"{"|".join(sorted(o.value for o in SERVICE_SIDE))}"' in _sorted_alternation(streams)
    assert f'outcome!="{Outcome.REJECTED.value}"' in streams  # rejections are not interruptions
    latency = by_name["call_latency"]
    assert latency.threshold in by_key()["call_ttft"].buckets
    assert f'le="{latency.threshold:g}"' in latency.ratio("5m")
    assert by_key()["call_ttft"].prometheus() + "_bucket" in latency.ratio("5m")


def _sorted_alternation(expr: str) -> str:
    return re.sub(r'outcome=~"([^"]+)"', lambda m: 'outcome=~"' + "|".join(sorted(m.group(1).split("|"))) + '"', expr)


# ---------------------------------------------------------------------------------------------
# The rule file
# ---------------------------------------------------------------------------------------------


def test_every_slo_has_a_page_and_a_ticket_with_runbooks() -> None:
    spec = slo.load()
    found = alerts()
    assert len(found) == len(spec.slos) * len(spec.alerts)
    for s in spec.slos:
        severities = {found[n]["labels"]["severity"] for n in found if found[n]["labels"]["slo"] == s.key}
        assert severities == {"critical", "warning"}, s.key
    for name, rule in found.items():
        ann = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(ann), name
        assert len(ann["runbook"].strip().splitlines()) >= 3, name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        # says what it measures: every window pair and rate of its expression is in its description
        for window, rate in re.findall(r"ratio_rate(\w+) / [\d.]+ > ([\d.]+)", rule["expr"]):
            assert f"the last {window}" in ann["description"] and f"above {rate} times" in ann["description"], name
        assert re.search(r">= \d+", rule["expr"]), f"{name}: no minimum-events guard"


def test_recording_rules_follow_naming_convention_and_guard_ratios() -> None:
    for rule in rules(SLO_RULES):
        if "record" in rule:
            assert re.fullmatch(r"llmtap:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]
            assert re.search(r"/ \(.*> 0\)", " ".join(rule["expr"].split())), rule["record"]


def test_promtool_check_rules() -> None:
    result = run(require("promtool"), "check", "rules", str(SLO_RULES))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
def test_promtool_unit_tests_cover_every_alert_firing_and_quiet() -> None:
    doc = yaml.safe_load(UNIT_TEST.read_text())
    assert doc["rule_files"] == ["../slo-rules.yaml"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert set(alerts()) == fires == quiet
    names = " ".join(t["name"] for t in doc["tests"])
    for scenario in ("fast burn", "slow burn", "short blip"):
        assert scenario in names
    result = run(require("promtool"), "test", "rules", str(UNIT_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_promtool_unit_tests_catch_a_page_without_its_short_window(tmp_path: Path) -> None:
    """Mutation check: a page on the long window alone would fire on the short blip; the cases must say so.

    Runs the short-blip cases alone (promtool evaluates the whole file's other cases for seconds, up to 3 days
    of rule time at 1m); the control is the same cases passing on the real rules."""
    tool = require("promtool")
    text = SLO_RULES.read_text()
    mutated = re.sub(
        r"(ratio_rate1h / [\d.]+ > [\d.]+)\n(\s+)and\n\s+\S+ratio_rate5m / [\d.]+ > [\d.]+\n", r"\1\n", text
    )
    mutated = mutated.replace("ratio_rate1h / 0.005 > 14.4", "ratio_rate1h / 0.005 > 3")
    assert mutated != text
    doc = yaml.safe_load(UNIT_TEST.read_text())
    doc["tests"] = [t for t in doc["tests"] if "short blip" in t["name"]]
    assert doc["tests"]
    results = {}
    for name, rules_text in (("mutated", mutated), ("real", text)):
        (tmp_path / name / "tests").mkdir(parents=True)
        (tmp_path / name / "slo-rules.yaml").write_text(rules_text)
        (tmp_path / name / "tests" / UNIT_TEST.name).write_text(yaml.safe_dump(doc, sort_keys=False))
        results[name] = run(tool, "test", "rules", str(tmp_path / name / "tests" / UNIT_TEST.name))
    assert results["mutated"].returncode != 0
    assert "short blip" in results["mutated"].stdout + results["mutated"].stderr
    assert results["real"].returncode == 0, results["real"].stdout + results["real"].stderr  # the control
