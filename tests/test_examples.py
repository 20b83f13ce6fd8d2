"""Every example in examples/ runs, as people will run it (the FastAPI service: test_fastapi_service.py)."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

import llmtap
from llmtap import _installation
from llmtap.simulator import Simulator
from tests.support.deploy import free_port, posts, spans, wait_until
from tests.support.otlp import otlp_receiver
from tests.support.prom import require

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def uninstrumented() -> Iterator[None]:
    yield
    if _installation.active() is not None:  # an example failed half-way
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
    assert _installation.active() is None


@pytest.mark.slow
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


def _docstring_exports(script: Path) -> dict[str, str]:
    """The variables a script's docstring tells the reader to ``export`` (one ``export`` line)."""
    (line,) = (
        ln.strip() for ln in (script.read_text().split('"""')[1]).splitlines() if ln.strip().startswith("export ")
    )
    return dict(pair.split("=", 1) for pair in line.split()[1:])


@pytest.mark.slow
def test_zero_code_example_as_its_docstring_says(tmp_path: Path) -> None:
    """The docstring's simulator exports and ``--metrics-port ... --wait``: /metrics is scrapeable while it waits."""
    exports = _docstring_exports(EXAMPLES / "zero_code_app.py")
    assert set(exports) == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}  # no LLMTAP_BASE_URLS: the SDK is observed
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMTAP_", "PROMETHEUS_", "ANTHROPIC_"))}
    with Simulator() as sim:
        env.update({k: v.replace("http://127.0.0.1:8787", sim.base_url) for k, v in exports.items()})
        llmtap_cli = str(Path(sys.executable).with_name("llmtap"))
        command = [llmtap_cli, "run", "--metrics-port", str(port), "--", sys.executable,
                   str(EXAMPLES / "zero_code_app.py"), "--wait", "20"]  # fmt: skip
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("tok0 tok1")  # the answer, then it waits
            text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
    assert 'llmtap_streams_total{gen_ai_operation_name="chat",gen_ai_provider_name="anthropic"' in text
    assert 'outcome="completed"} 1.0' in text


def test_prometheus_scrape_config_is_valid_as_shipped() -> None:
    """``promtool check config`` on the example's file where it is (it also loads the rule file it names)."""
    promtool = require("promtool")
    config = EXAMPLES / "fastapi_service" / "prometheus.yml"
    out = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 1 rule files found" in out.stdout + out.stderr  # it checked llmtap's rules too


def test_fastapi_requirements_install_what_the_example_imports() -> None:
    folder = EXAMPLES / "fastapi_service"
    lines = [ln.split("#")[0].strip() for ln in (folder / "requirements.txt").read_text().splitlines()]
    names = {ln.split(">")[0].split("=")[0].strip() for ln in lines if ln and not ln.startswith("-e")}
    assert "-e ../..[run]" in lines  # llmtap from this checkout, with `llmtap run`
    imported = {"anthropic", "fastapi", "uvicorn-worker", "gunicorn", "uvicorn"}
    assert imported <= names, imported - names
    assert "gunicorn -c gunicorn.conf.py" in (folder / "app.py").read_text()


def test_gunicorn_conf_says_what_it_needs_in_one_line(tmp_path: Path) -> None:
    """Started without PROMETHEUS_MULTIPROC_DIR, the example's gunicorn.conf.py names itself and the fix."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["ANTHROPIC_API_KEY"] = "not-needed"
    out = subprocess.run(
        [str(Path(sys.executable).with_name("gunicorn")), "-c", "gunicorn.conf.py", "-b", f"127.0.0.1:{free_port()}",
         "app:app"],
        cwd=EXAMPLES / "fastapi_service", env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in out.stderr
    assert "gunicorn.conf.py (gunicorn reads ./gunicorn.conf.py by default)" in out.stderr, out.stderr
    assert "export PROMETHEUS_MULTIPROC_DIR=$(mktemp -d)" in out.stderr


def test_cost_budget_example_rules() -> None:
    """examples/cost_budget: the rule checks, and its promtool cases (over budget fires, under does not) pass."""
    promtool = require("promtool")
    folder = EXAMPLES / "cost_budget"
    for args in (["check", "rules", "rules.yaml"], ["test", "rules", "test.yaml"]):
        done = subprocess.run([promtool, *args], cwd=folder, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_raw_httpx_example_names_what_it_needs(tmp_path: Path) -> None:
    """Without httpx (the SDKs bring httpx2): one line naming the extra, not a traceback. Control: with httpx the
    example runs (test_example_runs)."""
    blocker = tmp_path / "httpx.py"  # shadows the installed httpx: importing it fails as if it were missing
    blocker.write_text('raise ImportError("No module named httpx")\n')
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "raw_httpx.py")],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert (
        out.stderr.strip() == "examples/raw_httpx.py needs httpx (the SDKs bring httpx2): pip install 'llmtap[httpx]'"
    )
    assert "Needs ``httpx``" in (EXAMPLES / "raw_httpx.py").read_text().split('"""')[1]  # the docstring says it too
