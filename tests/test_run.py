"""``llmtap run``: unmodified programs, instrumented from outside, export /metrics and OTLP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmtap import Outcome
from llmtap._cli.main import main, parser
from llmtap._cli.run import NOTHING_EXPORTED, USAGE, RunError, prepare
from llmtap._run_exit import RUN_ENV
from llmtap._settings import INTERNAL_ENV
from llmtap.simulator import Simulator
from tests.support.deploy import Scrape, free_port, histogram_count, posts, spans
from tests.support.otlp import Receiver, otlp_receiver

LLMTAP = str(Path(sys.executable).with_name("llmtap"))

# Unmodified apps: no llmtap anywhere. The SDKs read their base URL and key from the environment.
# Each waits for a line on stdin before exiting, so that the test can scrape its /metrics first.
SYNC_APP = textwrap.dedent(
    """
    import sys, anthropic
    client = anthropic.Anthropic()
    for _ in range(3):
        client.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with client.messages.stream(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as s:
        s.get_final_text()
    print("ready", flush=True)
    sys.stdin.readline()
    """
)
ASYNC_APP = textwrap.dedent(
    """
    import asyncio, sys, openai

    async def main():
        client = openai.AsyncOpenAI()

        async def one():
            stream = await client.chat.completions.create(
                model="gpt-x", stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "hi"}])
            async for _ in stream:
                pass

        await asyncio.gather(*(one() for _ in range(4)))
        await client.close()

    asyncio.run(main())
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def _env(sim: Simulator, receiver: Receiver, service: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMTAP_", "PROMETHEUS_"))}
    return {
        **env,
        "ANTHROPIC_BASE_URL": sim.base_url,
        "ANTHROPIC_API_KEY": "not-needed",
        "OPENAI_BASE_URL": sim.base_url + "/v1",
        "OPENAI_API_KEY": "not-needed",
        "LLMTAP_BASE_URLS": sim.base_url,
        "LLMTAP_METRICS_PORT": str(port),
        "OTEL_SERVICE_NAME": service,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "httpx",  # only llmtap's spans, for exact counts
    }


def _errors(stderr: str) -> set[str]:
    """The exception lines closing each traceback in ``stderr``."""
    lines = stderr.splitlines()
    ends = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    found = set()
    for start in ends:
        tail = [line for line in lines[start + 1 :] if line and not line.startswith(" ")]
        found.add(tail[0] if tail else "?")
    return found


def _errors_of_its_own(stderr: str, app: Path, env: dict[str, str]) -> set[str]:
    """The tracebacks in ``stderr`` of ``llmtap run -- python app`` that the app does not print without llmtap
    (run again so, only when there is one: openai 3.0.0 over httpx2 prints one of its own at exit, an async
    stream's generator closed by the event loop's shutdown)."""
    errors = _errors(stderr)
    if not errors:
        return errors
    alone = subprocess.run([sys.executable, str(app)], env=env, input="\n", capture_output=True, text=True, timeout=60)
    return errors - _errors(alone.stderr)


def test_errors_of_its_own_are_told_from_the_apps(tmp_path: Path) -> None:
    """Positive control: an error the app prints alone is the app's; one it does not is reported."""
    app = tmp_path / "app.py"
    app.write_text("import sys\nraise SystemExit(0)\n")
    boom = 'Traceback (most recent call last):\n  File "x", line 1\nRuntimeError: boom\n'
    assert _errors_of_its_own(boom, app, dict(os.environ)) == {"RuntimeError: boom"}
    app.write_text("raise RuntimeError('boom')\n")
    assert _errors_of_its_own(boom, app, dict(os.environ)) == set()
    assert _errors_of_its_own("", app, dict(os.environ)) == set()


@pytest.mark.parametrize(
    ("source", "calls", "model", "both"), [(SYNC_APP, 4, "claude-x", True), (ASYNC_APP, 4, "gpt-x", False)]
)
def test_unmodified_script_exports_metrics_and_otlp(
    tmp_path: Path, source: str, calls: int, model: str, both: bool
) -> None:
    """/metrics and OTLP spans; OTLP metrics too only when asked for (both=True), else one metric path."""
    app = tmp_path / "app.py"
    app.write_text(source)
    port = free_port()
    with Simulator() as sim, otlp_receiver() as receiver:
        env = _env(sim, receiver, "zero-code-app", port)
        if both:
            env["LLMTAP_OTEL_METRICS"] = "true"
        proc = subprocess.Popen(
            [LLMTAP, "run", "--", sys.executable, str(app)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
            served = sim.wait_served(calls)
            scrape = Scrape.get(f"http://127.0.0.1:{port}/metrics")
        finally:
            _, stderr = proc.communicate(input="\n", timeout=30)
        assert proc.returncode == 0, stderr
        assert not _errors_of_its_own(stderr, app, env), stderr
        assert ("exported twice" in stderr) is both, stderr
        # /metrics: exactly what the simulator served
        assert len(served) == calls
        assert scrape.total("llmtap_attempts_total", status_code="200") == len(served)
        assert scrape.total("llmtap_tokens_total", gen_ai_token_type="output") == sum(s.output_tokens for s in served)
        streamed = sum(s.stream for s in served)
        assert scrape.total("llmtap_streams_total", outcome=Outcome.COMPLETED.value) == streamed
        assert scrape.total("llmtap_streams_in_flight") == 0
        # OTLP: the spans arrived, from the configured service (flushed at exit), and the semconv
        # metrics when asked for: with a /metrics port, the Prometheus path is the default one
        chats = spans(receiver, "chat ")
        assert [name for name, _, _ in chats] == [f"chat {model}"] * calls
        assert {resource["service.name"] for _, _, resource in chats} == {"zero-code-app"}
        assert all(attrs["llmtap.outcome"] == Outcome.COMPLETED.value for _, attrs, _ in chats)
        assert histogram_count(receiver, "gen_ai.client.operation.duration") == (calls if both else 0)


@pytest.mark.slow
def test_otlp_endpoint_without_port_takes_the_meter_path(tmp_path: Path) -> None:
    """An exporting meter provider and no /metrics port: llmtap's metrics go over OTLP only; the app's own
    Prometheus registry stays free of them (no second path paid for, nothing to double count)."""
    app = tmp_path / "app.py"
    app.write_text(
        SYNC_APP.replace(
            'print("ready", flush=True)',
            "import prometheus_client\n"
            'print("families", sorted(m.name for m in prometheus_client.REGISTRY.collect() if "llmtap" in m.name))\n'
            'print("ready", flush=True)',
        )
    )
    with Simulator() as sim, otlp_receiver() as receiver:
        env = _env(sim, receiver, "meter-path", free_port())
        del env["LLMTAP_METRICS_PORT"]
        out = subprocess.run(
            [LLMTAP, "run", "--", sys.executable, str(app)], env=env, input="\n", capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert "families []" in out.stdout and "exported twice" not in out.stderr, (out.stdout, out.stderr)
        assert histogram_count(receiver, "gen_ai.client.operation.duration") == len(sim.wait_idle()) == 4
        # positive control: the same app with LLMTAP_PROMETHEUS=true has them in its registry (and says so)
        out = subprocess.run(
            [LLMTAP, "run", "--", sys.executable, str(app)],
            env={**env, "LLMTAP_PROMETHEUS": "true"},
            input="\n",
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert "'llmtap_attempts'" in out.stdout and "exported twice" in out.stderr, (out.stdout, out.stderr)


def test_plain_opentelemetry_instrument_exports_over_the_installed_otlp_exporter(tmp_path: Path) -> None:
    """``opentelemetry-instrument python app.py`` with nothing but an endpoint set: llmtap's distro (the only
    one installed) defaults the protocol to the HTTP exporter llmtap[run] ships, so the spans arrive and no
    traceback is printed. Control: asked for gRPC, whose exporter is not installed, OpenTelemetry's own
    start-up fails as it did with opentelemetry-distro's default, and nothing arrives."""
    app = tmp_path / "app.py"
    app.write_text(SYNC_APP)
    instrument = str(Path(sys.executable).with_name("opentelemetry-instrument"))
    with Simulator() as sim, otlp_receiver() as receiver:
        env = _env(sim, receiver, "plain", free_port())
        del env["LLMTAP_METRICS_PORT"]
        out = subprocess.run(
            [instrument, sys.executable, str(app)], env=env, input="\n", capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert [name for name, _, _ in spans(receiver, "chat ")] == ["chat claude-x"] * 4
        assert histogram_count(receiver, "gen_ai.client.operation.duration") == 4
    with Simulator() as sim, otlp_receiver() as receiver:
        env = {**_env(sim, receiver, "plain", free_port()), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        del env["LLMTAP_METRICS_PORT"]
        out = subprocess.run(
            [instrument, sys.executable, str(app)], env=env, input="\n", capture_output=True, text=True, timeout=120
        )
        assert "Requested component 'otlp_proto_grpc' not found" in out.stderr, out.stderr
        assert spans(receiver, "chat ") == []


def test_without_otlp_endpoint_nothing_is_sent_and_metrics_still_served(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(SYNC_APP)
    port = free_port()
    with Simulator() as sim, otlp_receiver() as receiver:
        env = _env(sim, receiver, "quiet", port)
        del env["OTEL_EXPORTER_OTLP_ENDPOINT"]
        out = subprocess.run(
            [LLMTAP, "run", "--metrics-port", str(port), "--", sys.executable, str(app)],
            env=env,
            input="\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr and "Failed to export" not in out.stderr, out.stderr
        assert len(sim.wait_idle()) == 4  # positive control: the app did its calls
        assert posts(receiver, "/v1/traces") == posts(receiver, "/v1/metrics") == 0


def test_bad_settings_fail_before_the_program_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    app = tmp_path / "app.py"
    app.write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {**os.environ, "LLMTAP_TRACES": "ture"}
    out = subprocess.run([LLMTAP, "run", "--", sys.executable, str(app)], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()  # one line, as every other llmtap run error
    assert line.startswith("llmtap run: LLMTAP_TRACES: expected a boolean"), line
    assert "'ture'" in line and "yes/no" in line and "validation error" not in line, line
    assert not marker.exists()
    two = subprocess.run(  # two bad variables: still one line, naming both
        [LLMTAP, "run", "--", sys.executable, str(app)],
        env={**env, "LLMTAP_EXEMPLARS": "maybe"},
        capture_output=True,
        text=True,
    )
    (line,) = two.stderr.splitlines()
    assert two.returncode == 2 and "LLMTAP_TRACES: " in line and "; LLMTAP_EXEMPLARS: " in line, line
    assert "got 'maybe'" in line, line
    env["LLMTAP_TRACES"] = "off"  # positive control
    subprocess.run([LLMTAP, "run", "--", sys.executable, str(app)], env=env, check=True, capture_output=True)
    assert marker.exists()


def test_nothing_exported_is_said_once_and_the_program_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Neither a /metrics port nor an exporter: one line on stderr says how to export, and the program runs;
    a port, an OTLP endpoint or an exporter of the user's choosing each make it quiet (the controls)."""
    app, marker = _marker_app(tmp_path)
    out = subprocess.run(
        [LLMTAP, "run", "--", sys.executable, str(app)], env=_clean_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and marker.exists(), out.stderr
    (line,) = out.stderr.splitlines()
    assert line.endswith(NOTHING_EXPORTED), line
    assert "--metrics-port" in line and "OTEL_EXPORTER_OTLP_ENDPOINT" in line
    base = {"PATH": os.environ["PATH"]}
    with caplog.at_level("WARNING", logger="llmtap"):
        prepare(["python3"], base)
        assert [r.getMessage() for r in caplog.records] == [NOTHING_EXPORTED]
        caplog.clear()
        prepare(["python3"], base, metrics_port=0)
        prepare(["python3"], {**base, "LLMTAP_METRICS_PORT": "0"})
        prepare(["python3"], {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
        prepare(["python3"], {**base, "OTEL_TRACES_EXPORTER": "console"})
        prepare(["python3"], {**base, "OTEL_METRICS_EXPORTER": "console"})
        assert not caplog.records


def test_prepare_defaults_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    executable, argv, env = prepare(["python3", "-V"], {"PATH": os.environ["PATH"]}, metrics_port=0)
    assert argv == ["python3", "-V"] and os.path.isabs(executable)
    assert env["LLMTAP_METRICS_PORT"] == "0" and env[RUN_ENV] == "1"
    assert (env["OTEL_TRACES_EXPORTER"], env["OTEL_METRICS_EXPORTER"], env["OTEL_LOGS_EXPORTER"]) == ("none",) * 3
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("auto_instrumentation")
    _, _, env = prepare(
        ["python3"], {"PATH": os.environ["PATH"], "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "PYTHONPATH": "/x"}
    )
    assert (env["OTEL_TRACES_EXPORTER"], env["OTEL_METRICS_EXPORTER"]) == ("otlp", "otlp")
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == "/x"
    _, _, env = prepare(["python3"], {"PATH": os.environ["PATH"], "OTEL_TRACES_EXPORTER": "console"})
    assert env["OTEL_TRACES_EXPORTER"] == "console"  # never overrides what the user set
    with pytest.raises(RunError, match="command not found"):
        prepare(["no-such-program-xyz"], {"PATH": os.environ["PATH"]})
    with pytest.raises(RunError, match=r"no command given; usage: .*--metrics-addr"):
        prepare([], {})
    import builtins

    real_import = builtins.__import__

    def no_distro(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("opentelemetry.exporter.otlp"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_distro)
    with pytest.raises(RunError, match=r"pip install 'llmtap\[run\]'"):
        prepare(["python3"], {"PATH": os.environ["PATH"]})


def test_one_metric_path_by_default(caplog: pytest.LogCaptureFixture) -> None:
    """The meter path when the OpenTelemetry meter provider exports and no /metrics port is asked for,
    Prometheus otherwise; never overriding the user's choice, and one line when both end up on."""
    base = {"PATH": os.environ["PATH"]}
    otlp = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}

    def paths(environ: dict[str, str], port: int | None = None) -> tuple[str | None, str | None]:
        _, _, env = prepare(["python3"], environ, metrics_port=port)
        return env.get("LLMTAP_PROMETHEUS"), env.get("LLMTAP_OTEL_METRICS")

    with caplog.at_level("WARNING", logger="llmtap"):
        assert paths(base) == (None, "false")  # nothing exports: Prometheus (the app's registry)
        assert paths(base, port=0) == (None, "false")
        assert paths(otlp) == ("false", None)  # OTLP metrics: the meter path
        assert paths({**base, "OTEL_METRICS_EXPORTER": "console"}) == ("false", None)
        assert paths({**otlp, "OTEL_METRICS_EXPORTER": "none"}) == (None, "false")
        assert paths(otlp, port=0) == (None, "false")  # asked for /metrics: Prometheus
        assert paths({**otlp, "LLMTAP_METRICS_PORT": "0"}) == (None, "false")
        assert not [r for r in caplog.records if "twice" in r.getMessage()]  # one path each time: nothing to say
        assert paths({**otlp, "LLMTAP_PROMETHEUS": "true"}) == ("true", None)  # the user's choice stays
    assert [r.getMessage() for r in caplog.records if "twice" in r.getMessage()] == [
        "llmtap run: metrics are exported twice, to Prometheus and over the OpenTelemetry meter "
        "(OTEL_METRICS_EXPORTER=otlp), as LLMTAP_PROMETHEUS and LLMTAP_OTEL_METRICS are both on; "
        "a dashboard that sums both double counts"
    ]
    assert RUN_ENV in INTERNAL_ENV  # the program's Settings.from_env() does not call it a typo


def _marker_app(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    app = tmp_path / "app.py"
    app.write_text(f"open({str(marker)!r}, 'w').close()\n")
    return app, marker


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMTAP_", "PROMETHEUS_"))}
    return {**env, **extra}


@pytest.mark.parametrize("multiprocess", [False, True], ids=["one-process", "multiprocess"])
def test_taken_port_exits_2_before_the_program_starts(tmp_path: Path, multiprocess: bool) -> None:
    """A port held by another program (a real listening socket): one line naming the address, exit 2, the
    program never starts. In multiprocess mode too: the holder is not a process of that directory."""
    app, marker = _marker_app(tmp_path)
    mp = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)} if multiprocess else {}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [LLMTAP, "run", "--metrics-port", str(port), "--", sys.executable, str(app)]
        out = subprocess.run(command, env=_clean_env(**mp), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot serve /metrics on 127.0.0.1:{port} (--metrics-port" in out.stderr
    assert "by another program" in out.stderr, out.stderr  # the likely cause comes first, in both modes
    said = out.stderr.index("another program")
    if multiprocess:
        assert f"no process of the multiprocess directory {tmp_path} serves it" in out.stderr, out.stderr
    else:  # a single process is not told first to use multiprocess mode
        assert "(choose another port)" in out.stderr and said < out.stderr.index("PROMETHEUS_MULTIPROC_DIR")
    assert not marker.exists()
    # positive control: the same command once the port is free
    subprocess.run(command, env=_clean_env(**mp), check=True, capture_output=True, timeout=60)
    assert marker.exists()


SIBLING = textwrap.dedent(
    """
    import sys, llmtap
    tap = llmtap.instrument(llmtap.Settings(metrics_port=int(sys.argv[1]), traces=False, otel_metrics=False))
    print("serving", tap.metrics_address, flush=True)
    sys.stdin.readline()
    """
)


def test_multiprocess_port_served_by_a_sibling_is_shared(tmp_path: Path) -> None:
    """In multiprocess mode a port served by a process of the same directory is left to it, as designed:
    the program starts and its llmtap does not serve; a different directory is another program."""
    app = tmp_path / "app.py"
    app.write_text(
        "import llmtap._installation as t\nprint('active', t.active() is not None, t.active().metrics_address)\n"
    )
    mp_dir, other_dir = tmp_path / "mp", tmp_path / "other"
    mp_dir.mkdir()
    other_dir.mkdir()
    port = free_port()
    env = _clean_env(PROMETHEUS_MULTIPROC_DIR=str(mp_dir))
    sibling = subprocess.Popen(
        [sys.executable, "-c", SIBLING, str(port)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert sibling.stdout is not None
    try:
        assert sibling.stdout.readline().startswith("serving")
        command = [LLMTAP, "run", "--metrics-port", str(port), "--", sys.executable, str(app)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "active True None", (out.stdout, out.stderr)
        assert out.stderr == ""
        Scrape.get(f"http://127.0.0.1:{port}/metrics")  # the sibling still serves
        # control: the same port seen from another directory is held by another program
        out = subprocess.run(
            command, env={**env, "PROMETHEUS_MULTIPROC_DIR": str(other_dir)}, capture_output=True, text=True
        )
        assert out.returncode == 2 and "by another program" in out.stderr, out.stderr
    finally:
        sibling.communicate("\n", timeout=30)


def test_worker_that_cannot_bind_logs_one_line(tmp_path: Path) -> None:
    """Inside the program (a worker process beside the one serving, without multiprocess mode): one line,
    no traceback, and that process runs without llmtap; the serving process is unaffected."""
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            """
            import subprocess, sys, llmtap._installation as t
            print("parent", t.active() is not None, flush=True)
            child = "import llmtap._installation as t; print('child', t.active() is not None)"
            subprocess.run([sys.executable, "-c", child], check=True)
            """
        )
    )
    port = free_port()
    command = [LLMTAP, "run", "--metrics-port", str(port), "--", sys.executable, str(app)]
    out = subprocess.run(command, env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["parent", "True", "child", "False"], out.stdout
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in lines[0] and "runs without llmtap" in lines[0]
    assert "PROMETHEUS_MULTIPROC_DIR" in lines[0]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["run"], "no command given"),
        (["run", "--"], "no command given"),
        (["run", "--metrics-port", "70000", "--", "x"], "--metrics-port: Input should be less than or equal to 65535"),
        (["run", "--metrics-port", "x", "--", "true"], "--metrics-port: Input should be a valid integer"),
        (["run", "--metrics-addr", "foo", "--", "true"], "--metrics-addr: must be an IP address"),
        (["run", "--bogus", "--", "true"], "unrecognized arguments: --bogus"),
    ],
)  # fmt: skip
def test_argument_errors_blame_the_argument(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    (message,) = capsys.readouterr().err.splitlines()  # one line, as every llmtap subcommand's errors
    assert error in message and message.startswith("llmtap run: ") and "LLMTAP_" not in message, message
    assert message.endswith("(see 'llmtap run --help')")
    run_parser = parser().parse_known_args(["run", "--", "x"])[0].parser
    assert run_parser.format_usage() == f"usage: {USAGE}\n" and "--metrics-addr" in USAGE
    # control: valid values parse, as the numbers and addresses Settings accepts
    args, unknown = parser().parse_known_args(["run", "--metrics-port", "65535", "--metrics-addr", "::", "--", "x"])
    assert (args.metrics_port, args.metrics_addr, args.program, unknown) == (65535, "::", ["--", "x"], [])


SPAN_APP = textwrap.dedent(
    """
    from opentelemetry import trace
    with trace.get_tracer("app").start_as_current_span("work"):
        pass
    print("app done", flush=True)
    """
)


def _exit_delay(app: Path, env: dict[str, str]) -> tuple[float, str, subprocess.CompletedProcess[str]]:
    """Seconds from the program's last line to its exit, its stdout and the finished process."""
    import time

    proc = subprocess.Popen(
        [LLMTAP, "run", "--", sys.executable, str(app)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    said = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    return time.monotonic() - said, line + stdout, subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)


def test_unreachable_otlp_endpoint_bounds_the_exit_in_one_line(tmp_path: Path) -> None:
    """A closed port as the OTLP endpoint: the exporter alone retries for its 10 s timeout per signal, one
    after the other, in 8 lines; under ``llmtap run`` the exit waits ~2 s in all and says so once. Control: a
    reachable receiver gets the span flushed at exit, and nothing is said."""
    app = tmp_path / "app.py"
    app.write_text(SPAN_APP)
    closed = free_port()
    env = _clean_env(OTEL_SERVICE_NAME="chat", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed}")
    delay, stdout, out = _exit_delay(app, env)
    assert out.returncode == 0 and stdout == "app done\n", (stdout, out.stderr)
    (line,) = out.stderr.splitlines()  # one line, not the exporters' retries
    assert line.startswith(f"llmtap run: the last spans and metrics were not delivered to http://127.0.0.1:{closed}")
    assert "OTEL_EXPORTER_OTLP_TIMEOUT" in line and "Transient error" not in out.stderr
    assert delay < 8.0, delay  # generous: ~2 s here; the exporters' own retries take over 10 s
    # control: a receiver that answers gets the span at exit, and there is nothing to say
    with otlp_receiver() as receiver:
        delay, stdout, out = _exit_delay(app, {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        assert out.returncode == 0 and stdout == "app done\n" and out.stderr == "", out.stderr
        assert [name for name, _, _ in spans(receiver)] == ["work"]


def test_bounded_exit_waits_at_most_its_bound(caplog: pytest.LogCaptureFixture) -> None:
    """A provider whose shutdown never returns: the exit handler returns after its bound with one line; one
    that returns: nothing is said, and every provider was shut down."""
    import logging
    import threading

    from llmtap._run_exit import BoundedExit

    class Provider:
        def __init__(self, block: bool) -> None:
            self.block = block
            self.called = threading.Event()
            self.release = threading.Event()

        def shutdown(self) -> None:
            self.called.set()
            if self.block:
                self.release.wait(30)

    quick, stuck = Provider(False), Provider(True)
    try:
        with caplog.at_level("WARNING", logger="llmtap"):
            BoundedExit([quick, Provider(False)], 0.2, "http://c:4318").run()
            assert quick.called.is_set() and not caplog.records  # control: done in time, silent
            BoundedExit([quick, stuck], 0.2, "http://c:4318").run()
    finally:  # at a real exit the OpenTelemetry loggers stay quiet; in this process, later tests read them
        for name in list(logging.Logger.manager.loggerDict):
            if name.startswith("opentelemetry"):
                one = logging.getLogger(name)
                for found in [f for f in one.filters if type(f).__name__ == "_Collect"]:
                    one.removeFilter(found)
    stuck.release.set()
    assert stuck.called.is_set()
    (record,) = caplog.records
    assert "not delivered to http://c:4318 (no answer in time)" in record.getMessage(), record.getMessage()
