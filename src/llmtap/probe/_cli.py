"""``llmtap probe``: argument parsing, the progress bar and the output files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand to an ``argparse`` subparsers object."""
    from ._run import DEFAULT_MODELS, DEFAULT_SIM_SCENARIO, PROVIDERS, SIM_MODEL

    p: argparse.ArgumentParser = sub.add_parser(
        "probe",
        help="measure an endpoint's headers, latency, aborts and throttling; test published claims",
        description="Drive the official SDK with llmtap on and report what the endpoint really does: "
        "response headers, time to headers / first token, tokens/s, a latency model with confidence "
        "intervals, what aborts produce, retry-after vs the SDK's backoff. The API key comes from "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY (never printed or stored); with no key and no --base-url "
        "the embedded simulator is probed. Exit status 1 when a claim does not hold.",
    )
    p.add_argument("--provider", choices=PROVIDERS, default="anthropic", help="wire format and SDK (anthropic)")
    p.add_argument("--base-url", default=None, help="endpoint base URL as the SDK takes it (default: the public API)")
    models = ", ".join(f"{m} for {p}" for p, m in DEFAULT_MODELS.items())
    p.add_argument(
        "--model", action="append", default=[], help=f"model to probe, repeatable (default: {models}, {SIM_MODEL} "
        "on the simulator)"
    )  # fmt: skip
    p.add_argument("--requests", type=int, default=20, help="streaming requests per model (20)")
    p.add_argument("--max-tokens", type=int, default=64, help="largest max_tokens; requests spread from 1/8 of it (64)")
    p.add_argument("--prompt-words", type=int, default=400, help="prompts are padded with 0..N words (400)")
    p.add_argument("--timeout", type=float, default=120.0, help="total time budget in seconds (120)")
    p.add_argument(
        "--expect-header", action="append", default=[], metavar="NAME", help="a response header claimed to exist"
    )
    p.add_argument("--expect-latency", metavar="FORMULA", help='claimed duration, e.g. "0.42+0.008*tokens" [± tol]')
    p.add_argument(
        "--expect-ttft", metavar="SECONDS", help="claimed time to first token, e.g. 0.42±0.03 (or 0.42+-0.03)"
    )
    p.add_argument("--no-aborts", action="store_true", help="skip the abort phase")
    p.add_argument("--throttle", action="store_true", help="provoke throttling (bounded) and compare retry-after")
    p.add_argument("--throttle-requests", type=int, default=30, help="at most this many burst requests (30)")
    p.add_argument("--simulator", action="store_true", help="probe the embedded simulator even if a key is set")
    p.add_argument("--sim-scenario", default=DEFAULT_SIM_SCENARIO, help="simulator behaviour (x-llmtap-sim syntax)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")
    p.add_argument("--svg", metavar="DIR", help="also write the plots as SVG files")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed for the request plan")
    return p


class _Bar:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.active = stream.isatty()

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.active or total <= 0:
            return
        width = 30
        filled = round(width * done / total)
        self.stream.write(f"\r{phase:<24} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} ")
        self.stream.flush()

    def clear(self) -> None:
        if self.active:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def main(args: argparse.Namespace) -> int:
    from . import ClaimError, ProbeOptions, render_html, render_svgs, render_text, run_probe

    try:
        options = ProbeOptions(
            provider=args.provider,
            base_url=args.base_url,
            models=tuple(args.model),
            requests=args.requests,
            max_tokens=args.max_tokens,
            prompt_words=args.prompt_words,
            timeout=args.timeout,
            expect_headers=tuple(args.expect_header),
            expect_latency=args.expect_latency,
            expect_ttft=args.expect_ttft,
            aborts=not args.no_aborts,
            throttle=args.throttle,
            throttle_requests=args.throttle_requests,
            simulate=True if args.simulator else None,
            sim_scenario=args.sim_scenario,
            seed=args.seed,
        )
    except (ClaimError, ValueError) as exc:
        print(f"llmtap probe: {exc}", file=sys.stderr)
        return 2
    bar = _Bar(sys.stderr)
    try:
        report = run_probe(options, progress=bar)
    except ImportError as exc:
        print(f"llmtap probe drives the official SDKs: pip install 'llmtap[probe]' ({exc})", file=sys.stderr)
        return 2
    except (RuntimeError, ValueError) as exc:
        print(f"llmtap probe: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.clear()
    if report.target.simulated:
        print("no API key given: probing the embedded simulator", file=sys.stderr)
    print(report.to_json() if args.json else render_text(report), end="" if not args.json else "\n")
    if args.html:
        Path(args.html).write_text(render_html(report), encoding="utf-8")
        print(f"HTML report: {args.html}", file=sys.stderr)
    if args.svg:
        folder = Path(args.svg)
        folder.mkdir(parents=True, exist_ok=True)
        for name, svg in render_svgs(report).items():
            (folder / name).write_text(svg, encoding="utf-8")
        print(f"SVG plots: {folder}", file=sys.stderr)
    return 1 if any(c.holds is False for c in report.claims) else 0
