#!/usr/bin/env python3
"""Generate the llmtap Grafana dashboards (the one source of truth for ``dashboards/*.json``).

Usage::

    python dashboards/build.py           # (re)write dashboards/llmtap-*.json
    python dashboards/build.py --check   # exit 1 if the committed JSON differs from what this script builds

Run it with llmtap importable (``make dashboards`` uses the project's venv): metric names come from the
library's instrument table (``llmtap._core.metrics``), stream outcomes from ``llmtap.Outcome``.

Conventions used by every panel:

* datasource: the ``${datasource}`` template variable (a Prometheus datasource picker whose default is the
  ``${DS_PROMETHEUS}`` import input), so the JSON imports as is via Dashboards -> New -> Import;
* ``provider`` / ``model`` / ``job`` / ``server`` multi-value template variables (``label_values`` of
  ``gen_ai_provider_name``, ``gen_ai_request_model`` and the scrape ``job`` and ``instance``), applied to
  every query;
* rates of events per second have a per-second unit (``reqps`` for requests and responses, ``cps`` for
  other events such as stalls and parse errors, ``tok/s`` for tokens);
* rates over ``$__rate_interval``; ratios guard their denominator with ``> 0`` so an idle selection shows
  "No data" instead of NaN, and numerators fall back to ``... * 0`` so a ratio reads 0 (not "No data") when
  the numerator's label values have simply never occurred.

``all_expressions()`` returns every panel query with its dashboard and panel title; the tests use it to
check each query parses, references only exported metric names, and returns data against the demo.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from llmtap._core import metrics as contract
from llmtap._core.record import ALL_OUTCOMES, APP_SIDE, FAILED, SERVICE_SIDE, Outcome

HERE = Path(__file__).resolve().parent


def _load_slo() -> Any:
    """``dashboards/slo.py`` (the SLO spec's reader), loaded beside this script whatever the working directory."""
    name = "llmtap_dashboards_slo"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "slo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


slo = _load_slo()
promql: Any = slo.promql
"""PromQL over a histogram, classic or native (``dashboards/promql.py``): every panel reading one asks through it."""

NAME: dict[str, str] = {i.key: i.prometheus() for i in contract.INSTRUMENTS}
"""Prometheus family name of each llmtap instrument (``NAME["attempts"] == "llmtap_attempts_total"``),
from the library's one table; the OpenTelemetry path translates to the same names."""

Json = dict[str, Any]

DS_INPUT = "DS_PROMETHEUS"
DS_INPUT_REF = "${" + DS_INPUT + "}"  # replaced by Grafana's import dialog
DS_REF: Json = {"type": "prometheus", "uid": "${datasource}"}

# Label selector applied to every llmtap series (the three dashboard variables).
SEL = 'gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", job=~"$job", instance=~"$server"'
BY = "gen_ai_provider_name, gen_ai_request_model"
RI = "$__rate_interval"
PM_LEGEND = "{{gen_ai_provider_name}} {{gen_ai_request_model}}"

# Outcome groups of llmtap_streams_total (all pre-created at 0), from the library's own contract.
STREAM_OUTCOMES = tuple(o.value for o in ALL_OUTCOMES)
SERVICE_ABORTS = "|".join(o.value for o in ALL_OUTCOMES if o in SERVICE_SIDE)
CLIENT_ABORTS = "|".join(o.value for o in ALL_OUTCOMES if o in APP_SIDE)
CALL_FAILURES = "|".join(o.value for o in ALL_OUTCOMES if o in FAILED)
"""Call outcomes that mean the call failed after the SDK's retries."""
REJECTED = Outcome.REJECTED.value
NOT_REJECTED = f'outcome!="{REJECTED}"'
"""The stream requests not rejected with an HTTP error status: the denominator of every abort ratio."""
BAD_REQUEST = 'status_code=~"4..", status_code!~"408|409|429"'
"""4xx statuses the SDKs do not retry: the request, model or key was refused."""
TOKEN_TYPES: tuple[str, ...] = tuple(contract.TOKEN_TYPES)
TRUNCATION_REASONS = "max_tokens|length"
RATELIMIT_RESOURCES = ("requests", "tokens", "input_tokens", "output_tokens")

# Colours that keep their meaning across dashboards.
OUTCOME_COLORS = {
    "completed": "green",
    "client_closed": "light-blue",
    "cancelled": "blue",
    "abandoned": "purple",
    "rejected": "light-red",
    "server_error": "red",
    "connection_error": "orange",
    "timeout": "yellow",
    "incomplete": "dark-red",
}
if set(OUTCOME_COLORS) != set(STREAM_OUTCOMES):  # a new outcome needs its colour
    raise SystemExit(
        f"OUTCOME_COLORS does not cover the outcomes: {sorted(set(STREAM_OUTCOMES) ^ set(OUTCOME_COLORS))}"
    )


class PanelExpr(NamedTuple):
    """One panel query: which dashboard, which panel, which target (refId), and the PromQL."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str


class TemplateQuery(NamedTuple):
    """One ``label_values(...)`` template-variable query."""

    dashboard: str
    variable: str
    query: str


# --------------------------------------------------------------------------------------------------
# PromQL helpers
# --------------------------------------------------------------------------------------------------


def sel(extra: str = "") -> str:
    """The dashboard label selector, plus optional extra matchers."""
    return "{" + SEL + (", " + extra if extra else "") + "}"


def rate(metric: str, extra: str = "", window: str = RI) -> str:
    return f"rate({metric}{sel(extra)}[{window}])"


def agg(by: str) -> str:
    """``sum by (...)``, or a plain ``sum`` when ``by`` is empty."""
    return f"sum by ({by})" if by else "sum"


def sum_rate(metric: str, extra: str = "", by: str = BY) -> str:
    return f"{agg(by)} ({rate(metric, extra)})"


def ratio(num: str, den: str, by: str = BY) -> str:
    """sum(num) / sum(den) per ``by`` group, of two per-series rates (``den`` a superset of ``num``).

    The numerator is ``num or den * 0`` before summing: a group whose numerator series do not exist yet reads
    0, not "No data". The denominator is guarded with ``> 0``.
    """
    return f"{agg(by)} ({num} or {den} * 0)\n/\n({agg(by)} ({den}) > 0)"


def share(metric: str, num_extra: str, den_extra: str = "", by: str = BY) -> str:
    """:func:`ratio` of a counter's series: ``rate(metric{num})`` over ``rate(metric{den})``."""
    return ratio(rate(metric, num_extra), rate(metric, den_extra), by)


def hist_count(histogram: str, extra: str = "", by: str = BY) -> str:
    """Observations per second of a histogram per ``by`` group, classic or native."""
    return f"{agg(by)} ({promql.count(histogram, RI, SEL, extra)})"


def hist_total(histogram: str, by: str = BY) -> str:
    """The observed values' sum per second of a histogram per ``by`` group, classic or native."""
    return f"{agg(by)} ({promql.total(histogram, RI, SEL)})"


def hist_share(histogram: str, num_extra: str, by: str = BY) -> str:
    """:func:`ratio` of a histogram's observations, classic or native."""
    return ratio(promql.count(histogram, RI, SEL, num_extra), f"({promql.count(histogram, RI, SEL)})", by)


def quantile(q: float, histogram: str, by: str = BY) -> str:
    expr: str = promql.quantile(q, histogram, by, RI, SEL)
    return expr


def token_quantile(q: float) -> str:
    """Tokens per request by type, from whichever GenAI semconv token histograms the app emits
    (``Settings.genai_semconv``): ``gen_ai.client.token.usage`` by ``gen_ai_token_type``, or the latest
    per-direction histograms, relabelled; with both, the first one wins (``or`` on equal label sets)."""
    legacy = quantile(q, NAME["usage"], by=f"{BY}, gen_ai_token_type")
    latest = [
        f'label_replace({quantile(q, NAME[key])}, "gen_ai_token_type", "{kind}", "", "")'
        for key, kind in (("inference_input", "input"), ("inference_output", "output"))
    ]
    return f"{legacy} or {latest[0]} or {latest[1]}"


def context_over(bound: float, by: str = BY) -> str:
    """The share of the attempts measured against their model's context window whose input was above ``bound`` of
    it (a bucket boundary): all of them minus those at or under it, over all of them."""
    count = hist_count(NAME["context_utilization"], by=by)
    under = f"{agg(by)} ({promql.under(NAME['context_utilization'], str(bound), RI, SEL)})"
    return f"({count} - {under})\n/\n({count} > 0)"


def eq(label: str, value: str) -> str:
    """An equality matcher, ``label="value"``."""
    return f'{label}="{value}"'


# --------------------------------------------------------------------------------------------------
# Panel model
# --------------------------------------------------------------------------------------------------


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    title: str
    description: str
    targets: list[Target]
    kind: str = "timeseries"  # timeseries | stat | bargauge | row
    unit: str = "short"
    width: int = 12
    height: int = 8
    # (colour, lower bound) steps after the base colour; base colour first.
    base_color: str = "green"
    steps: list[tuple[str, float]] = field(default_factory=list)
    show_thresholds: bool = False
    stack: bool = False
    minimum: float | None = None
    maximum: float | None = None
    decimals: int | None = None
    overrides: list[Json] = field(default_factory=list)
    reduce: str = "lastNotNull"


def row(title: str) -> Panel:
    return Panel(title=title, description="", targets=[], kind="row", width=24, height=1)


def _thresholds(p: Panel) -> Json:
    return {
        "mode": "absolute",
        "steps": [{"color": p.base_color, "value": None}] + [{"color": c, "value": v} for c, v in p.steps],
    }


def _field_config(p: Panel) -> Json:
    defaults: Json = {"unit": p.unit, "thresholds": _thresholds(p), "color": {"mode": "palette-classic"}}
    if p.minimum is not None:
        defaults["min"] = p.minimum
    if p.maximum is not None:
        defaults["max"] = p.maximum
    if p.decimals is not None:
        defaults["decimals"] = p.decimals
    if p.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 25 if p.stack else 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if p.stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "dashed" if p.show_thresholds else "off"},
        }
    else:
        defaults["color"] = {"mode": "thresholds"}
    return {"defaults": defaults, "overrides": p.overrides}


def _options(p: Panel) -> Json:
    if p.kind == "timeseries":
        return {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["mean", "max", "lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    reduce = {"calcs": [p.reduce], "fields": "", "values": False}
    if p.kind == "stat":
        return {
            "reduceOptions": reduce,
            "colorMode": "background",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        }
    return {  # bargauge
        "reduceOptions": reduce,
        "displayMode": "gradient",
        "orientation": "horizontal",
        "showUnfilled": True,
    }


def _render_panel(p: Panel, panel_id: int, x: int, y: int) -> Json:
    grid = {"h": p.height, "w": p.width, "x": x, "y": y}
    if p.kind == "row":
        return {
            "type": "row",
            "id": panel_id,
            "title": p.title,
            "collapsed": False,
            "gridPos": grid,
            "panels": [],
        }
    targets = []
    for i, t in enumerate(p.targets):
        target: Json = {
            "datasource": dict(DS_REF),
            "refId": chr(ord("A") + i),
            "expr": t.expr,
            "legendFormat": t.legend or "__auto",
            "range": not t.instant,
            "instant": t.instant,
            "editorMode": "code",
        }
        if "histogram_quantile(" in t.expr and "_bucket" in t.expr and not t.instant:
            # the attempt's trace id rides on the buckets (llmtap Settings.exemplars): a latency spike
            # links to the trace that made it
            target["exemplar"] = True
        targets.append(target)
    return {
        "type": p.kind,
        "id": panel_id,
        "title": p.title,
        "description": p.description,
        "datasource": dict(DS_REF),
        "gridPos": grid,
        "fieldConfig": _field_config(p),
        "options": _options(p),
        "targets": targets,
    }


def _layout(panels: Sequence[Panel]) -> list[Json]:
    out: list[Json] = []
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        if p.kind == "row" or x + p.width > 24:
            y += row_h
            x = row_h = 0
        out.append(_render_panel(p, i, x, y))
        if p.kind == "row":
            y += p.height
            continue
        x += p.width
        row_h = max(row_h, p.height)
    return out


# --------------------------------------------------------------------------------------------------
# Dashboard skeleton
# --------------------------------------------------------------------------------------------------


def _query_var(name: str, label: str, query: str) -> Json:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": dict(DS_REF),
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
        "skipUrlSync": False,
    }


TEMPLATE_VARS: tuple[tuple[str, str, str], ...] = (
    ("provider", "Provider", f"label_values({NAME['attempts']}, gen_ai_provider_name)"),
    (
        "model",
        "Model",
        f'label_values({NAME["attempts"]}{{gen_ai_provider_name=~"$provider"}}, gen_ai_request_model)',
    ),
    (
        "job",
        "Job",
        f'label_values({NAME["attempts"]}{{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model"}}, job)',
    ),
    (
        "server",
        "Instance",
        f"label_values({NAME['attempts']}"
        '{gen_ai_provider_name=~"$provider", '
        'gen_ai_request_model=~"$model", job=~"$job"}, instance)',
    ),
)


def _templating() -> Json:
    datasource = {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {"selected": False, "text": DS_INPUT_REF, "value": DS_INPUT_REF},
        "options": [],
        "regex": "",
        "refresh": 1,
        "includeAll": False,
        "multi": False,
        "hide": 0,
        "skipUrlSync": False,
    }
    return {"list": [datasource] + [_query_var(n, lbl, q) for n, lbl, q in TEMPLATE_VARS]}


PANEL_TYPES = {"timeseries": "Time series", "stat": "Stat", "bargauge": "Bar gauge", "row": "Row"}


def dashboard(uid: str, title: str, description: str, panels: Sequence[Panel]) -> Json:
    kinds = sorted({p.kind for p in panels if p.kind != "row"})
    return {
        "__inputs": [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "Prometheus datasource that scrapes the llmtap metrics endpoint(s)",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__elements": {},
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        ]
        + [{"type": "panel", "id": k, "name": PANEL_TYPES[k], "version": ""} for k in kinds],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": True,
                "icon": "external link",
                "includeVars": True,
                "keepTime": True,
                "tags": ["llmtap"],
                "targetBlank": False,
                "title": "llmtap dashboards",
                "type": "dashboards",
            }
        ],
        "panels": _layout(panels),
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["llmtap", "llm", "genai"],
        "templating": _templating(),
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# --------------------------------------------------------------------------------------------------
# Shared panel builders
# --------------------------------------------------------------------------------------------------

PCT_WARN = [("yellow", 0.01), ("red", 0.05)]


def latency_panel(title: str, histogram: str, description: str) -> Panel:
    return Panel(
        title=title,
        description=description,
        unit="s",
        targets=[Target(quantile(q, histogram), f"p{int(q * 100)} {PM_LEGEND}") for q in (0.5, 0.95, 0.99)],
        steps=[("yellow", 2.0), ("red", 5.0)],
        show_thresholds=True,
    )


def outcome_overrides() -> list[Json]:
    return [
        {
            "matcher": {"id": "byName", "options": outcome},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}],
        }
        for outcome, color in OUTCOME_COLORS.items()
    ]


# --------------------------------------------------------------------------------------------------
# The four dashboards
# --------------------------------------------------------------------------------------------------


def overview() -> Json:
    attempts = NAME["attempts"]
    streams = NAME["streams"]
    panels = [
        row("At a glance"),
        Panel(
            "Attempts per second",
            "Every HTTP attempt to the provider APIs, retries included.",
            [Target(f"sum({rate(attempts)})")],
            kind="stat",
            unit="reqps",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Attempt error ratio",
            "Share of attempts that got a non-2xx status or no response (timeouts, connection errors).",
            [Target(share(attempts, 'status_code!~"2.."', by=""))],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            steps=PCT_WARN,
        ),
        Panel(
            "Stream abort ratio",
            f"Share of the stream requests not {REJECTED} (no HTTP error status) that did not end with "
            "outcome=completed (service- and client-side causes).",
            [Target(share(streams, f'outcome!~"completed|{REJECTED}"', NOT_REJECTED, by=""))],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            steps=PCT_WARN,
        ),
        Panel(
            "Time to first token p95 (per call, retries included)",
            "What a user waits for the first content token of a logical SDK call, retries included.",
            [Target(quantile(0.95, NAME["call_ttft"], by=""))],
            kind="stat",
            unit="s",
            width=6,
            height=4,
            steps=[("yellow", 2.0), ("red", 5.0)],
        ),
        row("Traffic"),
        Panel(
            "Attempt rate by provider / model",
            "HTTP attempts per second, retries included.",
            [Target(sum_rate(attempts), PM_LEGEND)],
            unit="reqps",
        ),
        Panel(
            "Logical call rate by outcome",
            "SDK calls per second (one per user-visible call, however many retries it took), by outcome.",
            [
                Target(
                    hist_count(NAME["call_duration"], by="gen_ai_provider_name, outcome"),
                    "{{gen_ai_provider_name}} {{outcome}}",
                )
            ],
            unit="reqps",
        ),
        Panel(
            "Stream rate by provider / model",
            "Streams that ended per second, any outcome.",
            [Target(sum_rate(streams), PM_LEGEND)],
            unit="reqps",
        ),
        Panel(
            "Streams in flight",
            "Streams currently open (gauge).",
            [Target(f"sum by ({BY}) ({NAME['in_flight']}{sel()})", PM_LEGEND)],
            unit="short",
            minimum=0,
        ),
        row("Errors and aborts"),
        Panel(
            "Attempt error ratio by provider / model",
            "Attempts with a non-2xx status or no response, as a share of all attempts. "
            "Alert LlmtapAttemptErrorRatioHigh fires above 5%.",
            [Target(share(attempts, 'status_code!~"2.."'), PM_LEGEND)],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Attempts by status code / error type",
            'status_code "" means no response was received (see error_type).',
            [
                Target(
                    sum_rate(attempts, by="status_code, error_type"),
                    "{{status_code}} {{error_type}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        Panel(
            "Stream abort ratio: service-side vs client-side",
            f"Service-side = {SERVICE_ABORTS.replace('|', ', ')}; "
            f"client-side = {CLIENT_ABORTS.replace('|', ', ')}. Share of the ended stream requests that were not "
            f"{REJECTED} with an HTTP error status (rejections are on the Retries and rate limits dashboard).",
            [
                Target(share(streams, f'outcome=~"{SERVICE_ABORTS}"', NOT_REJECTED), f"service {PM_LEGEND}"),
                Target(share(streams, f'outcome=~"{CLIENT_ABORTS}"', NOT_REJECTED), f"client {PM_LEGEND}"),
            ],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Call failure ratio after retries by provider / model",
            f"Logical SDK calls whose last attempt ended {CALL_FAILURES.replace('|', ', ')}: what the application "
            "saw after the SDK's retries. Alert LlmtapCallFailureRatioHigh fires above 5%.",
            [Target(hist_share(NAME["call_duration"], f'outcome=~"{CALL_FAILURES}"'), PM_LEGEND)],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Bad request share of attempts by provider / model",
            "Attempts answered with a 4xx other than 408, 409 and 429 (the request, model name or key was refused; "
            "retrying does not help). Alert LlmtapBadRequestRatioHigh fires above 5%.",
            [Target(share(attempts, BAD_REQUEST), PM_LEGEND)],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Logical call duration p95 by outcome (retries included)",
            "From the first attempt's start to the call's end, including backoff and retries.",
            [
                Target(
                    quantile(0.95, NAME["call_duration"], by="gen_ai_provider_name, outcome"),
                    "p95 {{gen_ai_provider_name}} {{outcome}}",
                )
            ],
            unit="s",
        ),
        row("Latency"),
        latency_panel(
            "Time to first token (p50 / p95 / p99)",
            NAME["ttft"],
            "Per attempt: request start to the first generated output (text, reasoning, a tool call), not "
            "the first body chunk (message_start, a role-only chunk).",
        ),
        latency_panel(
            "Time to first token per call, retries included (p50 / p95 / p99)",
            NAME["call_ttft"],
            "Per logical SDK call, from the first attempt's start: what the user waits. "
            "Alert LlmtapTimeToFirstTokenP95High fires when p95 exceeds 5 s.",
        ),
        latency_panel(
            "Operation duration (p50 / p95 / p99)",
            NAME["duration"],
            "Per attempt: request start to the end of the response body / stream.",
        ),
        *provider_or_path_panels(),
        row("Throughput"),
        Panel(
            "Output tokens per second",
            "Aggregate generated tokens per second.",
            [Target(sum_rate(NAME["tokens"], 'gen_ai_token_type="output"'), PM_LEGEND)],
            unit="suffix: tok/s",
        ),
        Panel(
            "Output tokens per second of request time (mean per request)",
            "Output tokens divided by the time spent in requests: generation speed a single request sees.",
            [
                Target(
                    f"sum by ({BY}) "
                    f"({rate(NAME['tokens'], eq('gen_ai_token_type', 'output'))})"
                    f"\n/\n({hist_total(NAME['duration'])} > 0)",
                    PM_LEGEND,
                )
            ],
            unit="suffix: tok/s",
        ),
    ]
    panels += error_budget_panels()
    return dashboard(
        "llmtap-overview",
        "llmtap / Overview",
        "Request and stream rates, error and abort ratios, time to first token, duration and "
        "throughput of LLM API traffic as seen by the client (llmtap).",
        panels,
    )


def provider_or_path_panels() -> list[Panel]:
    """The Overview's "provider or path" row: the time each provider reports it took (``source``: the header or
    stream field it came from) beside the same attempts' time as the client saw it over the same interval; their
    difference is everything between (network, proxies, gateways, queues, the app's own reading)."""
    server, client = NAME["server_reported"], NAME["client_observed"]
    by = f"{BY}, source"
    legend = f"{PM_LEGEND} {{{{source}}}}"

    def mean(histogram: str) -> str:
        return f"{hist_total(histogram, by)}\n/\n({hist_count(histogram, by=by)} > 0)"

    path = f"({hist_total(client, by)} - {hist_total(server, by)})\n/\n({hist_count(client, by=by)} > 0)"
    outside = f"1 - {hist_total(server, by)}\n/\n({hist_total(client, by)} > 0)"
    return [
        row("Provider or path"),
        Panel(
            "Provider time and client time (mean per attempt)",
            "The time the provider reports it took (source: the header or stream field it came from) beside the "
            "same attempts' time as llmtap saw it over the same interval: to the response headers for a header's "
            "number, to the first body chunk for a first-byte latency, to the end for a stream's last event.",
            [Target(mean(server), f"provider {legend}"), Target(mean(client), f"client {legend}")],
            unit="s",
        ),
        Panel(
            "Path time: client minus provider (mean per attempt)",
            "Client time minus provider time over the same interval: network, proxies and gateways, queues "
            "before the provider's timer starts, the app's own reading. A rise here with a flat provider time is "
            "not the provider.",
            [Target(path, legend)],
            unit="s",
        ),
        Panel(
            "Share of the client's time outside the provider",
            "1 - provider time / client time, summed over the attempts that reported a server time.",
            [Target(outside, legend)],
            unit="percentunit",
            minimum=0,
        ),
        Panel(
            "Provider time and client time p95",
            "The 95th percentiles of the two. Percentiles do not subtract: the path's share is in the mean panels.",
            [
                Target(quantile(0.95, server, by=by), f"provider p95 {legend}"),
                Target(quantile(0.95, client, by=by), f"client p95 {legend}"),
            ],
            unit="s",
        ),
    ]


def error_budget_panels() -> list[Panel]:
    """The Overview's SLO row: budget remaining over the spec's period and burn rates, per SLO of
    ``dashboards/slo.toml`` (the same spec ``slo.py`` generates the burn-rate alerts from)."""
    spec = slo.load()
    page = next((a for a in spec.alerts if a.severity == "critical"), None)
    pairs = [] if page is None else list(page.windows)
    burn_steps = sorted(
        {(("red" if i == 0 else "orange"), p.burn_rate) for i, p in enumerate(pairs)}, key=lambda c: c[1]
    )
    panels = [row(f"Error budgets (SLOs of dashboards/slo.toml, {spec.period} budget)")]
    for s in spec.slos:
        panels.append(
            Panel(
                f"{s.title}: budget remaining ({spec.period}, objective {s.objective * 100:.10g}%)",
                f"Share of the {spec.period} error budget not yet spent: 1 - (bad / all) / (1 - objective), over the "
                f"last {spec.period} of the selection. Bad: {s.what_bad}. Below 0: the objective is missed.",
                [Target(f"1 - (\n{s.ratio(spec.period, SEL, '')}\n) / {s.budget:.10g}")],
                kind="stat",
                unit="percentunit",
                width=8,
                height=4,
                base_color="red",
                steps=[("yellow", 0.0), ("green", 0.25)],
                decimals=1,
            )
        )
    for s in spec.slos:
        panels.append(
            Panel(
                f"{s.title}: burn rate by provider / model",
                f"Error ratio over the window divided by the budget ({s.budget:.10g}); 1 spends the budget in exactly "
                f"{spec.period}. The page fires when both windows of a pair are above its rate: "
                + "; ".join(f"{p.long} and {p.short} above {p.burn_rate:.10g}" for p in pairs)
                + ".",
                [
                    Target(f"(\n{s.ratio(w, SEL, BY)}\n) / {s.budget:.10g}", f"{w} {PM_LEGEND}")
                    for w in dict.fromkeys(p.long for p in pairs)
                ],
                unit="short",
                width=8,
                steps=burn_steps,
                show_thresholds=True,
                minimum=0,
            )
        )
    return panels


def streams() -> Json:
    streams_m = NAME["streams"]
    panels = [
        row("At a glance"),
        Panel(
            "Streams per second",
            "Streams that ended per second, any outcome.",
            [Target(f"sum({rate(streams_m)})")],
            kind="stat",
            unit="reqps",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Completed share",
            f"Share of the ended stream requests not {REJECTED} (no HTTP error status) with outcome=completed.",
            [
                Target(
                    f"sum({rate(streams_m, eq('outcome', 'completed'))})\n/\n(sum({rate(streams_m, NOT_REJECTED)}) > 0)"
                )
            ],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            base_color="red",
            steps=[("yellow", 0.9), ("green", 0.95)],
        ),
        Panel(
            "Streams in flight",
            "Streams currently open.",
            [Target(f"sum({NAME['in_flight']}{sel()})")],
            kind="stat",
            unit="short",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Stalls per second",
            "Inter-chunk gaps longer than the stall threshold.",
            [Target(f"sum({rate(NAME['stalls'])})")],
            kind="stat",
            unit="cps",
            width=6,
            height=4,
            steps=[("yellow", 0.01), ("red", 0.1)],
        ),
        row("Outcomes"),
        Panel(
            f"Stream outcomes over time (all {len(STREAM_OUTCOMES)})",
            f"completed; {CLIENT_ABORTS.replace('|', ', ')} (client-side); {REJECTED} (an HTTP error status before "
            f"any stream body); {SERVICE_ABORTS.replace('|', ', ')} (service-side, in a stream not rejected). "
            f"All {len(STREAM_OUTCOMES)} series exist from the first stream, at 0.",
            [Target(sum_rate(streams_m, by="outcome"), "{{outcome}}")],
            unit="reqps",
            stack=True,
            overrides=outcome_overrides(),
        ),
        Panel(
            "Stream outcomes in the selected time range",
            "Count of ended streams per outcome over the dashboard's time range.",
            [
                Target(
                    f"sum by (outcome) (increase({streams_m}{sel()}[$__range]))",
                    "{{outcome}}",
                    instant=True,
                )
            ],
            kind="bargauge",
            unit="short",
            base_color="blue",
            overrides=outcome_overrides(),
        ),
        Panel(
            "Service-side abort ratio by provider / model",
            f"Streams ending with {SERVICE_ABORTS.replace('|', ', ')}, as a share of the ended stream requests not "
            f"{REJECTED}. Alert LlmtapStreamServiceAbortRatioHigh fires above 5%.",
            [Target(share(streams_m, f'outcome=~"{SERVICE_ABORTS}"', NOT_REJECTED), PM_LEGEND)],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Client-side abort ratio by provider / model",
            f"Streams ending with {CLIENT_ABORTS.replace('|', ', ')}, as a share of the ended stream requests not "
            f"{REJECTED}. Alert LlmtapStreamClientAbortRatioHigh fires above 10%.",
            [Target(share(streams_m, f'outcome=~"{CLIENT_ABORTS}"', NOT_REJECTED), PM_LEGEND)],
            unit="percentunit",
            steps=[("yellow", 0.05), ("red", 0.10)],
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Aborted streams by provider / model / outcome",
            f"Every outcome other than completed and {REJECTED}.",
            [
                Target(
                    sum_rate(streams_m, f'outcome!~"completed|{REJECTED}"', by=f"{BY}, outcome"),
                    PM_LEGEND + " {{outcome}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        Panel(
            "Rejected share of stream requests by provider / model",
            f"Stream requests answered with an HTTP error status before any stream body ({REJECTED}: 429, 529, "
            "4xx, 5xx), as a share of all stream requests. The SDKs retry most of them: see the Retries and rate "
            "limits dashboard for the statuses and the Overview for calls that failed after retries.",
            [Target(share(streams_m, eq("outcome", REJECTED)), PM_LEGEND)],
            unit="percentunit",
            steps=[("yellow", 0.05), ("red", 0.25)],
            show_thresholds=True,
            minimum=0,
        ),
        row("Chunks, stalls and concurrency"),
        Panel(
            "Time per output chunk (p50 / p95 / p99)",
            "Gap between consecutive streamed chunks after the first.",
            [
                Target(
                    quantile(q, NAME["gap"]),
                    f"p{int(q * 100)} {PM_LEGEND}",
                )
                for q in (0.5, 0.95, 0.99)
            ],
            unit="s",
            steps=[("yellow", 0.5), ("red", 1.0)],
            show_thresholds=True,
        ),
        Panel(
            "Stream stalls per second",
            "Inter-chunk gaps over the stall threshold.",
            [Target(sum_rate(NAME["stalls"]), PM_LEGEND)],
            unit="cps",
        ),
        Panel(
            "Stalls per 100 streams",
            "Stalls relative to stream volume: a rising value means slower token delivery, not more traffic.",
            [
                Target(
                    f"100 * sum by ({BY}) ({rate(NAME['stalls'])})\n/\n(sum by ({BY}) ({rate(streams_m)}) > 0)",
                    PM_LEGEND,
                )
            ],
            unit="short",
        ),
        Panel(
            "Parse errors per second",
            "Response data llmtap could not parse (malformed SSE, bad encodings, oversized events, garbage headers). "
            "Non-zero means a proxy or provider sends something unexpected; the attempt is still counted.",
            [Target(sum_rate(NAME["parse_errors"]), PM_LEGEND)],
            unit="cps",
        ),
        Panel(
            "Streams in flight by server",
            "Open streams per llmtap process (instance).",
            [Target(f"sum by (instance, {BY}) ({NAME['in_flight']}{sel()})", "{{instance}} " + PM_LEGEND)],
            unit="short",
            minimum=0,
            stack=True,
        ),
    ]
    return dashboard(
        "llmtap-streams",
        "llmtap / Streams",
        f"How streams end (all {len(STREAM_OUTCOMES)} outcomes), chunk pacing, stalls and concurrency.",
        panels,
    )


def retries_ratelimits() -> Json:
    attempts = NAME["attempts"]
    headroom = (
        f"min by ({BY}, resource) (\n  {NAME['ratelimit_remaining']}{sel()}\n  /\n"
        f"  ({NAME['ratelimit_limit']}{sel()} > 0)\n)"
    )

    def overloaded(by: str = BY) -> str:
        return (
            f"{agg(by)} (\n  {rate(attempts, eq('status_code', '529'))}\n  or\n"
            f"  {rate(attempts, eq('error_type', 'overloaded_error'))}\n)"
        )

    panels = [
        row("At a glance"),
        Panel(
            "Retries per second",
            "Attempts that were retries of an earlier failed attempt.",
            [Target(f"sum({rate(NAME['retries'])})")],
            kind="stat",
            unit="reqps",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "429 share of attempts",
            "Rate-limited attempts as a share of all attempts.",
            [Target(share(attempts, 'status_code="429"', by=""))],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            steps=PCT_WARN,
        ),
        Panel(
            "529 / overloaded per second",
            "HTTP 529 responses and overloaded_error stream events.",
            [Target(overloaded(""))],
            kind="stat",
            unit="reqps",
            width=6,
            height=4,
            steps=[("yellow", 0.01), ("red", 0.1)],
        ),
        Panel(
            "Lowest rate-limit headroom",
            "Smallest remaining/limit over all resources, providers and models.",
            [Target(f"min({headroom})")],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            base_color="red",
            steps=[("yellow", 0.10), ("green", 0.25)],
        ),
        row("Retries"),
        Panel(
            "Retries by reason",
            "What the previous attempt failed with (429, 529, 500, connection_error, timeout, ...).",
            [Target(sum_rate(NAME["retries"], by="reason"), "{{reason}}")],
            unit="reqps",
            stack=True,
        ),
        Panel(
            "Retries per logical call",
            "Average number of retries each SDK call needed.",
            [
                Target(
                    f"sum by ({BY}) ({rate(NAME['retries'])})\n/\n({hist_count(NAME['call_duration'])} > 0)",
                    PM_LEGEND,
                )
            ],
            unit="short",
            steps=[("yellow", 0.1), ("red", 0.5)],
            show_thresholds=True,
        ),
        Panel(
            "Server-advised retry-after (p50 / p95)",
            "retry-after values the server sent with 429/529 responses.",
            [Target(quantile(q, NAME["retry_after"]), f"p{int(q * 100)} {PM_LEGEND}") for q in (0.5, 0.95)],
            unit="s",
        ),
        Panel(
            "Responses carrying retry-after per second",
            "How often the server asked the client to back off.",
            [Target(hist_count(NAME["retry_after"]), PM_LEGEND)],
            unit="reqps",
        ),
        row("Throttling and overload"),
        Panel(
            "429 (rate limited) per second",
            "Attempts answered with HTTP 429.",
            [Target(sum_rate(attempts, 'status_code="429"'), PM_LEGEND)],
            unit="reqps",
        ),
        Panel(
            "429 share of attempts by provider / model",
            "Alert LlmtapRateLimitedSustained fires above 5% (over 5 minutes) for 15 minutes.",
            [Target(share(attempts, 'status_code="429"'), PM_LEGEND)],
            unit="percentunit",
            steps=PCT_WARN,
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "529 / overloaded per second",
            "HTTP 529 responses plus overloaded_error events inside 200 streams. "
            "Alert LlmtapOverloadedBurst fires above 2% of attempts.",
            [Target(overloaded(), PM_LEGEND)],
            unit="reqps",
        ),
        Panel(
            "Attempts by error type",
            "Only failed attempts.",
            [Target(sum_rate(attempts, 'error_type!=""', by="error_type"), "{{error_type}}")],
            unit="reqps",
            stack=True,
        ),
        row("Rate-limit headroom"),
        Panel(
            "Headroom (remaining / limit) by resource",
            "From the provider's rate-limit response headers. Alert LlmtapRateLimitHeadroomLow fires below 10%.",
            [Target(headroom, PM_LEGEND + " {{resource}}")],
            unit="percentunit",
            base_color="red",
            steps=[("yellow", 0.10), ("green", 0.25)],
            show_thresholds=True,
            minimum=0,
            maximum=1,
        ),
        Panel(
            "Time to rate-limit reset",
            "Seconds until the provider resets each budget (last value seen).",
            [
                Target(
                    f"max by ({BY}, resource) ({NAME['ratelimit_reset']}{sel()})",
                    PM_LEGEND + " {{resource}}",
                )
            ],
            unit="s",
        ),
        Panel(
            "Rate-limit remaining",
            "Remaining budget per resource (requests, tokens, input_tokens, output_tokens).",
            [
                Target(
                    f"min by ({BY}, resource) ({NAME['ratelimit_remaining']}{sel()})",
                    PM_LEGEND + " {{resource}}",
                )
            ],
            unit="short",
        ),
        Panel(
            "Rate-limit limit",
            "Budget per resource as advertised by the provider.",
            [
                Target(
                    f"max by ({BY}, resource) ({NAME['ratelimit_limit']}{sel()})",
                    PM_LEGEND + " {{resource}}",
                )
            ],
            unit="short",
        ),
    ]
    return dashboard(
        "llmtap-retries-ratelimits",
        "llmtap / Retries and rate limits",
        "Retries by reason, server-advised waits, 429/529 rates and rate-limit headroom.",
        panels,
    )


def tokens() -> Json:
    tok = NAME["tokens"]
    stops = NAME["stop_reasons"]

    def token_share(num_type: str, den_type: str, by: str = BY, window: str = RI) -> str:
        """Token-weighted: the part's tokens over all of ``den_type``'s. No series for a model whose provider
        never reported the part ("not reported"); 0 for one that reported 0 (llmtap counts reported zeros)."""
        den = f"{agg(by)} ({rate(tok, eq('gen_ai_token_type', den_type), window)})"
        num = f"{agg(by)} ({rate(tok, eq('gen_ai_token_type', num_type), window)})"
        return f"{num}\n/\n({den} > 0)"

    panels = [
        row("At a glance"),
        Panel(
            "Input tokens per second",
            "All input tokens, cached ones included.",
            [Target(f"sum({rate(tok, eq('gen_ai_token_type', 'input'))})")],
            kind="stat",
            unit="suffix: tok/s",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Output tokens per second",
            "Generated tokens (reasoning included where the provider counts it as output).",
            [Target(f"sum({rate(tok, eq('gen_ai_token_type', 'output'))})")],
            kind="stat",
            unit="suffix: tok/s",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Cache hit ratio",
            "cache_read / input (cache_read is a subset of input).",
            [Target(token_share("cache_read", "input", by=""))],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            base_color="blue",
        ),
        Panel(
            "Truncation share (max_tokens / length)",
            "Responses cut off by the output token limit, as a share of all responses with a stop reason.",
            [Target(share(stops, f'reason=~"{TRUNCATION_REASONS}"', by=""))],
            kind="stat",
            unit="percentunit",
            width=6,
            height=4,
            steps=[("yellow", 0.02), ("red", 0.05)],
        ),
        row("Token volume"),
        Panel(
            "Tokens per second by type (all 5)",
            "input (incl. cached), output, cache_read and cache_write (subsets of input), reasoning.",
            [
                Target(
                    f"sum({rate(tok, eq('gen_ai_token_type', t))})",
                    t,
                )
                for t in TOKEN_TYPES
            ],
            unit="suffix: tok/s",
        ),
        Panel(
            "Tokens in the selected time range by type",
            "Totals over the dashboard's time range.",
            [
                Target(
                    f"sum by (gen_ai_token_type) (increase({tok}{sel()}[$__range]))",
                    "{{gen_ai_token_type}}",
                    instant=True,
                )
            ],
            kind="bargauge",
            unit="short",
            base_color="blue",
        ),
        Panel(
            "Input tokens per second by provider / model",
            "All input tokens, cached ones included.",
            [Target(sum_rate(tok, 'gen_ai_token_type="input"'), PM_LEGEND)],
            unit="suffix: tok/s",
            stack=True,
        ),
        Panel(
            "Output tokens per second by provider / model",
            "Generated tokens.",
            [Target(sum_rate(tok, 'gen_ai_token_type="output"'), PM_LEGEND)],
            unit="suffix: tok/s",
            stack=True,
        ),
        Panel(
            "Tokens per request (p50 / p95) by type",
            "Distribution of input and output tokens per request.",
            [Target(token_quantile(q), f"p{int(q * 100)} {{{{gen_ai_token_type}}}} {PM_LEGEND}") for q in (0.5, 0.95)],
            unit="short",
        ),
        Panel(
            "Reasoning tokens per second by provider / model",
            "Tokens spent on hidden reasoning (providers that report it).",
            [Target(sum_rate(tok, 'gen_ai_token_type="reasoning"'), PM_LEGEND)],
            unit="suffix: tok/s",
        ),
        row("Prompt caching"),
        Panel(
            "Cache hit ratio (cache_read / input) by provider / model",
            "Share of input tokens served from the prompt cache, token-weighted. A model whose provider never "
            "reports cache reads has no line (not reported), one that reports none reads 0.",
            [Target(token_share("cache_read", "input"), PM_LEGEND)],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        Panel(
            "Cache hit ratio, last 30 minutes vs 6 hours",
            "What alert LlmtapPromptCacheHitRatioDrop compares: it fires when the 30-minute ratio falls under "
            "half of its baseline, the 6-hour ratio of the 6 hours before those 30 minutes (a baseline of at "
            "least 20%, at least 100k input tokens in the 30 minutes).",
            [
                Target(token_share("cache_read", "input", window="30m"), PM_LEGEND + " (30m)"),
                Target(token_share("cache_read", "input", window="6h"), PM_LEGEND + " (6h)"),
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        Panel(
            "Tokens read from the prompt cache per second by provider / model",
            "Input tokens the provider served from its cache (cache_read).",
            [Target(sum_rate(tok, 'gen_ai_token_type="cache_read"'), PM_LEGEND)],
            unit="suffix: tok/s",
        ),
        Panel(
            "Cache write share (cache_write / input) by provider / model",
            "Share of input tokens written to the prompt cache (billed at a premium by some providers).",
            [Target(token_share("cache_write", "input"), PM_LEGEND)],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        row("Context window"),
        Panel(
            "Attempts with input over 90% of the context window, share by provider / model",
            "Of the attempts whose model's context window llmtap knows, the share whose input tokens (cache reads "
            "and writes included) were above 90% of it. Alert LlmtapContextWindowOver90PctRatioHigh fires above "
            "10% for 15 minutes.",
            [Target(context_over(0.9), PM_LEGEND)],
            unit="percentunit",
            steps=[("yellow", 0.05), ("red", 0.1)],
            show_thresholds=True,
            minimum=0,
        ),
        Panel(
            "Context window used per attempt (p50 / p95 / p99) by provider / model",
            "Input tokens (cache reads and writes included) over the model's context window (genai-prices' table "
            "with Settings.cost, or Settings.context_windows); the buckets resolve 50-100%, above 1 is over the "
            "window.",
            [
                Target(quantile(q, NAME["context_utilization"]), f"p{int(q * 100)} {PM_LEGEND}")
                for q in (0.5, 0.95, 0.99)
            ],
            unit="percentunit",
            minimum=0,
        ),
        Panel(
            "Attempts whose model's context window is unknown per second by provider / model",
            "Attempts that reported input tokens for a model in neither Settings.context_windows nor the table "
            "llmtap reads: not measured above, never guessed. Give their window in Settings.context_windows.",
            [Target(sum_rate(NAME["context_unknown"]), PM_LEGEND)],
            unit="reqps",
        ),
        row("Cost (Settings.cost)"),
        Panel(
            "Cost per hour (USD) by provider / model",
            "What the attempts cost, from the reported tokens and the price table (genai-prices, or "
            "Settings.prices). Empty unless llmtap runs with Settings.cost / LLMTAP_COST=true.",
            [Target(f"{sum_rate(NAME['cost'])} * 3600", PM_LEGEND)],
            unit="currencyUSD",
        ),
        Panel(
            "Cost per hour (USD) by token type",
            "Uncached input, output (reasoning included), cache reads and cache writes, each at its own rate.",
            [Target(f"{sum_rate(NAME['cost'], by='gen_ai_token_type')} * 3600", "{{gen_ai_token_type}}")],
            unit="currencyUSD",
            stack=True,
        ),
        Panel(
            "Cost per call (USD) by provider / model",
            "Mean cost of one logical SDK call (its retries included).",
            [
                Target(
                    f"{sum_rate(NAME['cost'])}\n/\n({hist_count(NAME['call_duration'])} > 0)",
                    PM_LEGEND,
                )
            ],
            unit="currencyUSD",
            decimals=4,
        ),
        Panel(
            "Cache savings per hour (USD) by provider / model",
            "What the cache reads saved against the same tokens as plain input.",
            [Target(f"{sum_rate(NAME['cost_savings'])} * 3600", PM_LEGEND)],
            unit="currencyUSD",
        ),
        Panel(
            "Unpriced attempts per second by provider / model",
            "Attempts whose model has no known price: their cost is missing above, never guessed. "
            "Give their price in Settings.prices.",
            [Target(sum_rate(NAME["unpriced"]), PM_LEGEND)],
            unit="reqps",
        ),
        row("Stop reasons"),
        Panel(
            "Stop reasons",
            "Why responses ended: end_turn/stop, tool_use/tool_calls, max_tokens/length, stop_sequence, "
            "content_filter, ...",
            [Target(sum_rate(stops, by="reason"), "{{reason}}")],
            unit="reqps",
            stack=True,
        ),
        Panel(
            "Truncation share (max_tokens / length) by provider / model",
            "Alert LlmtapMaxTokensTruncationHigh fires above 5% for 30 minutes.",
            [Target(share(stops, f'reason=~"{TRUNCATION_REASONS}"'), PM_LEGEND)],
            unit="percentunit",
            steps=[("yellow", 0.02), ("red", 0.05)],
            show_thresholds=True,
            minimum=0,
        ),
    ]
    return dashboard(
        "llmtap-tokens",
        "llmtap / Tokens",
        "Token volume by type (input, output, cache_read, cache_write, reasoning), cache hit ratio, context window, "
        "stop reasons and max_tokens truncation.",
        panels,
    )


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------

DASHBOARDS: dict[str, Any] = {
    "llmtap-overview.json": overview,
    "llmtap-streams.json": streams,
    "llmtap-retries-ratelimits.json": retries_ratelimits,
    "llmtap-tokens.json": tokens,
}


def build_all() -> dict[str, Json]:
    """File name -> dashboard JSON object."""
    return {name: fn() for name, fn in DASHBOARDS.items()}


def render(obj: Json) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _iter_panels(panels: list[Json]) -> Iterator[Json]:
    for p in panels:
        yield p
        yield from _iter_panels(p.get("panels", []))


def all_expressions() -> list[PanelExpr]:
    """Every PromQL expression used by a dashboard panel, with its dashboard uid and panel title."""
    out: list[PanelExpr] = []
    for dash in build_all().values():
        for panel in _iter_panels(dash["panels"]):
            for target in panel.get("targets", []):
                out.append(PanelExpr(dash["uid"], panel["title"], target["refId"], target["expr"]))
    return out


def template_queries() -> list[TemplateQuery]:
    """Every ``label_values`` template-variable query, per dashboard."""
    out: list[TemplateQuery] = []
    for dash in build_all().values():
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append(TemplateQuery(dash["uid"], var["name"], var["definition"]))
    return out


# Values substituted for Grafana's variables when an expression is checked outside Grafana (tests).
CONCRETE_VARIABLES: dict[str, str] = {
    "provider": ".*",
    "model": ".*",
    "job": ".*",
    "server": ".*",
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}
_VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def concrete(expr: str, values: Mapping[str, str] | None = None) -> str:
    """``expr`` with Grafana's ``$var`` / ``${var}`` references replaced by concrete values.

    Raises ``KeyError`` for a variable that has no value (e.g. a typo in a panel query).
    """
    table = {**CONCRETE_VARIABLES, **(values or {})}
    return _VAR_RE.sub(lambda m: table[m.group(1) or m.group(2)], expr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON files are not up to date")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: dashboards/)")
    args = parser.parse_args(argv)
    out_dir: Path = args.out
    wanted = {name: render(obj) for name, obj in build_all().items()}
    if args.check:
        stale = [n for n, text in wanted.items() if not (out_dir / n).is_file() or (out_dir / n).read_text() != text]
        extra = sorted(p.name for p in out_dir.glob("llmtap-*.json") if p.name not in wanted)
        for n in stale:
            print(f"{out_dir / n}: out of date; run `python dashboards/build.py`", file=sys.stderr)
        for n in extra:
            print(f"{out_dir / n}: not generated by build.py; delete it or add it to build.py", file=sys.stderr)
        return 1 if stale or extra else 0
    out_dir.mkdir(parents=True, exist_ok=True)
    for n, text in wanted.items():
        (out_dir / n).write_text(text)
        print(f"wrote {out_dir / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
