"""The ``llmtap`` command: version, the simulator as a server, and a short headless demo."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

import llmtap
from llmtap._cli import main as _cli
from tests.support.deploy import free_port


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "llmtap", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == llmtap.__version__


def _default_sigint() -> None:
    """In the child: Ctrl-C's default action. A shell starts background jobs with SIGINT ignored and a
    child inherits that, and Python installs no KeyboardInterrupt handler for an ignored SIGINT; so the
    test, not the environment it runs in, decides what the simulator gets."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Ctrl-C, then the process's output. The 120 s only guard against a hang (a loaded machine can
    starve the child for seconds); a child still running then is killed, so no test leaks it."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def test_simulate_serves_and_stops_on_ctrl_c() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtap", "simulate", "--port", str(port), "--scenario", "tokens=3"],  # python -m
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                response = httpx2.post(
                    f"http://127.0.0.1:{port}/v1/messages",
                    json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
                    headers={"x-api-key": "k"},
                )
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline, "the simulator did not start"
                time.sleep(0.1)
        assert response.status_code == 200
        assert response.json()["usage"]["output_tokens"] == 3
    finally:
        _, stderr = _interrupt(proc)
    assert proc.returncode == 0
    assert b"Traceback" not in stderr


@pytest.mark.slow
def test_headless_demo_runs_and_exits_cleanly() -> None:
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "llmtap", "demo", "--headless", "--duration", "6", "--metrics-port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "streams=" in out.stdout
    assert "Traceback" not in out.stderr


def test_opentelemetry_instrument_picks_llmtap_up() -> None:
    """The one-command route: ``opentelemetry-instrument python app.py`` loads our entry point."""
    import os
    import shutil

    command = shutil.which("opentelemetry-instrument", path=os.path.dirname(sys.executable))
    assert command is not None
    code = (
        "import httpx2, llmtap._installation as t; "
        "print(t.active() is not None, hasattr(httpx2.Client._send_single_request, '__wrapped__'))"
    )
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    out = subprocess.run(
        [command, sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert out.stdout.split()[-2:] == ["True", "True"], out.stdout + out.stderr


# -- one way to build a subcommand: help with defaults, one-line errors --------------------------------

LLMTAP = str(Path(sys.executable).with_name("llmtap"))  # the installed console script, as a user runs it


def _llmtap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LLMTAP, *args], capture_output=True, text=True, timeout=timeout)


def _one_line_exit_2(out: subprocess.CompletedProcess[str], prefix: str) -> str:
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("simulate", "--port", "99999"), "llmtap simulate: argument --port: 99999 is not a port"),
        (("simulate", "--port", "http"), "llmtap simulate: argument --port: 'http' is not a port number"),
        (("simulate", "--scenario", "ttfx=1"), "llmtap simulate: argument --scenario: unknown x-llmtap-sim key"),
        (("simulate", "--bogus"), "llmtap simulate: unrecognized arguments: --bogus"),
        (("demo", "--metrics-port", "70000"), "llmtap demo: argument --metrics-port: 70000 is not a port"),
        (("demo", "--prometheus", "-1"), "llmtap demo: argument --prometheus: -1 is not a port"),
        (("demo", "--pace", "0"), "llmtap demo: argument --pace: 0 must be a number above 0"),
        (("demo", "--duration", "nan"), "llmtap demo: argument --duration: nan must be a number above 0"),
        (("demo", "--workers", "0"), "llmtap demo: argument --workers: 0 must be at least 1"),
        (("demo", "--mix", "chaos"), "llmtap demo: argument --mix: invalid choice: 'chaos'"),
        (("probe", "--requests", "x"), "llmtap probe: argument --requests: invalid int value"),
        (("run", "--bogus", "--", "true"), "llmtap run: unrecognized arguments: --bogus"),
        (("serve",), "llmtap: argument COMMAND: invalid choice: 'serve'"),
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    line = _one_line_exit_2(_llmtap(*args), says)
    assert line.endswith("--help')"), line  # says where to look


def test_no_command_prints_help_and_exits_2() -> None:
    out = _llmtap()
    assert out.returncode == 2
    assert "COMMAND" in out.stderr and "demo" in out.stderr and "Traceback" not in out.stderr


def _taken_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port: int = s.getsockname()[1]
    return s, port


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("simulate", "--port"), "llmtap simulate: cannot listen on 127.0.0.1:{port}: Address already in use"),
        pytest.param(
            ("demo", "--headless", "--duration", "5", "--metrics-port"),
            "llmtap demo: cannot serve /metrics on",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_taken_port_is_one_line_and_exit_2(command: tuple[str, ...], says: str) -> None:
    taken, port = _taken_port()
    with taken:
        out = _llmtap(*command, str(port))
    _one_line_exit_2(out, says.format(port=port))
    assert out.stdout == ""  # no "listening on ..." before the failure


def test_simulate_prints_one_start_up_line() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [LLMTAP, "simulate", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline().decode()
        assert first.strip() == f"llmtap simulator listening on http://127.0.0.1:{port} (Ctrl-C stops)"
    finally:
        stdout, stderr = _interrupt(proc)
    assert proc.returncode == 0
    assert stdout == b"" and b"listening" not in stderr  # that one line, once


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    top = _cli.parser()
    (action,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_is_built_one_way() -> None:
    commands = _subcommands()
    assert sorted(commands) == ["demo", "probe", "run", "simulate"]
    for name, sub in commands.items():
        assert isinstance(sub, _cli._Parser), name  # one-line errors
        assert sub.formatter_class is _cli._Formatter, name  # defaults shown
        assert callable(sub.get_default("handler")), name


@pytest.mark.parametrize("name", ["demo", "probe", "run", "simulate"])
def test_help_documents_every_option_and_shows_defaults(name: str) -> None:
    sub = _subcommands()[name]
    text = " ".join(sub.format_help().split())
    for action in sub._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"llmtap {name} {action.option_strings[0]} has no help"
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            continue
        help_line = " ".join(sub._get_formatter()._format_action(action).split())
        assert f"(default: {default})" in help_line, help_line
        assert help_line.count("(default") == 1, help_line
    assert text.startswith(f"usage: llmtap {name}")


def test_help_positive_control() -> None:
    """The default check above can fail: a bare option with a default shows it, once."""
    p = _cli._Parser(prog="x")
    p.add_argument("--n", type=int, default=20, help="how many (20)")
    p.add_argument("--m", type=int, default=0, help="zero is a default too")
    text = " ".join(p.format_help().split())
    assert "how many (default: 20)" in text
    assert "zero is a default too (default: 0)" in text


def test_demo_help_names_both_sdks_and_explains_the_mixes() -> None:
    text = " ".join(_llmtap("demo", "--help").stdout.split())
    assert "anthropic and openai SDKs" in text
    for mix in ("default:", "faults:"):
        assert mix in text


def test_a_typo_warning_is_printed_once_and_prefixed_once(tmp_path: Path) -> None:
    """``llmtap run`` checks the settings before the program starts, and the program's instrumentation
    reads them again: the unknown-variable warning comes once, as ``llmtap: ignoring ...``."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMTAP_", "OTEL_"))}
    env["LLMTAP_BASEURLS"] = "http://127.0.0.1:1"
    code = "import llmtap._installation as t; print('active', t.active() is not None)"
    out = subprocess.run(
        [LLMTAP, "run", "--", sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "active True"  # positive control: the program was instrumented, so it read them
    warnings = [line for line in out.stderr.splitlines() if "LLMTAP_BASEURLS" in line]
    assert warnings == ["llmtap: ignoring LLMTAP_BASEURLS: no such setting (did you mean LLMTAP_BASE_URLS?)"]


def test_command_line_log_format_names_other_loggers_only() -> None:
    import logging

    from llmtap._log import without_prefix

    def line(name: str, msg: str) -> str:
        return without_prefix().format(logging.LogRecord(name, logging.WARNING, "f", 1, msg, None, None))

    assert line("llmtap", "llmtap: ignoring X") == "WARNING llmtap: ignoring X"
    assert line("opentelemetry.sdk", "failed") == "WARNING opentelemetry.sdk: failed"
