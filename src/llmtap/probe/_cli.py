"""``llmtap probe``: argument parsing, the progress bar and the output files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from ._report import ExitStatus

__all__ = ["EXIT_STATUSES", "add_parser", "main"]

#: the exit statuses as ``--help`` and docs/guides/probe.md list them
EXIT_STATUSES = f"""exit status (for CI checks; --json carries it as "exit_status"):
  {ExitStatus.OK:d}  every claim holds (or no claim was given)
  {ExitStatus.CLAIM_FAILS:d}  a claim does not hold
  {ExitStatus.USAGE:d}  bad command line (one line on stderr says why)
  {ExitStatus.UNTESTED:d}  a claim could not be tested (too few usable measurements), none failed
  {ExitStatus.CANNOT_PROBE:d}  nothing could be measured: no request got an HTTP response (stderr names
     the cause: connection refused, DNS, TLS, timeout), or the endpoint refused the
     first request with 401/403/404 (key, base URL or model)
  4 wins over 1, and 1 over 3."""


class _Claim(argparse.Action):
    """Stores an ``--expect-*`` value and notes its kind in ``claim_order``, so that the report lists
    the claims in command-line order (a repeated single-valued flag counts where it last appears)."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, option: str | None = None
    ) -> None:
        kind = self.dest.removeprefix("expect_")
        order = list(getattr(ns, "claim_order", None) or [])
        if kind != "header" and kind in order:
            order.remove(kind)
        ns.claim_order = [*order, kind]
        setattr(ns, self.dest, [*getattr(ns, self.dest), value] if kind == "header" else value)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand to an ``argparse`` subparsers object."""
    from ._options import DEFAULT_MODELS, DEFAULT_SIM_SCENARIO, PROVIDERS, SIM_MODEL

    p: argparse.ArgumentParser = sub.add_parser(
        "probe",
        help="measure an endpoint's headers, latency, aborts and throttling; test published claims",
        description="Drive the official SDK with llmtap on and report what the endpoint really does: "
        "response headers, time to headers / first token, tokens/s, a latency model with confidence "
        "intervals, what aborts produce, retry-after vs the SDK's backoff. The API key comes from "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY (never printed or stored); with no key and no --base-url "
        "the embedded simulator is probed. Claims are listed in command-line order.",
        epilog=EXIT_STATUSES,
    )
    p.set_defaults(claim_order=[])
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
        "--expect-header",
        action=_Claim,
        default=[],
        metavar="NAME",
        help="a response header claimed to be on every response (repeatable)",
    )
    p.add_argument(
        "--expect-latency", action=_Claim, metavar="FORMULA", help='claimed duration, e.g. "0.42+0.008*tokens" [± tol]'
    )
    p.add_argument(
        "--expect-ttft",
        action=_Claim,
        metavar="SECONDS",
        help="claimed time to first token, e.g. 0.42±0.03 (or 0.42+-0.03)",
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
    from . import ProbeOptions, render_text, run_probe  # run_probe through the package: tests replace it there
    from ._formula import ClaimError
    from ._html import render_html
    from ._svg import render_svgs

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
            claim_order=tuple(args.claim_order),
            aborts=not args.no_aborts,
            throttle=args.throttle,
            throttle_requests=args.throttle_requests,
            simulate=True if args.simulator else None,
            sim_scenario=args.sim_scenario,
            seed=args.seed,
        )
    except (ClaimError, ValueError) as exc:
        print(f"llmtap probe: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    bar = _Bar(sys.stderr)
    try:
        report = run_probe(options, progress=bar)
    except ImportError as exc:
        said = str(exc)  # one hint: the one the missing piece already gives (llmtap.testing names its extra)
        hint = (
            said
            if "pip install" in said
            else f"the probe drives the official SDKs: pip install 'llmtap[probe]' ({said})"
        )
        print(f"llmtap probe: {hint}", file=sys.stderr)
        return ExitStatus.USAGE
    except (RuntimeError, ValueError) as exc:
        print(f"llmtap probe: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    finally:
        bar.clear()
    if report.target.simulated:
        print("no API key given: probing the embedded simulator", file=sys.stderr)
    if report.cannot_probe is not None:
        print(f"llmtap probe: {report.cannot_probe}", file=sys.stderr)
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
    return report.exit_status
