"""A real Prometheus and the processes around it, for the tests that query one: start and stop
processes in their own session, wait for them, and call Prometheus' HTTP API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy import free_port
from tests.support.paths import ROOT

__all__ = ["Proc", "api", "free_port", "http_get", "prometheus_command", "query", "start", "stop_all", "wait_for"]


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self, limit: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-limit:]

    def terminate(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)

    def stop(self) -> None:
        self.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)


def stop_all(procs: list[Proc]) -> None:
    """SIGTERM every process first, then wait for each: they wind down at once."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.stop()


def prometheus_command(binary: str, config: dict[str, Any], tmp: Path, *flags: str) -> tuple[list[str], str]:
    """The command line and URL of a Prometheus on a free port of 127.0.0.1, configured by ``config`` (written to
    ``tmp/prometheus.yml``), storing in ``tmp`` for an hour, with more ``flags``."""
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        binary,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        *flags,
    ]
    return args, f"http://127.0.0.1:{port}"


def start(name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> Proc:
    """``args`` in a session of its own, output to ``log``; ``env`` is added to this process' environment."""
    with log.open("wb") as out:
        popen = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    return Proc(name, popen, log)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status: int = resp.status
            return status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def wait_for(what: str, check: Any, timeout: float, proc: Proc) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            pytest.fail(f"{proc.name} exited with {proc.popen.returncode} before {what}:\n{proc.output()}")
        try:
            if check():
                return
        except OSError as e:
            last = repr(e)
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} ({last}):\n{proc.output()}")


# ---------------------------------------------------------------------------------------------
# Prometheus HTTP API
# ---------------------------------------------------------------------------------------------


def api(url: str, path: str, params: dict[str, str] | list[tuple[str, str]], post: bool = True) -> dict[str, Any]:
    """Call the Prometheus HTTP API; errors come back as ``{"status": "error", "error": ...}``."""
    data = urllib.parse.urlencode(params)
    if post:
        req = urllib.request.Request(url + path, data=data.encode(), method="POST")
    else:
        req = urllib.request.Request(url + path + ("?" + data if data else ""))
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"error": raw.decode("utf-8", "replace")[:500]}
        body["status"] = "error"
        body.setdefault("error", f"HTTP {e.code}")
    return body


def query(url: str, expr: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(error or None, result vector)."""
    body = api(url, "/api/v1/query", {"query": expr})
    if body.get("status") != "success":
        return f"{body.get('errorType', '')}: {body.get('error', body)}", []
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return None, [{"value": data["result"]}]
    result: list[dict[str, Any]] = data["result"]
    return None, result
