"""``llmtap demo``: the live view's size, and the local Prometheus it starts (port, alerts link, clean-up)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

import llmtap
from llmtap import _demo
from tests._prom import ALERTS, require

MODELS = (*_demo.MODELS, *_demo.OPENAI_MODELS)


def _view() -> _demo._View:
    """A view holding one window of every outcome, retries and a rate limit for each demo model."""
    view = _demo._View(registry=None)  # type: ignore[arg-type]  # snapshot() is not called
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for i, outcome in enumerate(llmtap.Outcome):
        values[("llmtap_streams_total", (("outcome", outcome.value),))] = 10.0 * (i + 1)
    for reason in ("429", "529", "connection_error"):
        values[("llmtap_retries_total", (("reason", reason),))] = 3.0
    values[("llmtap_attempts_total", ())] = 1234.0
    for model in MODELS:
        for resource in ("requests", "tokens", "input_tokens", "output_tokens"):
            labels = (("gen_ai_request_model", model), ("resource", resource))
            values[("llmtap_ratelimit_limit", labels)] = 1000.0
            values[("llmtap_ratelimit_remaining", labels)] = 250.0
    view.history = [(0.0, {}), (30.0, values)]
    return view


def test_live_view_fits_80x24_with_the_title_and_the_prometheus_link() -> None:
    alerts = "http://127.0.0.1:9090/classic/alerts fire after their for: (2m-30m)"
    frame = _view().render("http://127.0.0.1:9464", 123.0, size=(80, 24), prometheus=alerts)
    lines = frame.splitlines()
    assert len(lines) <= 23, frame  # the 24th row holds the cursor
    assert max(map(len, lines)) <= 80, frame
    assert lines[0].startswith("llmtap demo — http://127.0.0.1:9464/metrics") and "Ctrl-C" in lines[0]
    assert any("/classic/alerts" in line for line in lines)
    assert any("attempts   1234" in line for line in lines)
    for outcome in llmtap.Outcome:
        assert any(line.strip().startswith(outcome.value) for line in lines), outcome
    for model in MODELS:  # nothing cut at 80x24
        assert any(line.strip().startswith(model) for line in lines), model


def test_live_view_on_a_small_terminal_cuts_the_bottom_not_the_title() -> None:
    frame = _view().render("http://127.0.0.1:9464", 1.0, size=(40, 10))
    lines = frame.splitlines()
    assert len(lines) == 9 and max(map(len, lines)) <= 40
    assert lines[0].startswith("llmtap demo — http://127.0.0.1:")
    full = _view().render("http://127.0.0.1:9464", 1.0, size=(200, 200)).splitlines()
    assert len(full) > 9  # positive control: the cut removed something


def test_for_range_reads_the_shipped_rules(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text("        for: 10m\n        for: 90s\n        for: 1h\n        expr: x\n")
    assert _demo._for_range(rules) == "90s-1h"
    lo, hi = _demo._for_range(ALERTS).split("-")
    assert lo.endswith(("s", "m", "h")) and hi.endswith(("s", "m", "h"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.prometheus
def test_prometheus_alerts_link_works_and_the_temp_folder_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require("prometheus")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with _demo._prometheus(_free_port(), _free_port()) as alerts:
        assert alerts is not None
        assert list(tmp_path.glob("llmtap-prom-*")), "positive control: its data folder exists while it runs"
        with urllib.request.urlopen(alerts, timeout=10) as response:
            assert response.status == 200
            page = response.read().decode()
        assert "LlmtapOverloadedBurst" in page or "Alerts" in page or '"status":"success"' in page
    assert not list(tmp_path.glob("llmtap-prom-*")), "the demo's Prometheus data folder was left behind"


@pytest.mark.prometheus
def test_demo_prometheus_on_a_taken_port_fails_in_one_line(tmp_path: Path) -> None:
    require("prometheus")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        llmtap_cli = str(Path(sys.executable).with_name("llmtap"))
        out = subprocess.run(
            [llmtap_cli, "demo", "--headless", "--duration", "30", "--metrics-port", str(_free_port()),
             "--prometheus", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 2, out
    lines = out.stderr.splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"llmtap demo: cannot start Prometheus on 127.0.0.1:{port}")
    assert "streams=" not in out.stdout  # no traffic was started


@pytest.mark.prometheus
def test_prometheus_that_dies_at_start_up_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Prometheus exiting at start-up (here: an unusable storage path) is an error, not a printed URL."""
    require("prometheus")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        args = [a if not a.startswith("--storage.tsdb.path=") else "--storage.tsdb.path=/dev/null/x" for a in args]
        return real_popen(args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(_demo.DemoError, match="Prometheus exited at start-up"), _demo._prometheus(1, _free_port()):
        pass
    assert not list(tmp_path.glob("llmtap-prom-*"))


def test_metrics_port_0_prints_the_port_taken() -> None:
    llmtap_cli = str(Path(sys.executable).with_name("llmtap"))
    out = subprocess.run(
        [llmtap_cli, "demo", "--headless", "--duration", "2", "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    match = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics", out.stdout)
    assert match is not None, out.stdout
    assert int(match.group(1)) > 0
