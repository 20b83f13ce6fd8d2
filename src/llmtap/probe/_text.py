"""The report as terminal text, and the words for its numbers (times, verdicts, fits) that the HTML page shares."""

from __future__ import annotations

import math

from ._report import ModelLatency, ProbeReport, completed
from ._stats import LinearFit, Summary
from ._words import counts, plural

__all__ = ["fit_text", "ms", "render_text", "request_counts", "summary_rows", "value_text", "verdict", "why_unfit"]


def ms(seconds: float | None) -> str:
    """Seconds as ``12.3 ms`` (``12.5 s`` from 10 s up); ``-`` when missing or not finite."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if abs(seconds) >= 10:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.1f} ms"


def verdict(holds: bool | None) -> str:
    """A claim's verdict in words: ``HOLDS``, ``DOES NOT HOLD`` or ``UNTESTED`` (``None``: not tested)."""
    return {True: "HOLDS", False: "DOES NOT HOLD", None: "UNTESTED"}[holds]


def summary_rows(m: ModelLatency) -> list[tuple[str, Summary | None, bool]]:
    """The rows of a model's latency table: ``(label, summary or None, is a time)``."""
    return [
        ("time to headers", m.time_to_headers, True),
        ("time to first body bytes", m.time_to_first_chunk, True),
        ("time to first token", m.time_to_first_token, True),
        ("total duration", m.duration, True),
        ("output tokens/s", m.tokens_per_second, False),
    ]


def request_counts(m: ModelLatency) -> str:
    """``20 streaming requests: 18 completed, 2 timeout``."""
    return f"{plural(m.requests, 'streaming request')}: {counts(m.outcomes)}"


def value_text(value: float, is_time: bool) -> str:
    """A latency-table value: a time as :func:`ms` does, a rate as a whole number."""
    return ms(value) if is_time else f"{value:.0f}"


def why_unfit(report: ProbeReport, model: str, x: str) -> str:
    """Why a fit of duration or TTFT against ``x`` (``output_tokens`` / ``input_tokens``) is not identifiable."""
    done = completed(report.samples, model)
    values = [v for s in done if (v := getattr(s, x)) is not None]
    if len(values) < 3:
        return f"not identifiable: {plural(len(values), 'completed request')} with {x}, 3 needed"
    if len(set(values)) == 1:
        return (
            f"not identifiable: all {len(values)} completed requests had {x} = {values[0]}, no slope to fit "
            "(the endpoint gave one length whatever was asked; `llmtap simulate` does unless started with "
            "--scenario fill,count_input,...)"
        )
    return "not identifiable"


def fit_text(fit: LinearFit | None, x: str, unfit: str = "not identifiable") -> str:
    """A fit against ``x`` as ``a [CI] + b ms [CI] x x`` with its n, R² and residual sd; ``unfit`` without one."""
    if fit is None:
        return unfit
    a_lo, a_hi = fit.a_ci
    b_lo, b_hi = fit.b_ci
    return (
        f"{ms(fit.a)} [{ms(a_lo)} .. {ms(a_hi)}] + {fit.b * 1000:.4f} ms [{b_lo * 1000:.4f} .. {b_hi * 1000:.4f}]"
        f" x {x}   (95% CIs; n={fit.n}, R²={fit.r2:.4f}, residual sd {ms(fit.s)}, {x} {fit.x_min:.0f}-{fit.x_max:.0f})"
    )


def render_text(report: ProbeReport) -> str:
    """The terminal report: plain text, one section per phase."""
    t = report.target
    out: list[str] = []
    w = out.append
    where = "embedded simulator" if t.simulated else "endpoint"
    w(f"llmtap probe: {t.provider} at {t.base_url} ({where})")
    if t.simulated:
        w(f"  injected behaviour (x-llmtap-sim syntax): {t.sim_scenario}")
    w(
        f"  {t.sdk} · llmtap {t.llmtap_version} · {t.started_at} · "
        f"{t.seconds:.1f} s of a {t.budget_seconds:.0f} s budget"
    )
    if t.stopped_early:
        w(f"  stopped early: {t.stopped_early}")
    if report.cannot_probe:
        w(f"  NOTHING MEASURED: {report.cannot_probe}")

    if report.claims:
        w("")
        w("Claims")
        for c in report.claims:
            w(f"  [{verdict(c.holds)}] {c.claim}")
            w(f"      {c.finding}")
            w(f"      test: {c.test}")

    h = report.headers
    w("")
    w(f"Response headers ({plural(h.responses, 'response')})")
    for info in h.headers:
        example = info.example if info.example is not None else "(withheld)"
        if len(example) > 34:
            example = example[:31] + "..."
        w(f"  {info.name:<44} {info.present:>3}/{h.responses:<3} {example:<34} {info.meaning}")
    if h.other_names:
        w(f"  other headers seen (values not kept): {', '.join(h.other_names)}")

    for m in report.latency:
        w("")
        w(f"Latency: {m.model} ({request_counts(m)})")
        w(f"  {'':<22}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'stdev':>10}{'jitter':>10}   median 95% CI")
        for label, s, is_time in summary_rows(m):
            if s is None:
                w(f"  {label:<22}{'-':>10}")
                continue
            cells = "".join(f"{value_text(v, is_time):>10}" for v in (s.p50, s.p90, s.p99, s.mean, s.stdev, s.jitter))
            lo, hi = s.p50_ci
            w(f"  {label:<22}{cells}   {value_text(lo, is_time)} .. {value_text(hi, is_time)}")
        w(f"  duration ≈ {fit_text(m.duration_fit, 'output_tokens', why_unfit(report, m.model, 'output_tokens'))}")
        w(f"  TTFT     ≈ {fit_text(m.ttft_fit, 'input_tokens', why_unfit(report, m.model, 'input_tokens'))}")
        if m.truth is not None:
            tr = m.truth
            w(
                f"  simulator truth: injected TTFT median {ms(tr.injected_ttft_p50)} (after its preamble), "
                f"request received → first token written {ms(tr.server_ttft_p50)}, injected per-token gap "
                f"{ms(tr.injected_gap)}; llmtap saw each first token {ms(tr.first_token_lag_p50)} (median) "
                "after the simulator wrote it"
            )
        w("  jitter = mean |difference| between consecutive requests; p99 of few requests is close to the max")

    if report.aborts:
        w("")
        w("Aborts (what the client and the server really produce)")
        for a in report.aborts:
            if a.as_expected:
                mark = "as expected"
            elif a.ended_first:
                mark = f"not tested: expected {a.expected}"
            else:
                mark = f"EXPECTED {a.expected}"
            w(f"  {a.mode:<8} → {a.outcome:<15} ({mark}); {a.how}")
            w(f"           {a.finding}")

    if report.throttle is not None:
        tr2 = report.throttle
        w("")
        w("Throttling: server-advised retry-after vs the SDK's actual backoff")
        w(f"  {tr2.finding}")
        for step in tr2.steps:
            w(
                f"  attempt {step.attempt}: status {step.status} {step.outcome:<13} advised {ms(step.advised)}"
                f"  waited {ms(step.waited)}"
            )

    if report.cannot_probe is None:  # with nothing measured, every stand-in would read 0
        w("")
        w("What a client cannot see, and what stands in for it")
    for u in report.unseen if report.cannot_probe is None else ():
        w(f"  {u.what}: {u.why}.")
        w(f"      stand-in: {u.stand_in}" + (f": {u.measured}" if u.measured else ""))

    if report.metrics:
        w("")
        w("The probe's own traffic in llmtap's metrics")
        for name, value in report.metrics.items():
            w(f"  {name} {value:g}")
    if report.notes:
        w("")
        w("Notes")
        for note in report.notes:
            w(f"  {note}")
    return "\n".join(out) + "\n"
