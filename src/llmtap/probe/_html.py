"""The report as a self-contained HTML page: the text report's words in tables, the SVG plots inline."""

from __future__ import annotations

import html

from ._report import ProbeReport
from ._svg import plot_names, render_svgs
from ._text import fit_text, ms, request_counts, summary_rows, value_text, verdict, why_unfit
from ._words import plural

__all__ = ["render_html"]


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
        w(f"<p>duration ≈ {_e(fit_text(m.duration_fit, 'output_tokens', unfit_d))}<br>")
        w(f"TTFT ≈ {_e(fit_text(m.ttft_fit, 'input_tokens', unfit_t))}</p>")
        if m.truth is not None:
            w(
                f"<p class='small'>simulator truth: injected TTFT median {ms(m.truth.injected_ttft_p50)}, "
                f"per-token gap {ms(m.truth.injected_gap)}; llmtap saw first tokens "
                f"{ms(m.truth.first_token_lag_p50)} after the simulator wrote them (median)</p>"
            )
        w("<div class='plots'>")
        for name in plot_names(m.model):
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
