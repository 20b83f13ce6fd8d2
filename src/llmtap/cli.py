"""The ``llmtap`` command: ``llmtap demo``, ``llmtap simulate``, ``llmtap probe`` and ``llmtap run``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmtap", description="Client-side telemetry for LLM API traffic.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")

    demo = sub.add_parser(
        "demo",
        help="simulator + realistic traffic through the real anthropic SDK, /metrics and a live view",
        description="Run the built-in simulator, drive a realistic traffic mix (faults included) through the "
        "real anthropic SDK with llmtap on, serve /metrics and show live figures. No API key needed.",
    )
    demo.add_argument("--headless", action="store_true", help="print a summary line every 5 s instead of the view")
    demo.add_argument("--duration", type=float, default=None, help="stop after SECONDS (default: until Ctrl-C)")
    demo.add_argument("--metrics-port", type=int, default=9464, help="port for /metrics on 127.0.0.1 (9464)")
    demo.add_argument("--mix", choices=("default", "faults"), default="default", help="traffic mix")
    demo.add_argument("--workers", type=int, default=3, help="sync client threads (async: half as many)")
    demo.add_argument(
        "--metrics-via",
        choices=("prometheus", "otel"),
        default="prometheus",
        help="serve /metrics from llmtap's Prometheus exporter (default), or from its OpenTelemetry meter "
        "through opentelemetry-exporter-prometheus (the OTLP path's names, checked without a Collector)",
    )
    demo.add_argument("--pace", type=float, default=0.3, help="mean pause between one worker's calls, seconds")
    demo.add_argument(
        "--prometheus",
        type=int,
        nargs="?",
        const=9090,
        default=None,
        metavar="PORT",
        help="also start a local `prometheus` (if installed) with llmtap's alert rules, on PORT (9090)",
    )

    simulate = sub.add_parser(
        "simulate",
        help="serve the Anthropic/OpenAI-compatible simulator on 127.0.0.1",
        description="Serve the fault-injecting simulator. Per request behaviour: header x-llmtap-sim, "
        "e.g. 'ttft=0.5;gap=0.02;tokens=50;fail=2;fail_status=529;retry_after=1'.",
    )
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument("--port", type=int, default=8787)
    simulate.add_argument("--scenario", default="", help="default behaviour, same syntax as the header")
    simulate.add_argument("--verbose", action="store_true")

    from llmtap.probe._cli import add_parser as add_probe

    add_probe(sub)
    _add_run_parser(sub)
    return parser


# -- llmtap run --------------------------------------------------------------------------------------


def _setting(field: str) -> Callable[[str], Any]:
    """An argparse type that validates like ``Settings.<field>`` (the bounds are decided there, once);
    a bad value is then blamed on the option, not on the ``LLMTAP_*`` variable it is passed on as."""

    def parse(text: str) -> Any:
        from pydantic import ValidationError

        from llmtap._settings import Settings

        try:
            return getattr(Settings.model_validate({field: text}), field)
        except ValidationError as exc:
            message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise argparse.ArgumentTypeError(message if repr(text) in message else f"{message}, got {text!r}") from None

    return parse


def _add_run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from llmtap._run import USAGE

    run = sub.add_parser(
        "run",
        help="run an unmodified Python program with llmtap (and OpenTelemetry) instrumentation",
        description="Instrument COMMAND before it imports its SDKs (opentelemetry-instrument's machinery), "
        "serve /metrics when --metrics-port (LLMTAP_METRICS_PORT) is set, and send OTLP traces and metrics "
        "when OTEL_EXPORTER_OTLP_ENDPOINT is set (OTEL_SERVICE_NAME, OTEL_TRACES_EXPORTER, "
        "OTEL_METRICS_EXPORTER are honoured); metrics take one path, /metrics or OTLP (README, Deploy). "
        "Needs pip install 'llmtap[run]'.",
        usage=USAGE,
    )
    run.add_argument(
        "--metrics-port",
        type=_setting("metrics_port"),
        default=None,
        metavar="N",
        help="serve /metrics on this port (LLMTAP_METRICS_PORT)",
    )
    run.add_argument(
        "--metrics-addr",
        type=_setting("metrics_addr"),
        default=None,
        metavar="ADDR",
        help="bind address for /metrics (127.0.0.1; LLMTAP_METRICS_ADDR)",
    )
    run.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="COMMAND", help="the program and its arguments, after --"
    )
    run.set_defaults(run_parser=run)  # its errors print its own usage, not the top-level one


def _run(args: argparse.Namespace) -> int:
    from llmtap._run import run

    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        args.run_parser.error("no command given")  # exits 2, after the run subcommand's usage
    return run(command, metrics_port=args.metrics_port, metrics_addr=args.metrics_addr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "run_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.version:
        from llmtap import __version__

        print(__version__)
        return 0
    if args.command == "demo":
        try:
            import anthropic  # noqa: F401
        except ImportError:
            print("the demo drives the anthropic SDK: pip install 'llmtap[demo]'", file=sys.stderr)
            return 2
        from llmtap.demo import run_demo

        return run_demo(
            headless=args.headless,
            duration=args.duration,
            metrics_port=args.metrics_port,
            mix=args.mix,
            workers=args.workers,
            pace=args.pace,
            prometheus_port=args.prometheus,
            metrics_via=args.metrics_via,
        )
    if args.command == "simulate":
        from llmtap.simulator import Scenario, serve_forever

        default = Scenario.parse(args.scenario) if args.scenario else None
        print(f"simulator on http://{args.host}:{args.port} (Ctrl-C stops)", flush=True)
        serve_forever(args.host, args.port, default, verbose=args.verbose)
        return 0
    if args.command == "probe":
        from llmtap.probe._cli import main as probe_main

        return probe_main(args)
    if args.command == "run":
        return _run(args)
    _parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
