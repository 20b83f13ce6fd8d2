"""``llmtap run``: unmodified programs, instrumented from outside, export /metrics and OTLP."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmtap import Outcome
from llmtap._run import RunError, prepare
from llmtap.simulator import Simulator
from tests._deploy import Scrape, free_port, histogram_count, posts, spans, wait_until
from tests._otlp import Receiver, otlp_receiver

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


@pytest.mark.parametrize(("source", "calls", "model"), [(SYNC_APP, 4, "claude-x"), (ASYNC_APP, 4, "gpt-x")])
def test_unmodified_script_exports_metrics_and_otlp(tmp_path: Path, source: str, calls: int, model: str) -> None:
    app = tmp_path / "app.py"
    app.write_text(source)
    port = free_port()
    with Simulator() as sim, otlp_receiver() as receiver:
        env = _env(sim, receiver, "zero-code-app", port)
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
        assert "Traceback" not in stderr, stderr
        # /metrics: exactly what the simulator served
        assert len(served) == calls
        assert scrape.total("llmtap_attempts_total", status_code="200") == len(served)
        assert scrape.total("llmtap_tokens_total", gen_ai_token_type="output") == sum(s.output_tokens for s in served)
        streamed = sum(s.stream for s in served)
        assert scrape.total("llmtap_streams_total", outcome=Outcome.COMPLETED.value) == streamed
        assert scrape.total("llmtap_streams_in_flight") == 0
        # OTLP: the spans and the semconv metrics arrived, from the configured service (flushed at exit)
        wait_until(lambda: posts(receiver, "/v1/metrics") > 0, 10, "OTLP metrics")
        chats = spans(receiver, "chat ")
        assert [name for name, _, _ in chats] == [f"chat {model}"] * calls
        assert {resource["service.name"] for _, _, resource in chats} == {"zero-code-app"}
        assert all(attrs["llmtap.outcome"] == Outcome.COMPLETED.value for _, attrs, _ in chats)
        assert histogram_count(receiver, "gen_ai.client.operation.duration") == calls


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
        assert len(sim.served) == 4  # positive control: the app did its calls
        assert posts(receiver, "/v1/traces") == posts(receiver, "/v1/metrics") == 0


def test_bad_settings_fail_before_the_program_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    app = tmp_path / "app.py"
    app.write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {**os.environ, "LLMTAP_TRACES": "ture"}
    out = subprocess.run([LLMTAP, "run", "--", sys.executable, str(app)], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert "LLMTAP_TRACES" in out.stderr and "'ture'" in out.stderr and "yes/no" in out.stderr
    assert not marker.exists()
    env["LLMTAP_TRACES"] = "off"  # positive control
    subprocess.run([LLMTAP, "run", "--", sys.executable, str(app)], env=env, check=True, capture_output=True)
    assert marker.exists()


def test_prepare_defaults_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    executable, argv, env = prepare(["python3", "-V"], {"PATH": os.environ["PATH"]}, metrics_port=9464)
    assert argv == ["python3", "-V"] and os.path.isabs(executable)
    assert env["LLMTAP_METRICS_PORT"] == "9464"
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
    with pytest.raises(RunError, match="usage"):
        prepare([], {})
    import builtins

    real_import = builtins.__import__

    def no_distro(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("opentelemetry.distro"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_distro)
    with pytest.raises(RunError, match=r"pip install 'llmtap\[run\]'"):
        prepare(["python3"], {"PATH": os.environ["PATH"]})
