"""The report's plots as standalone SVG documents: TTFT as a histogram, duration against output tokens, each
with the claim drawn in."""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence

from ._formula import Formula, parse_band, parse_formula
from ._report import ModelLatency, ProbeReport, completed

__all__ = ["plot_names", "render_svgs"]


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
        rows = completed(report.samples, m.model)
        ttfts = [s.time_to_first_token for s in rows if s.time_to_first_token is not None]
        points = [(float(s.output_tokens), s.duration) for s in rows if s.output_tokens is not None]
        inputs = sorted(s.input_tokens for s in rows if s.input_tokens is not None)
        inp = float(inputs[len(inputs) // 2]) if inputs else 0.0
        ttft_name, duration_name = plot_names(m.model)
        out[ttft_name] = svg_ttft(m, ttfts, band)
        out[duration_name] = svg_duration(m, points, formula, inp)
    return out


def plot_names(model: str) -> tuple[str, str]:
    """The file names of ``model``'s two plots (time to first token, duration), safe in any file system."""
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model)
    return f"ttft-{slug}.svg", f"duration-{slug}.svg"
