"""The report as terminal text, as a self-contained HTML page, and its plots as standalone SVG."""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence

from llmtap._core.record import Outcome

from ._formula import Formula, parse_band, parse_formula
from ._report import ModelLatency, ProbeReport
from ._stats import LinearFit, Summary
from ._words import counts, plural

__all__ = ["render_html", "render_svgs", "render_text"]


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
    done = [s for s in report.samples if s.model == model and s.outcome == Outcome.COMPLETED.value]
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


def fit_text(fit: LinearFit | None, x: str, unit: str, unfit: str = "not identifiable") -> str:
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
        w(f"  duration ≈ {fit_text(m.duration_fit, 'output_tokens', 's', why_unfit(report, m.model, 'output_tokens'))}")
        w(f"  TTFT     ≈ {fit_text(m.ttft_fit, 'input_tokens', 's', why_unfit(report, m.model, 'input_tokens'))}")
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


# ---------------------------------------------------------------------- SVG

_W, _H = 520, 300
_L, _R, _T, _B = 60, 16, 30, 44


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _axes(title: str, xlabel: str, ylabel: str, xlo: float, xhi: float, ylo: float, yhi: float) -> list[str]:
    def sx(x: float) -> float:
        return _L + (x - xlo) / (xhi - xlo) * (_W - _L - _R)

    def sy(y: float) -> float:
        return _H - _B - (y - ylo) / (yhi - ylo) * (_H - _T - _B)

    parts = [
        f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{_L}" y1="{_H - _B}" x2="{_W - _R}" y2="{_H - _B}" stroke="#333"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_H - _B}" stroke="#333"/>',
        f'<text x="{(_L + _W - _R) / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">{html.escape(xlabel)}</text>',
        f'<text x="14" y="{(_T + _H - _B) / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 14 {(_T + _H - _B) / 2})">{html.escape(ylabel)}</text>',
    ]
    for x in _ticks(xlo, xhi):
        if xlo <= x <= xhi:
            parts.append(f'<line x1="{sx(x):.1f}" y1="{_H - _B}" x2="{sx(x):.1f}" y2="{_H - _B + 4}" stroke="#333"/>')
            parts.append(f'<text x="{sx(x):.1f}" y="{_H - _B + 16}" text-anchor="middle" font-size="10">{x:g}</text>')
    for y in _ticks(ylo, yhi):
        if ylo <= y <= yhi:
            parts.append(f'<line x1="{_L}" y1="{sy(y):.1f}" x2="{_W - _R}" y2="{sy(y):.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{_L - 5}" y="{sy(y) + 3:.1f}" text-anchor="end" font-size="10">{y:g}</text>')
    return parts


def _svg(parts: Sequence[str]) -> str:
    body = "\n".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        f'font-family="sans-serif">\n<rect width="{_W}" height="{_H}" fill="white"/>\n{body}\n</svg>\n'
    )


def svg_ttft(m: ModelLatency, values: Sequence[float], claim: tuple[float, float] | None) -> str:
    """Histogram of TTFT (ms) with its median; the claimed interval is shaded, or named at the edge
    when it lies far off the measured range."""
    ms = [v * 1000 for v in values]
    if not ms:
        return _svg(_axes(f"TTFT: {m.model} (no data)", "ms", "requests", 0, 1, 0, 1))
    dlo, dhi = min(ms), max(ms)
    span = dhi - dlo or max(1.0, dlo * 0.1)
    lo, hi = dlo - span * 0.1, dhi + span * 0.1
    claim_ms = (claim[0] * 1000, claim[1] * 1000) if claim is not None else None
    off_scale = ""
    if claim_ms is not None:
        if claim_ms[0] >= hi + 3 * span:
            off_scale = f"claimed {claim_ms[0]:.0f}-{claim_ms[1]:.0f} ms: off scale ->"
        elif claim_ms[1] <= lo - 3 * span:
            off_scale = f"<- claimed {claim_ms[0]:.0f}-{claim_ms[1]:.0f} ms: off scale"
        else:
            lo, hi = min(lo, claim_ms[0] - span * 0.1), max(hi, claim_ms[1] + span * 0.1)
    bins = max(5, min(30, int(math.sqrt(len(ms)) * 2)))
    width = (dhi - dlo) / bins or 1.0
    counts = [0] * bins
    for v in ms:
        counts[min(bins - 1, int((v - dlo) / width))] += 1
    top = max(counts) * 1.2
    parts = _axes(f"Time to first token: {m.model} (n={len(ms)})", "TTFT (ms)", "requests", lo, hi, 0, top)

    def sx(x: float) -> float:
        return _L + (x - lo) / (hi - lo) * (_W - _L - _R)

    def sy(y: float) -> float:
        return _H - _B - y / top * (_H - _T - _B)

    if claim_ms is not None and not off_scale:
        x0, x1 = sx(claim_ms[0]), sx(claim_ms[1])
        parts.append(
            f'<rect x="{x0:.1f}" y="{_T}" width="{max(1.0, x1 - x0):.1f}" height="{_H - _T - _B}" '
            'fill="#f4a261" fill-opacity="0.25"><title>claimed interval</title></rect>'
        )
        parts.append(f'<text x="{x0 + 3:.1f}" y="{_T + 24}" font-size="10" fill="#b5651d">claimed</text>')
    bar = max(1.0, sx(dlo + width) - sx(dlo) - 1)
    for i, c in enumerate(counts):
        if c:
            parts.append(
                f'<rect x="{sx(dlo + i * width) + 0.5:.1f}" y="{sy(c):.1f}" width="{bar:.1f}" '
                f'height="{sy(0) - sy(c):.1f}" fill="#2a6f97"/>'
            )
    med = statistics.median(ms)
    parts.append(f'<line x1="{sx(med):.1f}" y1="{_T}" x2="{sx(med):.1f}" y2="{_H - _B}" stroke="#c1121f"/>')
    parts.append(f'<text x="{sx(med) + 4:.1f}" y="{_T + 10}" font-size="10" fill="#c1121f">median {med:.1f} ms</text>')
    if off_scale:
        anchor, x = ("end", _W - _R - 2) if off_scale.endswith("->") else ("start", _L + 4)
        parts.append(
            f'<text x="{x}" y="{_T + 24}" text-anchor="{anchor}" font-size="10" fill="#b5651d">'
            f"{html.escape(off_scale)}</text>"
        )
    return _svg(parts)


def svg_duration(m: ModelLatency, points: Sequence[tuple[float, float]], formula: Formula | None, inp: float) -> str:
    """Duration against output tokens, the fitted line with its 95% band, and the claimed formula."""
    fit = m.duration_fit
    if not points:
        return _svg(_axes(f"Duration: {m.model} (no data)", "output tokens", "ms", 0, 1, 0, 1))
    xs = [p[0] for p in points]
    ys = [p[1] * 1000 for p in points]
    xlo, xhi = 0.0, max(xs) * 1.05 or 1.0
    ylo = 0.0
    yhi = max(ys)
    if formula is not None:
        yhi = max(yhi, *(formula(x, inp) * 1000 for x in (xlo, xhi)))
    yhi *= 1.1
    parts = _axes(f"Duration vs output tokens: {m.model}", "output tokens", "duration (ms)", xlo, xhi, ylo, yhi)

    def sx(x: float) -> float:
        return _L + (x - xlo) / (xhi - xlo) * (_W - _L - _R)

    def sy(y: float) -> float:
        return _H - _B - (min(max(y, ylo), yhi) - ylo) / (yhi - ylo) * (_H - _T - _B)

    if fit is not None:
        grid = [fit.x_min + (fit.x_max - fit.x_min) * i / 40 for i in range(41)]
        upper = [(sx(x), sy((fit.predict(x) + fit.band(x)) * 1000)) for x in grid]
        lower = [(sx(x), sy((fit.predict(x) - fit.band(x)) * 1000)) for x in reversed(grid)]
        poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower)
        parts.append(f'<polygon points="{poly}" fill="#2a6f97" fill-opacity="0.2"><title>95% band</title></polygon>')
        parts.append(
            f'<line x1="{sx(xlo):.1f}" y1="{sy(fit.predict(xlo) * 1000):.1f}" x2="{sx(xhi):.1f}" '
            f'y2="{sy(fit.predict(xhi) * 1000):.1f}" stroke="#2a6f97" stroke-width="1.5"/>'
        )
        label = f"fit: {fit.a * 1000:.1f} ms + {fit.b * 1000:.3f} ms x tokens"
        parts.append(f'<text x="{_L + 8}" y="{_T + 12}" font-size="10" fill="#2a6f97">{html.escape(label)}</text>')
    if formula is not None:
        curve = [(sx(x), sy(formula(x, inp) * 1000)) for x in (xlo + (xhi - xlo) * i / 40 for i in range(41))]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in curve)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="#b5651d" stroke-width="1.5" stroke-dasharray="5,3"/>'
        )
        parts.append(
            f'<text x="{_L + 8}" y="{_T + 26}" font-size="10" fill="#b5651d">'
            f"claimed: {html.escape(formula.text)}</text>"
        )
    for x, y in zip(xs, ys, strict=True):
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="#222"/>')
    return _svg(parts)


def _claim_inputs(report: ProbeReport) -> tuple[Formula | None, tuple[float, float] | None]:
    formula = parse_formula(report.expect_latency) if report.expect_latency else None
    band = parse_band(report.expect_ttft) if report.expect_ttft else None
    return formula, (band.low, band.high) if band is not None else None


def render_svgs(report: ProbeReport) -> dict[str, str]:
    """The plots as standalone SVG documents, ``{"ttft-<model>.svg": ..., "duration-<model>.svg": ...}``."""
    formula, band = _claim_inputs(report)
    out: dict[str, str] = {}
    for m in report.latency:
        rows = [s for s in report.samples if s.model == m.model and s.outcome == Outcome.COMPLETED.value]
        ttfts = [s.time_to_first_token for s in rows if s.time_to_first_token is not None]
        points = [(float(s.output_tokens), s.duration) for s in rows if s.output_tokens is not None]
        inputs = sorted(s.input_tokens for s in rows if s.input_tokens is not None)
        inp = float(inputs[len(inputs) // 2]) if inputs else 0.0
        slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in m.model)
        out[f"ttft-{slug}.svg"] = svg_ttft(m, ttfts, band)
        out[f"duration-{slug}.svg"] = svg_duration(m, points, formula, inp)
    return out


# ---------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left;
vertical-align:top}th{background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
.holds{color:#1b7f3b;font-weight:bold}.fails{color:#c1121f;font-weight:bold}.untested{color:#777;font-weight:bold}
.holds,.fails,.untested{white-space:nowrap}.stopped{color:#c1121f;font-weight:bold}
.small{color:#555;font-size:.9em}.plots{display:flex;flex-wrap:wrap;gap:1em}code{background:#f3f3f3;padding:0 .2em}
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def render_html(report: ProbeReport) -> str:
    """A self-contained HTML page (inline CSS and SVG, no scripts, nothing fetched)."""
    t = report.target
    p: list[str] = []
    w = p.append
    w("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>")
    w(f"<title>llmtap probe: {_e(t.provider)} {_e(t.base_url)}</title><style>{_CSS}</style></head><body>")
    w(f"<h1>llmtap probe: {_e(t.provider)} at <code>{_e(t.base_url)}</code></h1>")
    where = f"embedded simulator, injected <code>{_e(t.sim_scenario)}</code>" if t.simulated else "endpoint"
    w(
        f"<p class='small'>{where} · {_e(t.sdk)} · llmtap {_e(t.llmtap_version)} · {_e(t.started_at)} · "
        f"{t.seconds:.1f} s of a {t.budget_seconds:.0f} s budget"
        + (f" · stopped early: {_e(t.stopped_early)}" if t.stopped_early else "")
        + "</p>"
    )
    if report.cannot_probe:
        w(f"<p class='stopped'>Nothing measured: {_e(report.cannot_probe)}</p>")
    if report.claims:
        w("<h2>Claims</h2><table><tr><th>claim</th><th>verdict</th><th>finding</th><th>test</th></tr>")
        for c in report.claims:
            cls = {True: "holds", False: "fails", None: "untested"}[c.holds]
            w(
                f"<tr><td>{_e(c.claim)}</td><td class='{cls}'>{verdict(c.holds)}</td><td>{_e(c.finding)}</td>"
                f"<td class='small'>{_e(c.test)}</td></tr>"
            )
        w("</table>")
    svgs = render_svgs(report)
    for m in report.latency:
        w(f"<h2>Latency: {_e(m.model)}</h2>")
        w(f"<p>{_e(request_counts(m))}</p>")
        w("<table><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>mean</th><th>stdev</th><th>jitter</th>")
        w("<th>median 95% CI</th></tr>")
        for label, s, is_time in summary_rows(m):
            if s is None:
                w(f"<tr><td>{label}</td><td colspan='7'>-</td></tr>")
                continue
            cells = "".join(
                f"<td class='n'>{value_text(v, is_time)}</td>" for v in (s.p50, s.p90, s.p99, s.mean, s.stdev, s.jitter)
            )
            w(
                f"<tr><td>{label}</td>{cells}<td class='n'>{value_text(s.p50_ci[0], is_time)} .. "
                f"{value_text(s.p50_ci[1], is_time)}</td></tr>"
            )
        w("</table>")
        unfit_d, unfit_t = why_unfit(report, m.model, "output_tokens"), why_unfit(report, m.model, "input_tokens")
        w(f"<p>duration ≈ {_e(fit_text(m.duration_fit, 'output_tokens', 's', unfit_d))}<br>")
        w(f"TTFT ≈ {_e(fit_text(m.ttft_fit, 'input_tokens', 's', unfit_t))}</p>")
        if m.truth is not None:
            w(
                f"<p class='small'>simulator truth: injected TTFT median {ms(m.truth.injected_ttft_p50)}, "
                f"per-token gap {ms(m.truth.injected_gap)}; llmtap saw first tokens "
                f"{ms(m.truth.first_token_lag_p50)} after the simulator wrote them (median)</p>"
            )
        slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in m.model)
        w("<div class='plots'>")
        for name in (f"ttft-{slug}.svg", f"duration-{slug}.svg"):
            w(svgs[name].replace('<?xml version="1.0"?>', ""))
        w("</div>")
    h = report.headers
    w(f"<h2>Response headers ({plural(h.responses, 'response')})</h2><table>")
    w("<tr><th>header</th><th>on</th><th>example</th><th>meaning</th></tr>")
    for info in h.headers:
        example = info.example if info.example is not None else "(withheld)"
        w(
            f"<tr><td><code>{_e(info.name)}</code></td><td class='n'>{info.present}/{h.responses}</td>"
            f"<td><code>{_e(example)}</code></td><td>{_e(info.meaning)}</td></tr>"
        )
    w("</table>")
    if h.other_names:
        w(f"<p class='small'>other headers seen (values not kept): {_e(', '.join(h.other_names))}</p>")
    if report.aborts:
        w("<h2>Aborts</h2><table><tr><th>abort</th><th>outcome</th><th>how</th><th>what happened</th></tr>")
        for a in report.aborts:
            cls = "holds" if a.as_expected else "untested" if a.ended_first else "fails"
            w(
                f"<tr><td>{_e(a.mode)}</td><td class='{cls}'>{_e(a.outcome)}</td><td>{_e(a.how)}</td>"
                f"<td>{_e(a.finding)}</td></tr>"
            )
        w("</table>")
    if report.throttle is not None:
        w(f"<h2>Throttling</h2><p>{_e(report.throttle.finding)}</p>")
        if report.throttle.steps:
            w("<table><tr><th>attempt</th><th>status</th><th>outcome</th><th>advised</th><th>waited</th></tr>")
            for s2 in report.throttle.steps:
                w(
                    f"<tr><td>{s2.attempt}</td><td>{s2.status}</td><td>{_e(s2.outcome)}</td>"
                    f"<td class='n'>{ms(s2.advised)}</td><td class='n'>{ms(s2.waited)}</td></tr>"
                )
            w("</table>")
    if report.cannot_probe is None:  # with nothing measured, every stand-in would read 0
        w("<h2>What a client cannot see</h2><table><tr><th>not visible</th><th>why</th><th>stand-in</th></tr>")
        for u in report.unseen:
            measured = f": {_e(u.measured)}" if u.measured else ""
            w(f"<tr><td>{_e(u.what)}</td><td>{_e(u.why)}</td><td>{_e(u.stand_in)}{measured}</td></tr>")
        w("</table>")
    if report.metrics:
        w("<h2>The probe's own traffic in llmtap's metrics</h2><table>")
        for name, value in report.metrics.items():
            w(f"<tr><td><code>{_e(name)}</code></td><td class='n'>{value:g}</td></tr>")
        w("</table>")
    if report.notes:
        w("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>")
    w("</body></html>")
    return "\n".join(p) + "\n"
