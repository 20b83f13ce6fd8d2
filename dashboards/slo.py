#!/usr/bin/env python3
"""Generate llmtap's SLO rules (``dashboards/slo-rules.yaml``) from ``dashboards/slo.toml``.

Usage::

    python dashboards/slo.py           # (re)write dashboards/slo-rules.yaml
    python dashboards/slo.py --check   # exit 1 if the committed file differs from what this script writes

The spec sets the objectives, the latency threshold, the budget period and the burn-rate windows; this
script fixes what each SLO counts, from llmtap's own outcome groups (``llmtap._core.record``) and metric table
(``llmtap._core.metrics``):

* ``call_availability``: logical SDK calls whose last attempt ended in ``FAILED`` (rejected, server_error,
  connection_error, timeout, incomplete) are bad, out of all calls (``llmtap_call_duration_seconds_count``);
* ``stream_availability``: stream requests ended service-side (``SERVICE_SIDE``) are bad, out of the stream
  requests not rejected (``llmtap_streams_total``);
* ``call_latency``: calls whose first content token came later than ``threshold_seconds`` are bad, out of
  the calls with a first token (``llmtap_call_time_to_first_token_seconds``; the threshold must be one of
  its bucket boundaries).

For each SLO: one error-ratio recording rule per window, and one alert per ``[[alert]]`` entry of the spec
(multiwindow, multi-burn-rate: every (long, short) pair over its burn rate, pairs joined by ``or``). The
alert's value is the burn rate over the long window. ``dashboards/build.py`` reads the same spec for the
Overview's "Error budgets" row (:func:`load` and :meth:`Slo.ratio`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from llmtap._core import metrics as contract
from llmtap._core.record import ALL_OUTCOMES, FAILED, SERVICE_SIDE, Outcome

HERE = Path(__file__).resolve().parent


def sibling(name: str) -> ModuleType:
    """The module ``name`` beside this script (``promql``), loaded once whatever the working directory: the
    scripts of ``dashboards/`` are no package."""
    key = f"llmtap_dashboards_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


promql = sibling("promql")

SPEC = HERE / "slo.toml"
RULES = HERE / "slo-rules.yaml"

NAME: dict[str, str] = {i.key: i.prometheus() for i in contract.INSTRUMENTS}
RULE_BY = "job, gen_ai_provider_name, gen_ai_request_model"
FAILED_OUTCOMES = "|".join(o.value for o in ALL_OUTCOMES if o in FAILED)
SERVICE_OUTCOMES = "|".join(o.value for o in ALL_OUTCOMES if o in SERVICE_SIDE)
_DURATION = re.compile(r"^(\d+)([mhd])$")
_SECONDS = {"m": 60, "h": 3600, "d": 86400}


class SpecError(ValueError):
    """``slo.toml`` says something this script cannot generate rules from."""


def seconds(duration: str) -> int:
    """``"5m"`` -> 300; the spec's durations are whole minutes, hours or days."""
    m = _DURATION.match(duration)
    if m is None:
        raise SpecError(f"duration {duration!r}: expected a whole number of m, h or d (5m, 1h, 3d)")
    return int(m.group(1)) * _SECONDS[m.group(2)]


def _number(value: float) -> str:
    """A float as PromQL / prose writes it (``0.005``, ``14.4``, ``6``)."""
    return f"{value:.10g}"


def _sum(by: str, expr: str) -> str:
    return f"sum by ({by}) ({expr})" if by else f"sum ({expr})"


class Window(NamedTuple):
    long: str
    short: str
    burn_rate: float


class AlertSpec(NamedTuple):
    name: str
    severity: str
    for_: str
    windows: tuple[Window, ...]


class Slo(NamedTuple):
    """One SLO: what it counts (fixed here) and its objective (from the spec)."""

    key: str
    alert_prefix: str
    record: str
    """Recording-rule metric name part: ``llmtap:{record}:ratio_rate{window}``."""
    title: str
    what_bad: str
    """The bad events, in prose, for annotations and panel descriptions."""
    objective: float
    threshold: float | None = None

    @property
    def budget(self) -> float:
        """The error budget as a ratio: ``1 - objective``."""
        return round(1.0 - self.objective, 12)

    def ratio(self, window: str, selector: str = "", by: str = RULE_BY) -> str:
        """PromQL: the share of bad events over ``window``, per ``by`` (no sample without events). The call SLOs
        read histograms, classic or native (``dashboards/promql.py``)."""
        if self.key == "call_availability":
            c = NAME["call_duration"]
            bad = promql.count(c, window, selector, f"outcome=~{json.dumps(FAILED_OUTCOMES)}")
            total = promql.count(c, window, selector)
            return f"{_sum(by, f'{bad} or ({total}) * 0')}\n/ ({_sum(by, total)} > 0)"
        if self.key == "stream_availability":
            s = NAME["streams"]
            bad = f"rate({s}{promql.matchers(selector, f'outcome=~{json.dumps(SERVICE_OUTCOMES)}')}[{window}])"
            started = promql.matchers(selector, f"outcome!={json.dumps(Outcome.REJECTED.value)}")
            return f"{_sum(by, bad)}\n/ ({_sum(by, f'rate({s}{started}[{window}])')} > 0)"
        h = NAME["call_ttft"]
        count = _sum(by, promql.count(h, window, selector))
        fast = _sum(by, promql.under(h, _number(self.threshold or 0.0), window, selector))
        return f"(\n  {count}\n  - {fast}\n)\n/ ({count} > 0)"

    def events(self, window: str, selector: str = "", by: str = RULE_BY) -> str:
        """PromQL: how many events (the ratio's denominator) happened over ``window``."""
        if self.key == "stream_availability":
            started = promql.matchers(selector, f"outcome!={json.dumps(Outcome.REJECTED.value)}")
            return _sum(by, f"increase({NAME['streams']}{started}[{window}])")
        histogram = NAME["call_duration"] if self.key == "call_availability" else NAME["call_ttft"]
        return _sum(by, promql.count(histogram, window, selector, fn="increase"))

    def record_name(self, window: str) -> str:
        return f"llmtap:{self.record}:ratio_rate{window}"


class Spec(NamedTuple):
    period: str
    min_events: int
    slos: tuple[Slo, ...]
    alerts: tuple[AlertSpec, ...]

    @property
    def windows(self) -> tuple[str, ...]:
        """Every window a rule needs, shortest first."""
        used = {w for a in self.alerts for pair in a.windows for w in (pair.long, pair.short)}
        return tuple(sorted(used, key=seconds))


_KINDS = {
    "call_availability": (
        "LlmtapCallAvailability",
        "slo_calls_failed",
        "Call availability",
        "SDK calls that failed after the SDK's retries",
    ),
    "stream_availability": (
        "LlmtapStreamAvailability",
        "slo_streams_interrupted",
        "Stream availability",
        "stream requests not rejected that were ended service-side (server_error, connection_error, timeout, "
        "incomplete)",
    ),
    "call_latency": (
        "LlmtapCallLatency",
        "slo_calls_slow",
        "Call time to first token",
        "SDK calls whose first content token came later than {threshold} s after the call's start",
    ),
}


def load(path: Path = SPEC) -> Spec:
    """The spec, validated.

    Raises:
        SpecError: an unknown or missing SLO, an objective outside (0, 1), a latency threshold that is not
            a bucket boundary, a bad duration, severity or burn rate.
    """
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: {exc}") from exc
    try:
        period = str(raw["period"])
        seconds(period)
        min_events = int(raw["min_events"])
        slos_raw = raw["slo"]
        alerts_raw = raw["alert"]
    except KeyError as exc:
        raise SpecError(f"{path}: missing {exc}") from exc
    if set(slos_raw) != set(_KINDS):
        raise SpecError(f"{path}: [slo.*] must be exactly {sorted(_KINDS)}, got {sorted(slos_raw)}")
    buckets = contract.by_key()["call_ttft"].buckets
    slos = []
    for key, (prefix, record, title, what) in _KINDS.items():
        entry = slos_raw[key]
        objective = float(entry["objective"])
        if not 0.0 < objective < 1.0:
            raise SpecError(f"{path}: slo.{key}.objective must be between 0 and 1, got {objective}")
        threshold = None
        if key == "call_latency":
            threshold = float(entry["threshold_seconds"])
            if threshold not in buckets:
                raise SpecError(
                    f"{path}: slo.call_latency.threshold_seconds {threshold} is not a bucket boundary of "
                    f"{NAME['call_ttft']} ({', '.join(_number(b) for b in buckets)})"
                )
        slos.append(
            Slo(key, prefix, record, title, what.format(threshold=_number(threshold or 0.0)), objective, threshold)
        )
    alerts = []
    for entry in alerts_raw:
        severity = str(entry["severity"])
        if severity not in ("critical", "warning"):
            raise SpecError(f"{path}: alert {entry.get('name')!r}: severity must be critical or warning")
        windows = []
        for w in entry["windows"]:
            pair = Window(str(w["long"]), str(w["short"]), float(w["burn_rate"]))
            if not seconds(pair.short) < seconds(pair.long) or pair.burn_rate <= 0:
                raise SpecError(f"{path}: alert {entry['name']!r}: window {pair}: short < long and burn_rate > 0")
            windows.append(pair)
        seconds(str(entry["for"]))
        alerts.append(AlertSpec(str(entry["name"]), severity, str(entry["for"]), tuple(windows)))
    return Spec(period, min_events, tuple(slos), tuple(alerts))


# --------------------------------------------------------------------------------------------------
# Rendering (plain text: this script needs nothing beyond the standard library and llmtap)
# --------------------------------------------------------------------------------------------------

_RUNBOOKS = {
    "call_availability": (
        'Overview dashboard, "Call failure ratio after retries" and "Logical call rate by outcome": which '
        "outcome do the failed calls end with?",
        'rejected: which status (Overview, "Attempts by status code / error type"); 429 / 529 outlasting the '
        "retries: see LlmtapRateLimitedSustained / LlmtapOverloadedBurst; 4xx: see LlmtapBadRequestRatioHigh.",
        "server_error / connection_error / timeout / incomplete: see the LlmtapStreamServiceAbortRatioHigh runbook.",
        "Check the SDK's max_retries and timeouts, the provider's status page; consider failing over.",
    ),
    "stream_availability": (
        'Streams dashboard, "Aborted streams by provider / model / outcome": which outcome dominates?',
        "server_error: error events inside started streams (overloaded_error ...); check the provider's status page.",
        "connection_error / timeout / incomplete: proxies, load balancers and client read timeouts cutting "
        "streams (see the LlmtapStreamServiceAbortRatioHigh runbook).",
    ),
    "call_latency": (
        'Overview dashboard: "Time to first token per call, retries included" against the per-attempt one; if '
        "only the per-call one is high, retries and backoff are the cause (Retries and rate limits dashboard).",
        "If the per-attempt time to first token is high too: prompt size and cache hit ratio (Tokens dashboard), "
        "reasoning before the first token.",
        "Check the provider's status page; consider routing latency-sensitive traffic to a faster model.",
    ),
}


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.10g}%"


def _days(period: str, burn_rate: float) -> str:
    days = seconds(period) / 86400 / burn_rate
    return f"{days:.3g} days" if days >= 1 else f"{days * 24:.3g} hours"


def _alert(spec: Spec, slo: Slo, alert: AlertSpec) -> list[str]:
    budget = _number(slo.budget)
    branches = []
    for pair in alert.windows:
        rate = _number(pair.burn_rate)
        branches.append(
            f"(\n  {slo.record_name(pair.long)} / {budget} > {rate}\n  and\n"
            f"  {slo.record_name(pair.short)} / {budget} > {rate}\n"
            f"  and on ({RULE_BY})\n  {slo.events(pair.short)} >= {spec.min_events}\n)"
        )
    expr = "\nor\n".join(branches)
    pairs = ", or ".join(
        f"above {_number(p.burn_rate)} times its error budget over both the last {p.long} and the last {p.short}"
        for p in alert.windows
    )
    lasts = ", ".join(f"at {_number(p.burn_rate)}x in {_days(spec.period, p.burn_rate)}" for p in alert.windows)
    shortest = ", ".join(p.short for p in alert.windows)
    longs = ", else ".join(p.long for p in alert.windows)
    who = "{{ $labels.gen_ai_provider_name }}/{{ $labels.gen_ai_request_model }}"
    value = '{{ $value | printf "%.1f" }}'
    summary = f"{who}: {slo.title} error budget burning at {value}x ({slo.key}, objective {_percent(slo.objective)})"
    description = (
        f"In job {{{{ $labels.job }}}}, the share of {slo.what_bad} for {{{{ $labels.gen_ai_provider_name }}}} "
        f"model {{{{ $labels.gen_ai_request_model }}}} is {pairs} (objective {_percent(slo.objective)}: the budget "
        f"is {_percent(slo.budget)} of these events; at least {spec.min_events} events in the short window, "
        f"{shortest}). Burn rate over the long window ({longs}): {value}x. At these burn rates the "
        f"{spec.period} budget is spent {lasts}."
    )
    runbook = "".join(f"{i}. {step}\n" for i, step in enumerate(_RUNBOOKS[slo.key], start=1))
    threshold = " or ".join(f"{p.long}/{p.short} > {_number(p.burn_rate)}x" for p in alert.windows)
    lines = [
        f"      # Threshold: error ratio over {threshold} the budget {budget} (objective {_percent(slo.objective)},",
        f"      # slo.toml), with >= {spec.min_events} events in the short window.",
        f"      - alert: {slo.alert_prefix}BudgetBurn{alert.name.removesuffix('Burn')}",
        "        expr: |",
        *(f"          {line}" for line in expr.splitlines()),
        f"        for: {alert.for_}",
        "        labels:",
        f"          severity: {alert.severity}",
        f"          slo: {slo.key}",
        "        annotations:",
        f"          summary: {json.dumps(summary, ensure_ascii=False)}",
        f"          description: {json.dumps(description, ensure_ascii=False)}",
        "          runbook: |",
        *(f"            {line}" for line in runbook.splitlines()),
    ]
    return lines


def render(spec: Spec) -> str:
    out = [
        "# llmtap SLO rules: error-ratio recording rules and multiwindow, multi-burn-rate alerts.",
        "# GENERATED by dashboards/slo.py from dashboards/slo.toml: edit those, never this file",
        "# (`python dashboards/slo.py`, then `python dashboards/slo.py --check`).",
        "#",
        "# Load next to alerts.yaml (`rule_files: [alerts.yaml, slo-rules.yaml]`). Each SLO's error ratio is",
        "# recorded per (job, gen_ai_provider_name, gen_ai_request_model) over every window the alerts use.",
        "",
        "# One group: its rules are evaluated in order, so each alert reads the ratios of the same evaluation.",
        "groups:",
        "  - name: llmtap.slo",
        "    rules:",
    ]
    for slo in spec.slos:
        out.append(f"      # {slo.key}: objective {_percent(slo.objective)}; bad = {slo.what_bad}.")
        for window in spec.windows:
            out += [f"      - record: {slo.record_name(window)}", "        expr: |"]
            out += [f"          {line}" for line in slo.ratio(window).splitlines()]
    out.append("")
    for slo in spec.slos:
        for alert in spec.alerts:
            out += _alert(spec, slo, alert)
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if slo-rules.yaml is not what the spec gives")
    parser.add_argument("--spec", type=Path, default=SPEC, help="the SLO spec (default: dashboards/slo.toml)")
    parser.add_argument("--out", type=Path, default=RULES, help="the rule file (default: dashboards/slo-rules.yaml)")
    args = parser.parse_args(argv)
    try:
        text = render(load(args.spec))
    except (SpecError, KeyError, TypeError, ValueError) as exc:
        print(f"slo.py: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run `python dashboards/slo.py` and commit the result", file=sys.stderr)
            return 1
        print(f"{args.out.name} is up to date")
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
