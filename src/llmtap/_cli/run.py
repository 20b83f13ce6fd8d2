"""``llmtap run [--metrics-port N] -- COMMAND...``: observe an unmodified Python program.

It reuses ``opentelemetry-instrument``'s machinery rather than a sitecustomize of its own: the directory
holding ``opentelemetry.instrumentation.auto_instrumentation``'s ``sitecustomize`` is put first on
``PYTHONPATH`` and the command is exec'd. At interpreter start-up, before the program imports anything, that
sitecustomize loads llmtap's distro and configurator (``llmtap._distro``: ``opentelemetry-distro``'s, with
OTLP over HTTP; they build the SDK tracer and meter providers and their exporters from the standard
``OTEL_*`` variables) and then every ``opentelemetry_instrumentor`` entry point, llmtap's included, which
reads its settings from ``LLMTAP_*``. Child processes (``uvicorn --workers``, ``multiprocessing``) inherit
``PYTHONPATH`` and are instrumented the same way; forked ones (gunicorn workers) inherit the instrumented
interpreter.

Defaults ``llmtap run`` adds when the variable is unset (it never overrides one you set):

- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: ``otlp`` when an OTLP endpoint is configured
  (``OTEL_EXPORTER_OTLP_ENDPOINT`` or a per-signal one), else ``none`` (nothing to send to);
- ``OTEL_LOGS_EXPORTER``: ``none``;
- ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf`` (the exporter ``llmtap[run]`` installs);
- ``OTEL_PYTHON_DISTRO`` / ``OTEL_PYTHON_CONFIGURATOR``: ``llmtap``, also where ``opentelemetry-distro`` is
  installed beside it;
- one metric path, so nobody pays for (or double counts) both by accident: the OpenTelemetry meter
  (``LLMTAP_PROMETHEUS=false``) when its provider exports (``OTEL_METRICS_EXPORTER`` is not ``none``) and
  no ``/metrics`` port is asked for; Prometheus (``LLMTAP_OTEL_METRICS=false``) otherwise. Both stay on
  only when both variables say so, and then one log line says that metrics are exported twice.

With neither a ``/metrics`` port nor an exporter (no OTLP endpoint, no ``OTEL_*_EXPORTER``), nothing
leaves the program: one line on stderr says so and how to export, and the program runs.

Before the program starts it checks what would otherwise fail inside it, and exits 2 with one line:
the ``LLMTAP_*`` settings, the command, the ``run`` extra, and that the ``/metrics`` address can be
bound (in multiprocess mode: held by nobody, or served by a process of the same directory). A failure
that can only happen inside the program (a worker racing another program for the port) is one
log line there, and that process runs without llmtap (``LLMTAP_RUN`` tells the instrumentor it runs
under ``llmtap run``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from llmtap._log import logger
from llmtap._run_exit import RUN_ENV

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["NOTHING_EXPORTED", "USAGE", "prepare", "run"]

USAGE = "llmtap run [--metrics-port N] [--metrics-addr ADDR] -- COMMAND [ARGS...]"
_CLI_SOURCE = "--metrics-port / LLMTAP_METRICS_PORT, --metrics-addr / LLMTAP_METRICS_ADDR"

_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
EXTRA_HINT = "llmtap run needs the OpenTelemetry SDK, instrumentation and OTLP exporter: pip install 'llmtap[run]'"


NOTHING_EXPORTED = (
    "llmtap run: nothing is exported: add --metrics-port 9464 to serve /metrics, or set "
    "OTEL_EXPORTER_OTLP_ENDPOINT to send OTLP (unless the program serves prometheus_client's registry itself)"
)
"""Said once, on stderr, when neither a ``/metrics`` port nor an OpenTelemetry exporter is configured."""


def _exports(env: Mapping[str, str], name: str) -> bool:
    return env[name].strip().lower() not in ("", "none")


class RunError(Exception):
    """``llmtap run`` cannot start the command; the message says why."""


def _sitecustomize_dir() -> str:
    try:
        # llmtap's distro and configurator build the SDK providers; the exporter is what they export with
        import opentelemetry.exporter.otlp.proto.http
        import opentelemetry.sdk._configuration  # noqa: F401
        from opentelemetry.instrumentation import auto_instrumentation
    except ImportError as exc:
        raise RunError(f"{EXTRA_HINT} ({exc})") from exc
    return os.path.dirname(os.path.abspath(auto_instrumentation.__file__))


def prepare(
    command: Sequence[str],
    environ: Mapping[str, str],
    *,
    metrics_port: int | None = None,
    metrics_addr: str | None = None,
) -> tuple[str, list[str], dict[str, str]]:
    """The executable, argv and environment that ``run`` execs (checked, nothing started).

    Raises:
        RunError: no command, the command is not found, the ``run`` extra is missing, the
            ``/metrics`` address cannot be served.
        pydantic.ValidationError: the ``LLMTAP_*`` settings are invalid (named in the message).
    """
    from llmtap._log import quiet
    from llmtap._settings import Settings

    if not command:
        raise RunError(f"llmtap run: no command given; usage: {USAGE}")
    env = dict(environ)
    if metrics_port is not None:
        env["LLMTAP_METRICS_PORT"] = str(metrics_port)
    if metrics_addr is not None:
        env["LLMTAP_METRICS_ADDR"] = metrics_addr
    otlp = "otlp" if any(env.get(name) for name in _ENDPOINTS) else "none"
    env.setdefault("OTEL_TRACES_EXPORTER", otlp)
    env.setdefault("OTEL_METRICS_EXPORTER", otlp)
    env.setdefault("OTEL_LOGS_EXPORTER", "none")
    env.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    env.setdefault("OTEL_PYTHON_DISTRO", "llmtap")  # ours, also when opentelemetry-distro is installed
    env.setdefault("OTEL_PYTHON_CONFIGURATOR", "llmtap")
    exporting = _exports(env, "OTEL_METRICS_EXPORTER")
    if exporting and not env.get("LLMTAP_METRICS_PORT", "").strip():
        env.setdefault("LLMTAP_PROMETHEUS", "false")  # the meter path
    else:
        env.setdefault("LLMTAP_OTEL_METRICS", "false")  # the Prometheus path
    # fail here, with the variable named, rather than inside the program; unknown LLMTAP_* variables are
    # left to the program's own instrumentation to warn about, once
    with quiet():
        settings = Settings.from_env(env)
    if settings.prometheus and settings.otel_metrics is not False and exporting:
        served = f"/metrics on port {settings.metrics_port}" if settings.metrics_port is not None else "Prometheus"
        logger.warning(
            "llmtap run: metrics are exported twice, to %s and over the OpenTelemetry meter "
            "(OTEL_METRICS_EXPORTER=%s), as LLMTAP_PROMETHEUS and LLMTAP_OTEL_METRICS are both on; "
            "a dashboard that sums both double counts",
            served,
            env["OTEL_METRICS_EXPORTER"],
        )
    env[RUN_ENV] = "1"
    site_dir = _sitecustomize_dir()
    # the same PYTHONPATH opentelemetry-instrument builds: its sitecustomize first, then the cwd
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != site_dir]
    cwd = os.getcwd()
    if cwd not in paths:
        paths.insert(0, cwd)
    env["PYTHONPATH"] = os.pathsep.join([site_dir, *paths])
    executable = shutil.which(command[0], path=env.get("PATH"))
    if executable is None:
        raise RunError(f"llmtap run: command not found: {command[0]}")
    if settings.prometheus and settings.metrics_port is not None:
        _check_port(settings.metrics_addr, settings.metrics_port, env)
    if settings.metrics_port is None and not exporting and not _exports(env, "OTEL_TRACES_EXPORTER"):
        logger.warning("%s", NOTHING_EXPORTED)
    return executable, list(command), env


def _check_port(addr: str, port: int, env: Mapping[str, str]) -> None:
    """What :class:`~llmtap._exporters.serve.MetricsServer` will find in the program, checked now."""
    from llmtap._exporters import serve as _serve

    try:
        _serve.check_port(addr, port, source=_CLI_SOURCE, environ=env)
    except OSError as exc:
        raise RunError(f"llmtap run: {(exc.strerror or str(exc)).removeprefix('llmtap ')}") from exc


def _one_line(exc: ValidationError) -> str:
    """A settings error as one line: each bad variable, what it accepts and the value given."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        value = error.get("input")
        shown = repr(value) if isinstance(value, str) else None
        if shown is not None and shown not in message:
            message += f", got {shown}"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def run(command: Sequence[str], *, metrics_port: int | None = None, metrics_addr: str | None = None) -> int:
    """Exec ``command`` instrumented (returns only on error, with the exit status to use)."""
    from pydantic import ValidationError

    try:
        executable, argv, env = prepare(command, os.environ, metrics_port=metrics_port, metrics_addr=metrics_addr)
    except RunError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"llmtap run: {_one_line(exc)}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, argv, env)
    return 0  # not reached
