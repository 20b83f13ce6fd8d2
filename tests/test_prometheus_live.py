"""Integration: a real Prometheus scrapes the llmtap demo; every dashboard and rule query must return data.

Runs once per metrics path (``PATHS``):

* ``prometheus``: llmtap's own Prometheus exporter serves ``/metrics``;
* ``otel``: the Prometheus exporter is off (``Settings(prometheus=False)``) and ``/metrics`` is the
  OpenTelemetry meter's output translated by ``opentelemetry-exporter-prometheus`` (the
  OTel-to-Prometheus compatibility rules a Collector's ``prometheus`` exporter also applies), so the
  shipped dashboards and alerts are proven on what an OTLP pipeline produces;
* ``native``: the demo pushes OTLP with every histogram exponential (``--metrics-via otlp`` and the OTLP
  exporter's standard variable) to a Collector stand-in (``tests/support/nativeprom.py``), which Prometheus
  scrapes with native histograms on: every histogram is stored native, none classic, so each panel and rule
  is proven on its native side (``dashboards/promql.py``).

What it runs:

* the demo, ``python -m llmtap demo --headless --duration SECONDS --metrics-port PORT [--mix faults]
  [--metrics-via otel]`` (``--mix faults`` is passed when ``demo --help`` lists ``--mix``), serving
  ``/metrics`` on 127.0.0.1:PORT;
* ``prometheus`` on 127.0.0.1 (free port, temporary storage, scrape and evaluation interval 1 s) with
  ``dashboards/alerts.yaml`` loaded.

Once Prometheus scrapes the demo, while the demo is still running, it re-checks (every ``RECHECK_SECONDS``,
for up to ``DEADLINE_SECONDS``) until these all hold, through Prometheus' HTTP API:

* every dashboard panel expression (Grafana variables substituted: ``$provider`` = ``.*`` and so on)
  parses and returns a non-empty result; the stream-outcome panel shows every outcome;
* every template variable (``label_values``) has values;
* every recording-rule expression, and the series it records, returns data; every rule is healthy
  (no evaluation errors such as many-to-many matches);
* every alert expression evaluates. Whether an alert *fires* depends on thresholds and ``for:``, so the
  check is on the alert's *relaxed* expression (its numeric thresholds replaced by -Inf / +Inf): that
  proves its joins and guards match real series. Alerts whose relaxed expression is empty by design
  under live traffic are listed in ``EMPTY_UNDER_LIVE_TRAFFIC`` with the reason.

Skips when ``prometheus`` is not installed, unless ``LLMTAPTEST_REQUIRE_PROMETHEUS=1`` (then it fails).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtap import Outcome
from llmtap._core import metrics as contract
from tests.support.nativeprom import native_collector
from tests.support.paths import ROOT
from tests.support.prom import ALERTS, SLO_RULES, load_build, require, rules
from tests.support.promlive import Proc, api, free_port, http_get, prometheus_command, query, start, stop_all, wait_for

pytestmark = pytest.mark.prometheus


DEMO_SECONDS = 180  # long enough to outlive the checks; the fixture stops it afterwards
DEADLINE_SECONDS = 115  # re-check until everything passes or this much time has passed since scraping began
RECHECK_SECONDS = 2
JOB = "llmtap-demo"

# Grafana variables -> values for the live check. $__rate_interval is 1m (60 scrapes at 1 s).
LIVE_VARIABLES = {"provider": ".*", "model": ".*", "server": ".*", "__rate_interval": "1m", "__range": "1h"}

# Alerts whose relaxed expression legitimately returns nothing while the demo sends traffic.
EMPTY_UNDER_LIVE_TRAFFIC = {
    "LlmtapInstrumentationSilent": (
        "fires only when attempts stop after an hour of traffic: `A unless on (job) B` where B (attempts "
        "in the last 15m) is non-empty while the demo runs; only checked to parse and evaluate"
    ),
    "LlmtapPromptCacheHitRatioDrop": (
        "compares the last 30 minutes with the 6 hours before them (`offset 30m`): empty until the demo has run "
        "30 minutes; its recording rules are checked live, its joins by promtool (dashboards/tests/cache_test.yaml)"
    ),
}

STREAM_OUTCOMES = {o.value for o in Outcome}
HISTOGRAMS = "|".join(i.prometheus() for i in contract.INSTRUMENTS if i.kind == contract.HISTOGRAM)
"""llmtap's histograms' names, a regular expression."""


build = load_build()


_THRESHOLD = re.compile(r"(>=|<=|>|<)\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def relax(expr: str) -> str:
    """``expr`` with every numeric comparison made always-true for real numbers (``> 0.05`` -> ``> -Inf``)."""
    return _THRESHOLD.sub(lambda m: f"{m.group(1)} {'-Inf' if '>' in m.group(1) else '+Inf'}", expr)


def test_relax() -> None:
    expr = "a:b > 0.05 and c * 300 >= 20 and on (job) d < 0.10 unless e > 1e-3"
    assert relax(expr) == "a:b > -Inf and c * 300 >= -Inf and on (job) d < +Inf unless e > -Inf"


DEMO_CLI = "python -m llmtap demo --headless --duration SECONDS --metrics-port PORT [--mix faults]"


PATHS = ("prometheus", "otel", "native")

NATIVE_ENV = {  # the OTLP exporter's standard variables: every histogram exponential, an export a second
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION": "base2_exponential_bucket_histogram",
    "OTEL_METRIC_EXPORT_INTERVAL": "1000",
}


@dataclass
class Demo:
    port: int
    path: str  # one of PATHS
    target: str  # what Prometheus scrapes: the demo's /metrics, or the Collector stand-in's


@dataclass
class Live:
    """One path's demo and the Prometheus scraping it."""

    demo: Demo
    url: str


def _demo_help() -> str:
    """``python -m llmtap demo --help``; fails the test when the demo lacks a flag every path needs."""
    help_run = subprocess.run(
        [sys.executable, "-m", "llmtap", "demo", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    if help_run.returncode != 0:
        pytest.fail(
            f"the llmtap demo is not available: `{DEMO_CLI}` is required by this test, and "
            f"`python -m llmtap demo --help` exited {help_run.returncode}:\n"
            + (help_run.stdout + help_run.stderr)[-3000:]
        )
    missing = [flag for flag in ("--headless", "--duration", "--metrics-port") if flag not in help_run.stdout]
    if missing:
        pytest.fail(f"`python -m llmtap demo --help` does not list {missing}; this test needs `{DEMO_CLI}`")
    return help_run.stdout


def _demo_args(help_text: str, path: str) -> list[str]:
    """The demo's command line for ``path`` (``--metrics-port`` added by the caller)."""
    args = [sys.executable, "-m", "llmtap", "demo", "--headless", "--duration", str(DEMO_SECONDS)]
    if "--mix" in help_text:
        args += ["--mix", "faults"]
    if path != "prometheus":
        if "--metrics-via" not in help_text:
            pytest.fail("`python -m llmtap demo --help` does not list --metrics-via; the OTel paths need it")
        args += ["--metrics-via", "otlp" if path == "native" else "otel"]
    return args


def _prometheus_args(binary: str, demo: Demo, tmp: Path) -> tuple[list[str], str]:
    """Prometheus scraping the demo's target every second with alerts.yaml and slo-rules.yaml loaded, on a free
    port (native histograms on for the native path); its command line and URL."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(ALERTS), str(SLO_RULES)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [demo.target]}]}],
    }
    native = ("--enable-feature=native-histograms",) if demo.path == "native" else ()
    return prometheus_command(binary, config, tmp, "--log.level=warn", *native)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Live]]:
    """Per path of ``PATHS``: the llmtap demo serving /metrics and a Prometheus scraping it. The paths run
    at once, so the later tests find their traffic already scraped (the wait is for the demo's traffic to
    reach every outcome and fill the rate windows, not for CPU)."""
    binary = require("prometheus")
    help_text = _demo_help()
    procs: list[Proc] = []
    with contextlib.ExitStack() as stack:
        collector = stack.enter_context(native_collector())
        stack.callback(stop_all, procs)  # before the collector stops
        demos: dict[str, tuple[Demo, Proc, list[str]]] = {}
        for path in PATHS:
            port = free_port()
            args = [*_demo_args(help_text, path), "--metrics-port", str(port)]
            env = {**NATIVE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint} if path == "native" else {}
            proc = start("llmtap demo", args, tmp_path_factory.mktemp(f"demo-{path}") / "demo.log", env)
            procs.append(proc)
            target = urllib.parse.urlsplit(collector.metrics_url).netloc if path == "native" else f"127.0.0.1:{port}"
            demos[path] = (Demo(port, path, target), proc, args)
        proms: dict[str, tuple[str, Proc]] = {}
        for path, (demo, proc, args) in demos.items():

            def serving(port: int = demo.port) -> bool:
                status, body = http_get(f"http://127.0.0.1:{port}/metrics")
                return status == 200 and "llmtap_" in body

            wait_for(f"llmtap metrics on 127.0.0.1:{demo.port}/metrics (`{' '.join(args[1:])}`)", serving, 60, proc)
            tmp = tmp_path_factory.mktemp(f"prometheus-{path}")
            prom_args, url = _prometheus_args(binary, demo, tmp)
            prom = start("prometheus", prom_args, tmp / "prometheus.log")
            procs.append(prom)
            proms[path] = (url, prom)
        for url, prom in proms.values():
            wait_for("prometheus to be ready", lambda url=url: http_get(url + "/-/ready")[0] == 200, 60, prom)
        yield {path: Live(demos[path][0], proms[path][0]) for path in PATHS}


@dataclass
class Report:
    failures: list[str]
    notes: list[str]


def check_everything(url: str) -> Report:
    failures: list[str] = []
    notes: list[str] = []

    # Dashboard panels.
    for e in build.all_expressions():
        expr = build.concrete(e.expr, LIVE_VARIABLES)
        where = f"panel {e.dashboard} / {e.panel} / {e.ref_id}"
        err, result = query(url, expr)
        if err:
            failures.append(f"{where}: query error {err}\n    {expr}")
        elif not result:
            failures.append(f"{where}: no data\n    {expr}")
        elif e.panel.startswith("Stream outcomes over time"):
            seen = {r["metric"].get("outcome") for r in result}
            if STREAM_OUTCOMES - seen:
                failures.append(f"{where}: outcomes missing from the result: {sorted(STREAM_OUTCOMES - seen)}")

    # Template variables: label_values(selector, label).
    for t in build.template_queries():
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", t.query, re.S)
        assert m, t.query
        selector, label = build.concrete(m.group(1), LIVE_VARIABLES), m.group(2)
        body = api(url, "/api/v1/series", [("match[]", selector)])
        values = {s.get(label) for s in body.get("data", [])} - {None, ""}
        if body.get("status") != "success" or not values:
            failures.append(f"variable {t.dashboard} / ${t.variable}: no values for {t.query} ({body.get('error')})")

    # Recording rules: the expression, and the series Prometheus recorded from it.
    for rule in (*rules(), *rules(SLO_RULES)):
        if "record" not in rule:
            continue
        for label, expr in (
            (f"record {rule['record']} (expr)", rule["expr"]),
            (f"record {rule['record']}", rule["record"]),
        ):
            err, result = query(url, expr)
            if err:
                failures.append(f"{label}: query error {err}")
            elif not result:
                failures.append(f"{label}: no data")

    # Alerts: the expression evaluates; its relaxed form (thresholds removed) returns data.
    for rule in (*rules(), *rules(SLO_RULES)):
        if "alert" not in rule:
            continue
        name = rule["alert"]
        err, result = query(url, rule["expr"])
        if err:
            failures.append(f"alert {name}: query error {err}")
            continue
        notes.append(f"alert {name}: expression currently {'TRUE for ' + str(len(result)) if result else 'false'}")
        err, relaxed = query(url, relax(rule["expr"]))
        if err:
            failures.append(f"alert {name} (relaxed): query error {err}\n    {relax(rule['expr'])}")
        elif not relaxed and name not in EMPTY_UNDER_LIVE_TRAFFIC:
            failures.append(
                f"alert {name}: relaxed expression returns no data, so the alert can never fire on this "
                f"traffic\n    {relax(rule['expr'])}"
            )

    # Rule health (evaluation errors such as many-to-many matching show up here, not as empty results).
    body = api(url, "/api/v1/rules", {}, post=False)
    if body.get("status") != "success":
        failures.append(f"/api/v1/rules: {body.get('error')}")
    elif not body["data"]["groups"]:
        failures.append("/api/v1/rules: no rule groups loaded from alerts.yaml")
    for group in body.get("data", {}).get("groups", []):
        for r in group["rules"]:
            if r.get("health") != "ok":
                failures.append(f"rule {r['name']}: health {r.get('health')} {r.get('lastError', '')}")
    return Report(failures, notes)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_every_dashboard_and_rule_query_returns_data(live: dict[str, Live], path: str) -> None:
    demo, url = live[path].demo, live[path].url

    def scraping() -> bool:
        err, result = query(url, f'up{{job="{JOB}"}} == 1')
        return err is None and bool(result)

    deadline = time.monotonic() + 60
    while not scraping():
        if time.monotonic() > deadline:
            targets = api(url, "/api/v1/targets", {}, post=False)
            pytest.fail(f"prometheus never scraped the demo on 127.0.0.1:{demo.port}: {json.dumps(targets)[:3000]}")
        time.sleep(0.5)

    # Which exporter produced the series: the OTel translation labels each with its scope.
    err, translated = query(url, 'llmtap_attempts_total{otel_scope_name="llmtap"}')
    err2, exported = query(url, 'llmtap_attempts_total{otel_scope_name=""}')
    assert err is None and err2 is None, (err, err2)
    if demo.path == "prometheus":
        assert exported and not translated, "the prometheus path must serve only the native exporter's metrics"
    else:
        assert translated and not exported, f"the {demo.path} path must serve only translated OpenTelemetry metrics"

    # Which kind of histogram Prometheus stores: classic series only, or native only (so each side of the
    # panels' and rules' `or` is proven on its own path).
    classic = query(url, f'group by (__name__) ({{__name__=~"({HISTOGRAMS})_(bucket|count|sum)"}})')
    native = query(url, f'group by (__name__) ({{__name__=~"{HISTOGRAMS}"}})')
    assert classic[0] is None and native[0] is None, (classic[0], native[0])
    if demo.path == "native":
        assert native[1] and not classic[1], f"classic histogram series on the native path: {classic[1]}"
    else:
        assert classic[1] and not native[1], f"native histograms on the {demo.path} path: {native[1]}"

    # re-check until everything passes (the demo's traffic reaches every outcome, the rate windows fill)
    deadline = time.monotonic() + DEADLINE_SECONDS
    report = check_everything(url)
    while report.failures and time.monotonic() < deadline:
        time.sleep(RECHECK_SECONDS)
        report = check_everything(url)
    print("\n".join(report.notes))
    for name, reason in EMPTY_UNDER_LIVE_TRAFFIC.items():
        print(f"alert {name}: relaxed expression allowed to be empty: {reason}")
    assert not report.failures, (
        f"{len(report.failures)} dashboard/rule queries failed against the live demo ({demo.path} path) "
        f"(after {DEADLINE_SECONDS}s of scraping):\n" + "\n".join(report.failures)
    )
