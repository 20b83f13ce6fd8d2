"""The ``llmtap`` command: ``llmtap demo``, ``llmtap simulate``, ``llmtap probe`` and ``llmtap run``.

Every subcommand is built one way: a function ``(subparsers) -> parser`` declares its arguments
(checked by ``type=`` functions such as :func:`port`, so a bad value never reaches the code) and a
handler ``(args) -> int`` runs it, importing what it needs only then; the pairs are listed in
:data:`_COMMANDS`. Every parser is a :class:`_Parser`: help shows each option's default, and a bad
command line prints one line naming the subcommand and exits with status 2. A handler reports a bad
input it can only detect by running (a taken port) the same way, through :func:`fail`.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = ["main"]

_SubParsers = Any  # argparse._SubParsersAction[argparse.ArgumentParser]; private in typeshed


class _Formatter(argparse.HelpFormatter):
    """Help with each option's default shown as ``(default: X)``, unless the text already says it; the
    description is wrapped paragraph by paragraph, and indented lines (examples) are kept as they are."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or "(default" in text or not action.option_strings:
            return text
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            return text
        said = re.search(r"\s*\(([^()]*)\)$", text)  # the older "(20)" style: said once, the same way
        if said and said.group(1) in (str(default), f"{default:g}" if isinstance(default, float) else ""):
            text = text[: said.start()]
        return f"{text} (default: %(default)s)"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            indent + line if line.startswith(" ") else textwrap.fill(line, width, initial_indent=indent,
                                                                      subsequent_indent=indent)
            for line in text.splitlines()
        )  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def fail(command: str, message: str) -> int:
    """Print ``llmtap COMMAND: message`` on stderr; the exit status for a bad input (2)."""
    print(f"llmtap {command}: {message}", file=sys.stderr)
    return 2


# -- value types: a bad value is an argparse error (one line, exit 2), never a traceback -------------


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535)")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a number above 0")
    return value


def scenario(text: str) -> Any:
    """A simulator scenario in the ``x-llmtap-sim`` syntax, parsed (``ScenarioError`` says what is wrong)."""
    from llmtap.simulator import Scenario, ScenarioError

    try:
        return Scenario.parse(text)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- llmtap demo -------------------------------------------------------------------------------------


def add_demo(sub: _SubParsers) -> argparse.ArgumentParser:
    from llmtap._cli.demo import METRICS_VIA, MIX_HELP

    demo: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="simulator + realistic traffic through the real anthropic and openai SDKs, /metrics, a live view",
        description="Run the built-in simulator, drive a realistic traffic mix (faults included) through the "
        "real anthropic and openai SDKs with llmtap on, serve /metrics and show live figures. No API key "
        "needed. Needs pip install 'llmtap[demo]'.",
    )
    demo.add_argument("--headless", action="store_true", help="print a summary line every 5 s instead of the view")
    demo.add_argument(
        "--duration", type=positive_float, default=None, metavar="SECONDS", help="stop after SECONDS (default: Ctrl-C)"
    )
    demo.add_argument(
        "--metrics-port",
        type=port,
        default=9464,
        metavar="PORT",
        help="port for /metrics on 127.0.0.1 (0: any free port)",
    )
    demo.add_argument("--mix", choices=tuple(MIX_HELP), default="default", help="traffic mix: " + "; ".join(
        f"{name}: {text}" for name, text in MIX_HELP.items()))  # fmt: skip
    demo.add_argument(
        "--workers", type=positive_int, default=3, metavar="N", help="sync client threads (async and openai: N/2 each)"
    )
    demo.add_argument(
        "--metrics-via",
        choices=tuple(METRICS_VIA),
        default="prometheus",
        help="; ".join(f"{name}: {text}" for name, text in METRICS_VIA.items()),
    )
    demo.add_argument(
        "--pace", type=positive_float, default=0.3, metavar="SECONDS", help="mean pause between one worker's calls"
    )
    demo.add_argument(
        "--prometheus",
        type=port,
        nargs="?",
        const=9090,
        default=None,
        metavar="PORT",
        help="also start a local `prometheus` (if installed) with llmtap's alert rules, on PORT (9090 when "
        "no PORT is given)",
    )
    return demo


def run_demo_command(args: argparse.Namespace) -> int:
    try:
        import anthropic  # noqa: F401
        import openai  # noqa: F401
    except ImportError as exc:
        return fail("demo", f"the demo drives the anthropic and openai SDKs: pip install 'llmtap[demo]' ({exc})")
    from llmtap._cli.demo import DemoError, run_demo

    try:
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
    except DemoError as exc:
        return fail("demo", str(exc))


# -- llmtap simulate ---------------------------------------------------------------------------------


def add_simulate(sub: _SubParsers) -> argparse.ArgumentParser:
    simulate: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="serve the fault-injecting Anthropic/OpenAI/Gemini-compatible simulator",
        description="Serve the fault-injecting simulator until Ctrl-C. Each request's behaviour comes from "
        "its x-llmtap-sim header (extra_headers= in the SDKs), comma-separated key=value pairs, e.g.\n"
        "  ttft=0.5,gap=0.02,tokens=50,fail=2,fail_status=529,retry_after=1\n"
        "Keys are listed in docs/reference/simulator.md (generated from llmtap.simulator.Scenario).",
    )
    simulate.add_argument("--host", default="127.0.0.1", help="address to listen on")
    simulate.add_argument("--port", type=port, default=8787, help="port to listen on (0: any free port)")
    simulate.add_argument(
        "--scenario",
        type=scenario,
        default=None,
        metavar="SCENARIO",
        help="default behaviour for requests without the header, same syntax (default: a plain answer)",
    )
    simulate.add_argument("--verbose", action="store_true", help="log every request on stderr")
    return simulate


def run_simulate_command(args: argparse.Namespace) -> int:
    from llmtap.simulator import serve_forever

    try:
        serve_forever(args.host, args.port, args.scenario, verbose=args.verbose)
    except OSError as exc:
        return fail(
            "simulate", f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc} (choose another with --port)"
        )
    return 0


# -- llmtap probe ------------------------------------------------------------------------------------


def add_probe(sub: _SubParsers) -> argparse.ArgumentParser:
    from llmtap.probe._cli import add_parser

    return add_parser(sub)


def run_probe_command(args: argparse.Namespace) -> int:
    from llmtap.probe._cli import main as probe_main

    return probe_main(args)


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


def _add_run_parser(sub: _SubParsers) -> argparse.ArgumentParser:
    from llmtap._cli.run import USAGE

    run: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run an unmodified Python program with llmtap (and OpenTelemetry) instrumentation",
        description="Instrument COMMAND before it imports its SDKs (opentelemetry-instrument's machinery), "
        "serve /metrics when --metrics-port (LLMTAP_METRICS_PORT) is set, and send OTLP traces and metrics "
        "when OTEL_EXPORTER_OTLP_ENDPOINT is set (OTEL_SERVICE_NAME, OTEL_TRACES_EXPORTER, "
        "OTEL_METRICS_EXPORTER are honoured); metrics take one path, /metrics or OTLP (docs/guides/deploy.md). "
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
        help="bind address for /metrics (LLMTAP_METRICS_ADDR; default: 127.0.0.1)",
    )
    run.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="COMMAND", help="the program and its arguments, after --"
    )
    return run


def _run(args: argparse.Namespace) -> int:
    from llmtap._cli.run import run

    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        args.parser.error("no command given")  # exits 2, naming the run subcommand and its --help
    return run(command, metrics_port=args.metrics_port, metrics_addr=args.metrics_addr)


# -- the command -------------------------------------------------------------------------------------

_COMMANDS: tuple[tuple[Callable[[_SubParsers], argparse.ArgumentParser], Callable[[argparse.Namespace], int]], ...] = (
    (add_demo, run_demo_command),
    (add_simulate, run_simulate_command),
    (add_probe, run_probe_command),
    (_add_run_parser, _run),
)


def parser() -> argparse.ArgumentParser:
    """The ``llmtap`` argument parser, every subcommand included."""
    top = _Parser(prog="llmtap", description="Client-side telemetry for LLM API traffic.")
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add, handler in _COMMANDS:
        command = add(sub)
        command.set_defaults(handler=handler, parser=command)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    args, unknown = top.parse_known_args(argv)
    if unknown:  # reported by the subcommand's parser, so the line names it and its --help
        getattr(args, "parser", top).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.version:
        from llmtap import __version__

        print(__version__)
        return 0
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        top.print_help(sys.stderr)
        return 2
    from llmtap._log import without_prefix

    stderr = logging.StreamHandler()
    stderr.setFormatter(without_prefix())
    logging.basicConfig(level=logging.WARNING, handlers=[stderr])
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
