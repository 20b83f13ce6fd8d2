"""Every example in examples/ runs, as people will run it (the FastAPI service: test_fastapi_service.py)."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import llmtap
from llmtap import _tap
from llmtap.simulator import Simulator
from tests._deploy import posts, spans, wait_until
from tests._otlp import otlp_receiver
from tests._prom import ALERTS, require

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def uninstrumented() -> Iterator[None]:
    yield
    if _tap.active() is not None:  # an example failed half-way
        llmtap.uninstrument()
        pytest.fail("the example left llmtap instrumented")


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("anthropic_quickstart.py", ['status_code="529"} 1.0', 'outcome="completed"} 1.0', 'reason="529"} 1.0']),
        ("anthropic_async.py", ['outcome="completed"} 3.0', 'gen_ai_token_type="output"} 24.0']),
        ("openai_quickstart.py", ['status_code="200"} 2.0', 'outcome="completed"} 1.0']),
        ("openai_async.py", ['outcome="completed"} 3.0', 'gen_ai_token_type="output"} 24.0']),
        ("raw_httpx.py", ["11 SSE events", 'outcome="completed"} 1.0']),
        ("raw_httpx_transport.py", ["completed 200 Usage(input_tokens=25, output_tokens=5"]),
    ],
)
def test_example_runs(
    script: str, expected: list[str], capsys: pytest.CaptureFixture[str], uninstrumented: None
) -> None:
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    for needle in expected:
        assert needle in out, out
    assert _tap.active() is None


def test_zero_code_example_under_llmtap_run() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMTAP_", "PROMETHEUS_"))}
    with Simulator() as sim, otlp_receiver() as receiver:
        env.update(
            ANTHROPIC_BASE_URL=sim.base_url,
            ANTHROPIC_API_KEY="not-needed",
            LLMTAP_BASE_URLS=sim.base_url,
            OTEL_SERVICE_NAME="chat",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        )
        llmtap_cli = str(Path(sys.executable).with_name("llmtap"))
        command = [llmtap_cli, "run", "--", sys.executable, str(EXAMPLES / "zero_code_app.py")]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("tok0 tok1"), out.stdout
        wait_until(lambda: posts(receiver, "/v1/metrics") > 0, 10, "OTLP metrics")
        assert [name for name, _, _ in spans(receiver, "chat ")] == ["chat claude-haiku-4-5"]


def test_prometheus_scrape_config_is_valid(tmp_path: Path) -> None:
    promtool = require("promtool")
    shutil.copy(EXAMPLES / "fastapi_service" / "prometheus.yml", tmp_path)
    shutil.copy(ALERTS, tmp_path / "alerts.yaml")
    out = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_cost_budget_example_rules() -> None:
    """examples/cost_budget: the rule checks, and its promtool cases (over budget fires, under does not) pass."""
    promtool = require("promtool")
    folder = EXAMPLES / "cost_budget"
    for args in (["check", "rules", "rules.yaml"], ["test", "rules", "test.yaml"]):
        done = subprocess.run([promtool, *args], cwd=folder, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
