"""dashboards/alerts.yaml: valid, unit-tested (one firing and one quiet case per alert), documented.

The promtool checks skip when promtool is missing, unless ``LLMTAPTEST_REQUIRE_PROMETHEUS=1`` is set,
in which case they fail.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.prom import ALERTS, DASHBOARDS, ROOT, require, rules

UNIT_TESTS = sorted(
    t
    for t in (DASHBOARDS / "tests").glob("*.yaml")
    if yaml.safe_load(t.read_text())["rule_files"] == ["../alerts.yaml"]
)
"""The promtool cases of alerts.yaml (those of the generated slo-rules.yaml run in tests/test_slo.py)."""

EXPECTED_ALERTS = {
    "LlmtapStreamServiceAbortRatioHigh",
    "LlmtapStreamClientAbortRatioHigh",
    "LlmtapTimeToFirstTokenP95High",
    "LlmtapAttemptErrorRatioHigh",
    "LlmtapRateLimitedSustained",
    "LlmtapOverloadedBurst",
    "LlmtapRateLimitHeadroomLow",
    "LlmtapMaxTokensTruncationHigh",
    "LlmtapInstrumentationSilent",
    "LlmtapDegraded",
    "LlmtapCallFailureRatioHigh",
    "LlmtapBadRequestRatioHigh",
    "LlmtapPromptCacheHitRatioDrop",
    "LlmtapContextWindowOver90PctRatioHigh",
}


def promtool() -> str:
    return require("promtool")


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules() if "alert" in r}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False, cwd=ROOT)


# ---------------------------------------------------------------------------------------------
# promtool
# ---------------------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    result = run(promtool(), "check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.slow
def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS, "no promtool unit tests in dashboards/tests/"
    result = run(promtool(), "test", "rules", *map(str, UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_promtool_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """Mutation check: with a threshold raised, the unit tests must fail."""
    tool = promtool()
    (tmp_path / "tests").mkdir()
    mutated = ALERTS.read_text().replace(
        "llmtap:attempt_error_ratio:rate5m > 0.05", "llmtap:attempt_error_ratio:rate5m > 0.5"
    )
    assert mutated != ALERTS.read_text()
    (tmp_path / "alerts.yaml").write_text(mutated)
    for t in UNIT_TESTS:
        (tmp_path / "tests" / t.name).write_text(t.read_text())
    result = run(tool, "test", "rules", *(str(tmp_path / "tests" / t.name) for t in UNIT_TESTS))
    assert result.returncode != 0
    assert "LlmtapAttemptErrorRatioHigh" in result.stdout + result.stderr


def test_promtool_unit_tests_catch_rejections_counted_as_aborts(tmp_path: Path) -> None:
    """Mutation check: with rejected streams counted as service-side aborts (llmtap 0.1's meaning), a burst of
    429 / 529 retried to success pages, and the unit tests must say so."""
    tool = promtool()
    (tmp_path / "tests").mkdir()
    text = ALERTS.read_text()
    mutated = text.replace(
        'outcome=~"server_error|connection_error|timeout|incomplete"',
        'outcome=~"rejected|server_error|connection_error|timeout|incomplete"',
    ).replace('outcome!="rejected"', 'outcome!="none"')
    assert mutated != text
    (tmp_path / "alerts.yaml").write_text(mutated)
    for t in UNIT_TESTS:
        (tmp_path / "tests" / t.name).write_text(t.read_text())
    result = run(tool, "test", "rules", str(tmp_path / "tests" / "outcomes_test.yaml"))
    assert result.returncode != 0
    assert "retried to success pages nothing critical" in result.stdout + result.stderr


def test_promtool_unit_tests_catch_a_wrong_context_window_bound(tmp_path: Path) -> None:
    """Mutation check: with the share measured over 95% of the window instead of 90%, the context-window cases
    fail (the bound is the bucket the rule subtracts, not a threshold of its own)."""
    tool = promtool()
    (tmp_path / "tests").mkdir()
    text = ALERTS.read_text()
    mutated = text.replace(
        'llmtap_context_window_utilization_bucket{le="0.9"}', 'llmtap_context_window_utilization_bucket{le="0.95"}'
    )
    assert mutated != text
    (tmp_path / "alerts.yaml").write_text(mutated)
    case = DASHBOARDS / "tests" / "context_window_test.yaml"
    (tmp_path / "tests" / case.name).write_text(case.read_text())
    result = run(tool, "test", "rules", str(tmp_path / "tests" / case.name))
    assert result.returncode != 0
    assert "LlmtapContextWindowOver90PctRatioHigh" in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# Coverage of the unit tests and content of the rules (no promtool needed)
# ---------------------------------------------------------------------------------------------


def test_expected_alerts_exist() -> None:
    assert set(alerts()) == EXPECTED_ALERTS


def test_every_promtool_case_file_is_run() -> None:
    """Each file in dashboards/tests/ tests alerts.yaml (here) or slo-rules.yaml (tests/test_slo.py)."""
    others = {t.name for t in (DASHBOARDS / "tests").glob("*.yaml")} - {t.name for t in UNIT_TESTS}
    assert others == {"slo_test.yaml"}
    assert len(UNIT_TESTS) >= 8


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../alerts.yaml"], f"{path.name} must test dashboards/alerts.yaml"
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert set(alerts()) - fires == set(), "alerts without a unit test where they fire"
    assert set(alerts()) - quiet == set(), "alerts without a unit test where they stay quiet"


def test_alerts_have_runbook_annotations_and_severity() -> None:
    for name, rule in alerts().items():
        ann = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(ann), name
        assert len(ann["runbook"].strip().splitlines()) >= 3, f"{name}: runbook should list what to check"
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), f"{name}: needs a for: duration"


def test_every_alert_threshold_is_documented() -> None:
    """Each alert is preceded by a '# Threshold:' comment explaining its default."""
    text = ALERTS.read_text()
    for name in alerts():
        m = re.search(rf"((?:^ *#.*\n)+) *- alert: {name}\n", text, re.M)
        assert m and "Threshold:" in m.group(1), f"{name}: no '# Threshold:' comment above it"


def test_ratios_are_guarded() -> None:
    for rule in rules():
        name = rule.get("record") or rule["alert"]
        expr = " ".join(rule["expr"].split())
        if " / " in expr:
            assert re.search(r"/ \(.*> 0\)", expr), f"{name}: ratio without a '(denominator > 0)' guard"
        if "alert" in rule and "_ratio:" in expr:
            # a volume over the rule's window (rate5m * 300, rate30m * 1800 ...) or a non-zero rate
            assert re.search(r"\band\b.*(\* \d+ >=|> 0)", expr), f"{name}: ratio alert without a traffic guard"


def test_recording_rules_follow_naming_convention() -> None:
    for rule in rules():
        if "record" in rule:
            assert re.fullmatch(r"llmtap:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_outcome_groups_match_the_library() -> None:
    """The abort and failure selectors are exactly the library's outcome groups; the stream ratios divide
    by the streams not rejected."""
    from llmtap._core.record import APP_SIDE, FAILED, SERVICE_SIDE, Outcome

    text = ALERTS.read_text()
    selectors = set(re.findall(r'outcome=~"([^"]+)"', text))
    groups = {frozenset(o.value for o in group) for group in (SERVICE_SIDE, APP_SIDE, FAILED)}
    assert {frozenset(s.split("|")) for s in selectors} == groups
    assert f'outcome!="{Outcome.REJECTED.value}"' in text
    by_name = {r.get("record"): " ".join(r["expr"].split()) for r in rules() if "record" in r}
    for ratio in ("stream_abort_ratio", "stream_service_abort_ratio", "stream_client_abort_ratio"):
        assert by_name[f"llmtap:{ratio}:rate5m"].endswith("/ (llmtap:streams_started:rate5m > 0)"), ratio


def test_runbooks_name_dashboard_variables_as_the_dashboards_label_them() -> None:
    """A runbook that points at a dashboard variable uses the label a reader sees (Instance), not the variable's
    internal name (``server``); control: the runbooks do point at one."""
    import json

    labels = {
        variable["label"]
        for board in sorted(DASHBOARDS.glob("*.json"))
        for variable in json.loads(board.read_text())["templating"]["list"]
        if variable.get("label")
    }
    named = [
        name
        for rule in rules(ALERTS)
        for name in re.findall(r"\(([^()]*\bvariable\b[^()]*)\)", rule.get("annotations", {}).get("runbook", ""))
    ]
    assert named, "no runbook names a dashboard variable"
    said = [re.fullmatch(r"the (\w+) variable of the dashboards", n) for n in named]
    assert all(m is not None and m.group(1) in labels for m in said), (named, labels)
