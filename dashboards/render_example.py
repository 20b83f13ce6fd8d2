"""Render two dashboard panels from real data to an SVG, for the README (stdlib only).

Starts ``llmtap demo --headless --mix faults`` and a local ``prometheus`` scraping it, waits, then
evaluates the Streams dashboard's outcome query and the Overview's TTFT quantiles with
``/api/v1/query_range`` and draws them as Grafana would (lines over time):

    python dashboards/render_example.py --seconds 120 --out docs/img/demo-panels.svg
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COLORS = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#14b8a6", "#b877d9", "#e0e0e0")
OUTCOMES_QUERY = "sum by (outcome) (rate(llmtap_streams_total[30s]))"
TTFT_QUERIES = {
    "first token p50": "histogram_quantile(0.5, sum by (le) (rate(llmtap_time_to_first_token_seconds_bucket[30s])))",
    "first token p95": "histogram_quantile(0.95, sum by (le) (rate(llmtap_time_to_first_token_seconds_bucket[30s])))",
    "per call p95 (retries incl.)": (
        "histogram_quantile(0.95, sum by (le) (rate(llmtap_call_time_to_first_token_seconds_bucket[30s])))"
    ),
}
Series = list[tuple[float, float]]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _query_range(base: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": 2})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=10) as response:
        body: dict[str, Any] = json.load(response)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _points(result: dict[str, Any]) -> Series:
    return [(float(t), float(v)) for t, v in result["values"] if v not in ("NaN", "+Inf", "-Inf")]


def _panel(title: str, unit: str, series: dict[str, Series], x0: float, y0: float, w: float, h: float) -> str:
    out = [f'<text x="{x0 + 8}" y="{y0 + 20}" class="title">{title}</text>']
    left, top, right, bottom = x0 + 56, y0 + 34, x0 + w - 190, y0 + h - 28
    points = [p for s in series.values() for p in s]
    if not points:
        return "\n".join(out)
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    vmax = max(p[1] for p in points) * 1.1 or 1.0
    for i in range(5):
        v = vmax * i / 4
        y = bottom - (bottom - top) * i / 4
        label = f"{v * 1000:.0f} ms" if unit == "s" else f"{v:.2g}/s"
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">{label}</text>')
    span = max(t1 - t0, 1.0)
    for i in range(0, int(span) + 1, max(int(span // 4), 1)):
        x = left + (right - left) * i / span
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" class="axis" text-anchor="middle">{i:.0f}s</text>')
    for n, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS[n % len(COLORS)]
        path = " ".join(
            f"{left + (right - left) * (t - t0) / span:.1f},{bottom - (bottom - top) * v / vmax:.1f}" for t, v in pts
        )
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        ly = top + 16 * n
        out.append(f'<rect x="{right + 14}" y="{ly - 9}" width="12" height="4" fill="{color}"/>')
        out.append(f'<text x="{right + 32}" y="{ly - 4}" class="legend">{name}</text>')
    return "\n".join(out)


def render(seconds: float, out: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        sys.exit("prometheus not found (apt-get install prometheus)")
    tmp = Path(tempfile.mkdtemp(prefix="llmtap-render-"))
    metrics_port, prom_port = _port(), _port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{HERE / 'alerts.yaml'}']\n"
        "scrape_configs:\n  - job_name: llmtap-demo\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    demo = subprocess.Popen(
        [sys.executable, "-m", "llmtap", "demo", "--headless", "--mix", "faults", "--metrics-port", str(metrics_port),
         "--duration", str(seconds + 30)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    prom = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        base = f"http://127.0.0.1:{prom_port}"
        outcomes = {r["metric"].get("outcome", "?"): _points(r) for r in _query_range(base, OUTCOMES_QUERY, start, end)}
        ttft: dict[str, Series] = {}
        for name, expr in TTFT_QUERIES.items():
            for r in _query_range(base, expr, start, end):
                ttft[name] = _points(r)
    finally:
        demo.terminate()
        prom.terminate()
        demo.wait(timeout=30)
        prom.wait(timeout=30)
    width, height = 960, 300
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{2 * height}" '
        f'viewBox="0 0 {width} {2 * height}">',
        "<style>.title{font:600 14px sans-serif;fill:#d8d9da}.axis{font:11px sans-serif;fill:#9fa7b3}"
        ".legend{font:12px sans-serif;fill:#d8d9da}.grid{stroke:#2c3235;stroke-width:1}</style>",
        f'<rect width="{width}" height="{2 * height}" fill="#181b1f"/>',
        _panel("Streams by outcome (llmtap demo --mix faults)", "rate", outcomes, 0, 0, width, height),
        _panel("Time to first token", "s", ttft, 0, height, width, height),
        "</svg>",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(svg) + "\n")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "img" / "demo-panels.svg")
    args = parser.parse_args()
    render(args.seconds, args.out)


if __name__ == "__main__":
    main()
