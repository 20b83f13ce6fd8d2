"""The Grafana dashboards in dashboards/: generated, importable, and querying only metrics llmtap exports.

Checks that need ``promtool`` (every expression parses) skip when it is missing, unless
``LLMTAPTEST_REQUIRE_PROMETHEUS=1`` is set, in which case they fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from llmtap._exporters._health import HEALTH_METRIC_NAMES
from llmtap._exporters.prometheus import PrometheusExporter
from tests.support.prom import DASHBOARDS, SLO_RULES, load_build, require, rule_groups


def _contract() -> dict[str, str]:
    """The Prometheus metric-name contract, name -> kind, from what a fresh exporter registers."""
    registry = CollectorRegistry()
    PrometheusExporter(registry)
    kinds: dict[str, str] = {}
    for family in registry.collect():
        kinds[family.name + "_total" if family.type == "counter" else family.name] = family.type
    return kinds


METRIC_KINDS = _contract()
METRIC_NAMES = frozenset(METRIC_KINDS)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def series_names() -> dict[str, str]:
    """Every series name a scrape can contain -> the contract metric it belongs to (a histogram: its classic
    series, and its bare name, which is a native histogram's)."""
    out: dict[str, str] = {name: name for name in METRIC_KINDS}
    for name, kind in METRIC_KINDS.items():
        if kind == "histogram":
            out.update({name + s: name for s in HISTOGRAM_SUFFIXES})
    return out


build = load_build()


def promtool() -> str:
    return require("promtool")


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"] if "record" in r}


def alert_rules() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rule_groups() for r in g["rules"] if "alert" in r}


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("llmtap-*.json"))


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from iter_panels(p.get("panels", []))


# ---------------------------------------------------------------------------------------------
# A small PromQL tokenizer: enough to list the metric names an expression selects.
# ---------------------------------------------------------------------------------------------

PROMQL_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
    | {"offset", "inf", "nan", "atan2"}
    # aggregation operators, which may be followed by "by (...)" rather than "(".
    | {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk"}
    | {"quantile"}
)


def metric_names_in(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (function names, labels and keywords excluded)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", "{}", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "[]", s)  # range / subquery durations
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", s)  # label lists
    s = re.sub(r"\boffset\s+-?[0-9a-z]+", "", s)
    names = set()
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", s):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_KEYWORDS:
            continue
        names.add(word)
    return names


def label_values_metric(query: str) -> str:
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip(), re.S)
    assert m, f"not a label_values(metric, label) query: {query}"
    return m.group(1)


def test_tokenizer_finds_metric_names() -> None:
    expr = (
        'sum by (le, job) (rate(foo_bucket{a="x{y}", b=~"$provider"}[5m] offset 1h)) / on (job) '
        "group_left bar:baz:rate5m > bool 0 and absent_over_time(qux[1h]) or vector(1e-9) * Inf"
    )
    assert metric_names_in(expr) == {"foo_bucket", "bar:baz:rate5m", "qux"}


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------


def test_build_check_passes() -> None:
    result = subprocess.run(
        [sys.executable, str(DASHBOARDS / "build.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"dashboards/*.json are stale, run `python dashboards/build.py`:\n{result.stderr}"


def test_build_check_detects_drift(tmp_path: Path) -> None:
    assert build.main(["--out", str(tmp_path)]) == 0
    assert build.main(["--check", "--out", str(tmp_path)]) == 0
    victim = tmp_path / "llmtap-streams.json"
    victim.write_text(victim.read_text().replace("Streams", "Streamz", 1))
    assert build.main(["--check", "--out", str(tmp_path)]) == 1
    assert build.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "llmtap-extra.json").write_text("{}")
    assert build.main(["--check", "--out", str(tmp_path)]) == 1


def test_four_dashboards_with_distinct_uids() -> None:
    files = dashboard_files()
    assert [f.name for f in files] == sorted(build.DASHBOARDS), "a JSON file in dashboards/ not built by build.py"
    uids = [json.loads(f.read_text())["uid"] for f in files]
    assert sorted(uids) == ["llmtap-overview", "llmtap-retries-ratelimits", "llmtap-streams", "llmtap-tokens"]


# ---------------------------------------------------------------------------------------------
# Grafana JSON shape
# ---------------------------------------------------------------------------------------------

PANEL_TYPES = {"row", "timeseries", "stat", "bargauge"}
DS_VAR = "${datasource}"


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
def test_dashboard_is_importable_grafana_json(path: Path) -> None:
    dash = json.loads(path.read_text())
    assert isinstance(dash["uid"], str) and 0 < len(dash["uid"]) <= 40
    assert dash["title"].startswith("llmtap / ")
    assert dash["id"] is None, "an exported dashboard must not carry a database id"
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert "llmtap" in dash["tags"]

    # Import input + datasource variable defaulting to it.
    inputs = {i["name"]: i for i in dash["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    assert "${DS_PROMETHEUS}" in path.read_text()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == "${DS_PROMETHEUS}"
    for name, label in (
        ("provider", "gen_ai_provider_name"),
        ("model", "gen_ai_request_model"),
        ("job", "job"),
        ("server", "instance"),
    ):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"] == {"type": "prometheus", "uid": DS_VAR}
        assert var["definition"].startswith("label_values(") and var["definition"].endswith(f", {label})")
        assert var["query"]["query"] == var["definition"]
        assert var["includeAll"] is True and var["multi"] is True and var["allValue"] == ".*"
        assert var["refresh"] in (1, 2), "variables must refresh from the datasource"

    panels = list(iter_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    occupied: set[tuple[int, int]] = set()
    section: dict[int, str] = {}  # panel id -> the title of the row it sits under
    current = ""
    for p in panels:
        current = p["title"] if p["type"] == "row" else current
        section[p["id"]] = current
    spec = build.slo.load()
    for p in panels:
        assert p["type"] in PANEL_TYPES, p["type"]
        assert p["title"], "panel without a title"
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, f"{p['title']}: bad gridPos {g}"
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & occupied, f"{p['title']}: overlaps another panel"
        occupied |= cells
        if p["type"] == "row":
            continue
        assert p["description"], f"{p['title']}: no description"
        assert p["datasource"] == {"type": "prometheus", "uid": DS_VAR}, p["title"]
        unit = p["fieldConfig"]["defaults"]["unit"]
        assert unit, f"{p['title']}: no unit"
        if " per second" in p["title"]:  # a rate shows a per-second unit, whatever it counts
            assert unit in ("reqps", "cps", "ops") or unit.endswith("/s"), f"{p['title']}: unit {unit}"
        assert p["fieldConfig"]["defaults"]["thresholds"]["steps"][0]["value"] is None
        targets = p["targets"]
        assert targets, f"{p['title']}: no queries"
        assert len({t["refId"] for t in targets}) == len(targets)
        for t in targets:
            assert t["datasource"] == {"type": "prometheus", "uid": DS_VAR}
            expr = t["expr"]
            for var in ("$provider", "$model", "$job", "$server"):
                assert var in expr, f"{p['title']}: query ignores {var}: {expr}"
            if "rate(" in expr or "increase(" in expr:
                # the SLO panels' windows are the spec's (budget period, burn-rate windows), not Grafana's; a
                # panel showing what an alert compares ("What alert X compares") has that alert's windows
                slo_windows = {spec.period, *(w.long for a in spec.alerts for w in a.windows)}
                fixed = set(re.findall(r"\[(\w+)\]", expr)) - {"$__rate_interval", "$__range"}
                compared = re.search(r"What alert (\w+) compares", p["description"])
                if compared:
                    (rule,) = [r for g in rule_groups() for r in g["rules"] if r.get("alert") == compared[1]]
                    assert fixed and fixed <= set(re.findall(r":rate(\w+)\b", rule["expr"])), p["title"]
                    continue
                assert fixed <= slo_windows and (not fixed or "Error budgets" in section.get(p["id"], "")), (
                    f"{p['title']}: fixed rate window {sorted(fixed)}"
                )
                assert "$__rate_interval" in expr or "$__range" in expr or fixed, f"{p['title']}: no rate window"


def test_all_expressions_lists_every_panel_target() -> None:
    exprs = build.all_expressions()
    n_targets = sum(
        len(p.get("targets", [])) for f in dashboard_files() for p in iter_panels(json.loads(f.read_text())["panels"])
    )
    assert len(exprs) == n_targets > 40
    assert all(e.expr and e.panel and e.dashboard.startswith("llmtap-") for e in exprs)


# ---------------------------------------------------------------------------------------------
# What the dashboards show (the brief for each of the four)
# ---------------------------------------------------------------------------------------------


def exprs_of(uid: str) -> str:
    return "\n".join(e.expr for e in build.all_expressions() if e.dashboard == uid)


def test_overview_content() -> None:
    text = exprs_of("llmtap-overview")
    for q in ("0.5", "0.95", "0.99"):
        for hist in ("llmtap_time_to_first_token_seconds",):
            assert (
                f"histogram_quantile({q}, sum by (le, gen_ai_provider_name, gen_ai_request_model) "
                f"(rate({hist}_bucket" in text
            )
    for needle in (
        "llmtap_attempts_total",
        'status_code!~"2.."',
        "llmtap_streams_total",
        'outcome!~"completed|rejected"',
        'outcome!="rejected"',
        'llmtap_call_duration_seconds_count{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", '
        'job=~"$job", instance=~"$server", outcome=~"rejected|server_error|connection_error|timeout|incomplete"}',
        'status_code=~"4..", status_code!~"408|409|429"',
        "gen_ai_client_operation_duration_seconds_bucket",
        'gen_ai_token_type="output"',
        # provider or path: the two histograms of one set of attempts, by source, side by side and subtracted
        "sum by (gen_ai_provider_name, gen_ai_request_model, source) (rate(llmtap_client_observed_seconds_sum",
        ") - sum by (gen_ai_provider_name, gen_ai_request_model, source) (rate(llmtap_server_reported_seconds_sum",
    ):
        assert needle in text


def test_streams_content() -> None:
    text = exprs_of("llmtap-streams")
    assert "sum by (outcome) (rate(llmtap_streams_total" in text
    # the dashboards (stdlib-only, no llmtap import) list the outcomes the library defines
    from llmtap._core.record import APP_SIDE, FAILED, SERVICE_SIDE, Outcome

    assert set(build.STREAM_OUTCOMES) == {o.value for o in Outcome}
    assert set(build.SERVICE_ABORTS.split("|")) == {o.value for o in SERVICE_SIDE}
    assert set(build.CLIENT_ABORTS.split("|")) == {o.value for o in APP_SIDE}
    assert set(build.CALL_FAILURES.split("|")) == {o.value for o in FAILED}
    # every abort ratio divides by the stream requests not rejected
    ratios = [e.expr for e in build.all_expressions() if "abort ratio" in e.panel]
    assert ratios and all(r.split("\n/\n")[1].count('outcome!="rejected"') == 1 for r in ratios)
    for needle in (
        "gen_ai_client_operation_time_per_output_chunk_seconds_bucket",
        "llmtap_stream_stalls_total",
        "llmtap_streams_in_flight",
    ):
        assert needle in text


def test_retries_content() -> None:
    text = exprs_of("llmtap-retries-ratelimits")
    for needle in (
        "sum by (reason) (rate(llmtap_retries_total",
        "llmtap_retry_after_seconds_bucket",
        'status_code="429"',
        'status_code="529"',
        'error_type="overloaded_error"',
        "llmtap_ratelimit_remaining",
        "(llmtap_ratelimit_limit",
        "llmtap_ratelimit_reset_seconds",
        "resource)",
    ):
        assert needle in text


def test_tokens_content() -> None:
    text = exprs_of("llmtap-tokens")
    for t in ("input", "output", "cache_read", "cache_write", "reasoning"):
        assert f'gen_ai_token_type="{t}"' in text
    for needle in ("sum by (reason) (rate(llmtap_stop_reasons_total", 'reason=~"max_tokens|length"'):
        assert needle in text
    ratios = [e.expr.split("\n/\n") for e in build.all_expressions() if e.dashboard == "llmtap-tokens"]
    assert any(
        len(r) == 2 and 'gen_ai_token_type="cache_read"' in r[0] and r[1].count('gen_ai_token_type="input"') == 1
        for r in ratios
    ), "no cache hit ratio (cache_read / input) panel"
    assert "llmtap_context_window_utilization_bucket{" in text and 'le="0.9"' in text, "no context-window share panel"


# ---------------------------------------------------------------------------------------------
# Metric names: only the contract (or our own recording rules)
# ---------------------------------------------------------------------------------------------


def all_named_expressions() -> list[tuple[str, str]]:
    out = [(f"{e.dashboard} / {e.panel} / {e.ref_id}", e.expr) for e in build.all_expressions()]
    out += [(f"{t.dashboard} / variable {t.variable}", label_values_metric(t.query)) for t in build.template_queries()]
    out += [(f"alerts.yaml record {n}", e) for n, e in recording_rules().items()]
    out += [(f"alerts.yaml alert {n}", e) for n, e in alert_rules().items()]
    return out


def test_every_metric_name_is_in_the_contract() -> None:
    allowed = set(series_names()) | set(recording_rules())
    unknown = {
        (where, name)
        for where, expr in all_named_expressions()
        for name in metric_names_in(expr)
        if name not in allowed
    }
    assert not unknown, "metric names outside the contract:\n" + "\n".join(f"  {w}: {n}" for w, n in sorted(unknown))


NAME_OF_HISTOGRAM = "llmtap_call_duration_seconds"


def slo_rule_exprs() -> dict[str, str]:
    """Every expression of the generated SLO rules, by record or alert name."""
    return {r.get("record") or r["alert"]: r["expr"] for g in rule_groups(SLO_RULES) for r in g["rules"]}


def classic_only(expr: str) -> set[str]:
    """The histograms ``expr`` reads from their classic series and never from the native one."""
    names = metric_names_in(expr)
    histograms = {n for n, kind in METRIC_KINDS.items() if kind == "histogram"}
    classic = {n for n in histograms for s in HISTOGRAM_SUFFIXES if n + s in names}
    return classic - names


def test_every_histogram_is_read_classic_and_native() -> None:
    """A histogram arrives classic (llmtap's /metrics, explicit OTLP) or native (exponential OTLP into a store
    of native histograms): every panel and rule asks both (``dashboards/promql.py``), so neither goes empty."""
    for where, expr in (*all_named_expressions(), *((f"slo-rules {k}", v) for k, v in slo_rule_exprs().items())):
        assert not classic_only(expr), f"{where} reads {sorted(classic_only(expr))} only classic:\n{expr}"
    # positive control: a classic-only read is caught, the joined form is not
    d = NAME_OF_HISTOGRAM
    assert classic_only(f"sum(rate({d}_count[5m]))") == {d}
    assert not classic_only(f"sum(rate({d}_count[5m]) or histogram_count(rate({d}[5m])))")


def test_every_contract_metric_is_on_a_dashboard() -> None:
    used = {series_names()[n] for e in build.all_expressions() for n in metric_names_in(e.expr) if n in series_names()}
    # llmtap's own health counters carry no provider/model/server labels (every panel filters on those)
    assert METRIC_NAMES - used == set(HEALTH_METRIC_NAMES)


def test_metric_kinds_are_used_correctly() -> None:
    """Gauges are never rate()d; counters and histograms (classic series or native) are; a classic quantile
    keeps ``le``."""
    problems = []
    for where, expr in all_named_expressions():
        for name in metric_names_in(expr):
            base = series_names().get(name)
            if base is None:
                continue
            kind = METRIC_KINDS[base]
            wrapped = re.search(rf"\b(rate|irate|increase)\(\s*{re.escape(name)}\b", expr)
            if kind == "gauge" and wrapped:
                problems.append(f"{where}: gauge {name} inside rate()/increase()")
            counted = kind in ("counter", "histogram")
            if counted and not wrapped and "variable" not in where:
                problems.append(f"{where}: counter series {name} used without rate()/increase()")
            one_bucket = re.search(rf'{re.escape(name)}\{{[^}}]*\ble="[^"]+"', expr)  # an SLO's good events
            if name.endswith("_bucket") and "histogram_quantile(" not in expr and not one_bucket:
                problems.append(f"{where}: {name} outside histogram_quantile")
        for m in re.finditer(r"histogram_quantile\([^,]+,\s*\w+ by \(([^)]*)\)\s*\(rate\((\w+)", expr):
            if m.group(2).endswith("_bucket") and "le" not in [s.strip() for s in m.group(1).split(",")]:
                problems.append(f"{where}: histogram_quantile aggregation drops le")
    assert not problems, "\n".join(problems)


def test_grafana_variables_are_all_known() -> None:
    for e in build.all_expressions():
        concrete = build.concrete(e.expr)  # KeyError on an unknown $variable
        assert "$" not in concrete, f"{e.panel}: unsubstituted variable in {concrete}"


# ---------------------------------------------------------------------------------------------
# Every expression parses (promtool)
# ---------------------------------------------------------------------------------------------


def check_rules(tool: str, exprs: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    rules = [{"record": f"llmtap_parse_check_{i}", "expr": e} for i, e in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "parse-check", "rules": rules}]}, sort_keys=False))
    return subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, check=False)


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    tool = promtool()
    named = [(w, build.concrete(e)) for w, e in all_named_expressions() if "variable" not in w]
    named += [
        (f"{t.dashboard} / variable {t.variable}", build.concrete(label_values_metric(t.query)))
        for t in build.template_queries()
    ]
    result = check_rules(tool, [e for _, e in named], tmp_path / "all.yaml")
    if result.returncode == 0:
        return
    # Pinpoint the offenders one by one.
    bad = []
    for i, (where, expr) in enumerate(named):
        single = check_rules(tool, [expr], tmp_path / f"one-{i}.yaml")
        if single.returncode != 0:
            bad.append(f"{where}:\n  {expr}\n  {single.stdout.strip()} {single.stderr.strip()}")
    pytest.fail("expressions that do not parse:\n" + "\n".join(bad or [result.stdout + result.stderr]))


def test_parse_check_catches_a_broken_expression(tmp_path: Path) -> None:
    tool = promtool()
    assert check_rules(tool, ["sum by (job (rate(llmtap_attempts_total[1m]))"], tmp_path / "bad.yaml").returncode != 0


def test_contract_matches_the_exporter() -> None:
    """The contract read off a fresh registry is the one the exporter declares, families and kinds."""
    from llmtap._exporters import prometheus

    families = {n.removesuffix("_total") for n in prometheus.METRIC_NAMES}
    assert {n.removesuffix("_total") for n in METRIC_NAMES} == families
    assert METRIC_KINDS["llmtap_parse_errors_total"] == "counter"  # the one the hand copy had missed
    assert METRIC_KINDS["llmtap_streams_in_flight"] == "gauge"


@pytest.mark.parametrize("generation", ["legacy", "latest", "both"])
def test_token_panels_read_either_semconv_generation(generation: str, tmp_path: Path) -> None:
    """Settings.genai_semconv: the tokens-per-request panel answers the same from the legacy histogram
    (by gen_ai_token_type), from the latest per-direction ones, and from both at once (no double count)."""
    promtool = require("promtool")
    build = load_build()
    expr = build.concrete(build.token_quantile(0.5), {"__rate_interval": "2m"})
    labels = 'gen_ai_provider_name="anthropic", gen_ai_operation_name="chat", gen_ai_request_model="m", instance="a"'
    series = []

    def histogram(name: str, extra: str, low: bool) -> None:
        # every observation in (4, 16] (median 10), or in (16, 64] (median 40)
        buckets = (
            (("4", 0), ("16", 3), ("64", 3), ("+Inf", 3)) if low else (("4", 0), ("16", 0), ("64", 3), ("+Inf", 3))
        )
        for le, rate in buckets:
            series.append({"series": f'{name}_bucket{{{labels}{extra}, le="{le}"}}', "values": f"0+{rate}x10"})

    if generation in ("legacy", "both"):
        histogram("gen_ai_client_token_usage", ', gen_ai_token_type="input"', low=True)
        histogram("gen_ai_client_token_usage", ', gen_ai_token_type="output"', low=True)
    # with both, the latest histograms disagree on purpose: a mix of the two would move the median to 16
    latest_low = generation == "latest"
    if generation in ("latest", "both"):
        histogram("gen_ai_client_inference_operation_input_tokens", "", low=latest_low)
        histogram("gen_ai_client_inference_operation_output_tokens", "", low=latest_low)
    expected = [
        {"labels": f'{{gen_ai_provider_name="anthropic", gen_ai_request_model="m", gen_ai_token_type="{kind}"}}',
         "value": 10}
        for kind in ("input", "output")
    ]  # fmt: skip
    test = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{"expr": expr, "eval_time": "5m", "exp_samples": expected}],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
