"""The ``llmtap`` command: version, the simulator as a server, and a short headless demo."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx2

import llmtap


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "llmtap", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == llmtap.__version__


def test_simulate_serves_and_stops_on_ctrl_c() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtap", "simulate", "--port", str(port), "--scenario", "tokens=3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
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
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert b"Traceback" not in stderr


def test_headless_demo_runs_and_exits_cleanly() -> None:
    port = _free_port()
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
        "import httpx2, llmtap._tap as t; "
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
