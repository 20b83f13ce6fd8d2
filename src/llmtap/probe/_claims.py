"""The claims phase: each published claim (a response header, a TTFT, a latency formula) tested
against the measurements, listed in the order the claims were given.

A header claim's test is its presence on every HTTP response the probe received; a TTFT claim's, the
95% confidence interval of the median TTFT; a latency claim's, the fit's 95% simultaneous band. With
too few measurements a claim is untested (``holds`` None); when nothing could be measured, every
claim is.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from ._formula import CLAIM_KINDS, Band, Formula, parse_band, parse_formula
from ._headers import HeaderLog
from ._options import ProbeOptions
from ._report import ClaimResult, ModelLatency, Sample, completed
from ._stats import LinearFit, median_ci
from ._words import plural

__all__ = ["check_header", "check_latency", "check_ttft", "judge"]

HEADER_TEST = "presence of the response header on every HTTP response the probe received"

TTFT_TEST = (
    "95% distribution-free confidence interval of the median TTFT (binomial order statistics) "
    "compared with the claimed interval: consistent when they overlap"
)
LATENCY_TEST = (
    "least-squares fit duration = a + b*output_tokens; consistent when the claimed formula stays inside "
    "the fit's 95% Working-Hotelling simultaneous confidence band (widened by the claim's ± tolerance) "
    "at every measured output length"
)


def check_ttft(band: Band, ttfts: Sequence[float]) -> ClaimResult:
    label = _ttft_label(band)
    if len(ttfts) < 6:
        finding = f"only {plural(len(ttfts), 'TTFT')} measured (from completed streams); need at least 6"
        return ClaimResult("ttft", label, None, TTFT_TEST, finding)
    lo, hi = median_ci(ttfts)
    med = statistics.median(ttfts)
    inside = sum(band.low <= t <= band.high for t in ttfts)
    holds = lo <= band.high and hi >= band.low
    finding = (
        f"median TTFT {med * 1000:.1f} ms (95% CI {lo * 1000:.1f}-{hi * 1000:.1f} ms) over {len(ttfts)} requests; "
        f"claimed {band.low * 1000:.1f}-{band.high * 1000:.1f} ms; {inside}/{len(ttfts)} requests fell inside it"
    )
    return ClaimResult("ttft", label, holds, TTFT_TEST, finding)


def check_latency(formula: Formula, fit: LinearFit | None, input_tokens: float = 0.0) -> ClaimResult:
    label = _latency_label(formula)
    if fit is None or fit.n < 4:
        return ClaimResult(
            "latency", label, None, LATENCY_TEST, "not enough completed streams with varied lengths to fit"
        )
    worst_x, worst_excess, worst = fit.x_min, -math.inf, (0.0, 0.0, 0.0)
    steps = 50
    for i in range(steps + 1):
        x = fit.x_min + (fit.x_max - fit.x_min) * i / steps
        claimed, fitted, half = formula(x, input_tokens), fit.predict(x), fit.band(x)
        excess = abs(claimed - fitted) - half - formula.tolerance
        if excess > worst_excess:
            worst_x, worst_excess, worst = x, excess, (claimed, fitted, half)
    claimed, fitted, half = worst
    holds = worst_excess <= 0
    where = f"at {worst_x:.0f} output tokens" if holds else f"worst at {worst_x:.0f} output tokens"
    finding = (
        f"fit a = {fit.a * 1000:.1f} ms, b = {fit.b * 1000:.3f} ms/token over {fit.x_min:.0f}-{fit.x_max:.0f} tokens "
        f"(n = {fit.n}); {where}: claimed {claimed * 1000:.1f} ms, fitted {fitted * 1000:.1f} ± {half * 1000:.1f} ms"
    )
    return ClaimResult("latency", label, holds, LATENCY_TEST, finding)


def check_header(name: str, log: HeaderLog) -> ClaimResult:
    """Holds when the header was on every response (on 7 of 8 it does not: the finding names the statuses
    of the responses without it)."""
    label = f"header {name}"
    if log.responses == 0:
        return ClaimResult("header", label, None, HEADER_TEST, "no HTTP response was received")
    present = log.names.get(name.lower(), 0)
    if present == 0:
        finding = f"{name} is absent: it was on none of the {plural(log.responses, 'response')}"
        return ClaimResult("header", label, False, HEADER_TEST, f"{finding} ({_statuses(log.statuses)})")
    example = log.example(name)
    shown = f" (e.g. {example!r})" if example is not None else " (value withheld)"
    if present == log.responses:
        finding = f"{name} was present on all {plural(log.responses, 'response')}{shown}"
        return ClaimResult("header", label, True, HEADER_TEST, finding)
    missing = log.missing(name)
    finding = (
        f"{name} was present on {present} of {plural(log.responses, 'response')}{shown}; missing on "
        f"{plural(sum(missing.values()), 'response')} ({_statuses(missing)})"
    )
    return ClaimResult("header", label, False, HEADER_TEST, finding)


def _statuses(tally: Mapping[int, int]) -> str:
    """``statuses 200x25, 404x1`` / ``status 404x1``."""
    return ("status " if len(tally) == 1 else "statuses ") + (
        ", ".join(f"{s}x{n}" for s, n in sorted(tally.items())) or "none"
    )


def judge(
    o: ProbeOptions,
    latency: Sequence[ModelLatency],
    samples: Sequence[Sample],
    log: HeaderLog,
    cannot_probe: str | None,
) -> tuple[ClaimResult, ...]:
    """Every claim in ``o``, tested per model (TTFT, latency), in the order given (``o.claim_order``)."""
    band = parse_band(o.expect_ttft) if o.expect_ttft else None
    formula = parse_formula(o.expect_latency) if o.expect_latency else None
    if cannot_probe is not None:
        return _in_given_order(_untested(o, band, formula, f"not tested: {cannot_probe}"), o.claim_order)
    by_kind: dict[str, list[ClaimResult]] = {kind: [] for kind in CLAIM_KINDS}
    by_kind["header"] = [check_header(name, log) for name in o.expect_headers]
    for m in latency:
        label = f" [{m.model}]" if len(latency) > 1 else ""
        ok = completed(samples, m.model)
        if band is not None:
            ttfts = [x.time_to_first_token for x in ok if x.time_to_first_token is not None]
            by_kind["ttft"].append(_labelled(check_ttft(band, ttfts), label))
        if formula is not None:
            inputs = [x.input_tokens for x in ok if x.input_tokens is not None]
            result = check_latency(formula, m.duration_fit, statistics.median(inputs) if inputs else 0.0)
            by_kind["latency"].append(_labelled(result, label))
    return _in_given_order(by_kind, o.claim_order)


def _untested(o: ProbeOptions, band: Band | None, formula: Formula | None, why: str) -> dict[str, list[ClaimResult]]:
    return {
        "header": [ClaimResult("header", f"header {name}", None, HEADER_TEST, why) for name in o.expect_headers],
        "ttft": [ClaimResult("ttft", _ttft_label(band), None, TTFT_TEST, why)] if band else [],
        "latency": [ClaimResult("latency", _latency_label(formula), None, LATENCY_TEST, why)] if formula else [],
    }


def _in_given_order(by_kind: Mapping[str, list[ClaimResult]], order: Sequence[str]) -> tuple[ClaimResult, ...]:
    """``order`` names the kind of each claim as given: a "header" takes the next header claim, a "ttft"
    or "latency" all of that kind (one per model). What ``order`` does not place follows in kind order."""
    pending = {kind: list(results) for kind, results in by_kind.items()}
    out: list[ClaimResult] = []
    for kind in order:
        take = pending[kind][:1] if kind == "header" else pending[kind]
        out.extend(take)
        pending[kind] = pending[kind][len(take) :]
    for kind in CLAIM_KINDS:
        out.extend(pending[kind])
    return tuple(out)


def _labelled(result: ClaimResult, label: str) -> ClaimResult:
    if not label:
        return result
    return ClaimResult(result.kind, result.claim + label, result.holds, result.test, result.finding)


def _ttft_label(band: Band) -> str:
    return f"TTFT {band.text} s"


def _latency_label(formula: Formula) -> str:
    return f"duration = {formula.text}"
