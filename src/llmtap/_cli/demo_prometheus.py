"""A local ``prometheus`` for ``llmtap demo``: started on a free port, scraping the demo's ``/metrics`` with a
copy of llmtap's alert rules whose ``for:`` is cut to :data:`DEMO_FOR` (so alerts fire within minutes), its
data in a temporary folder removed when the demo ends; skipped when no ``prometheus`` is installed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DEMO_FOR", "PrometheusError", "demo_rules", "find_rules", "http_status", "prometheus"]


class PrometheusError(Exception):
    """The demo's Prometheus cannot start (its port is taken, it exited, it was not ready in time): one line."""


def find_rules() -> Path | None:
    package = Path(__file__).resolve().parents[1]  # src/llmtap (or site-packages/llmtap)
    for candidate in (package / "dashboards" / "alerts.yaml", package.parents[1] / "dashboards" / "alerts.yaml"):
        if candidate.is_file():
            return candidate
    return None


DEMO_FOR = "1m"
"""The demo's copy of the alert rules waits this long (``for:``) before an alert fires, instead of the
shipped 2 to 30 minutes, so alerts fire within a few minutes of the start."""


def demo_rules(rules: Path, dest: Path) -> Path:
    """A copy of the shipped rules with every ``for:`` cut to :data:`DEMO_FOR` (expressions unchanged)."""
    text = re.sub(r"(?m)^(\s+for:\s*)\d+[smh]\s*$", lambda m: m.group(1) + DEMO_FOR, rules.read_text())
    out = dest / "alerts.demo.yaml"
    out.write_text(text)
    return out


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


@contextlib.contextmanager
def prometheus(metrics_port: int, port: int, *, ready_within: float = 60.0) -> Iterator[str | None]:
    """A local ``prometheus`` scraping the demo with llmtap's alert rules; yields its alerts page URL (the
    one this version serves: ``/alerts``, ``/classic/alerts`` on builds without the new UI such as
    Debian's 2.x, else the ``/api/v1/alerts`` API), or ``None`` when ``prometheus`` is not installed.
    Its data lives in a temporary folder, removed when the demo ends.

    Raises:
        PrometheusError: the port is taken, or Prometheus exited or did not become ready.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        print("prometheus not found on PATH (Debian: apt-get install prometheus); continuing without it")
        yield None
        return
    with socket.socket() as probe:  # a Prometheus would die on a taken port, or we would watch someone else's
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise PrometheusError(
                f"cannot start Prometheus on 127.0.0.1:{port}: {exc.strerror or exc} (is a Prometheus already "
                "running there?); choose another port: --prometheus PORT"
            ) from None
    tmp = Path(tempfile.mkdtemp(prefix="llmtap-prom-"))
    try:
        shipped = find_rules()
        rules = None if shipped is None else demo_rules(shipped, tmp)
        config = [
            "global: {scrape_interval: 2s, evaluation_interval: 2s}",
            "scrape_configs:",
            "  - job_name: llmtap-demo",
            f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]",
        ]
        if rules is not None:
            config.insert(1, f"rule_files: ['{rules}']")
        (tmp / "prometheus.yml").write_text("\n".join(config) + "\n")
        log = tmp / "prometheus.log"
        with log.open("wb") as log_file:
            proc = subprocess.Popen(
                [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=log_file,
            )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + ready_within
            while http_status(base + "/-/ready") != 200:
                if proc.poll() is not None:
                    lines = log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
                    raise PrometheusError(f"Prometheus exited at start-up (status {proc.returncode}): {lines[-1]}")
                if time.monotonic() > deadline:
                    raise PrometheusError(f"Prometheus on 127.0.0.1:{port} was not ready within {ready_within:.0f} s")
                time.sleep(0.2)
            page = next((p for p in ("/alerts", "/classic/alerts") if http_status(base + p) == 200), "/api/v1/alerts")
            yield base + page
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
