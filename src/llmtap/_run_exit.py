"""Under ``llmtap run``: the OpenTelemetry SDK's providers flushed at exit within a bound, said in one line.

The SDK shuts its tracer and meter providers down at exit (``atexit``), one after the other, and its OTLP
exporter retries an endpoint it cannot reach until its timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s): an
unreachable Collector added 7-11 s to a program's exit and 4-8 log lines. Under ``llmtap run`` the
providers' own exit handlers are replaced by one that shuts both down at once on a thread started
beforehand (Python 3.12 starts no thread during exit) and waits at most :data:`EXIT_SECONDS`, or
``OTEL_EXPORTER_OTLP_TIMEOUT`` when it is set; what the exporters log meanwhile becomes one line.

Only public API is used: the providers' ``shutdown()``, ``atexit`` and logging filters. The exporters'
lines while the program runs are left as they are.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

from llmtap._log import logger

__all__ = ["EXIT_SECONDS", "RUN_ENV", "BoundedExit", "install"]

RUN_ENV = "LLMTAP_RUN"
"""Set to ``1`` in the program's environment by ``llmtap run``: it runs under it (read by the instrumentor,
which then bounds the exit here)."""

EXIT_SECONDS = 2.0
"""How long the program's exit waits for the last spans and metrics, unless ``OTEL_EXPORTER_OTLP_TIMEOUT``
says otherwise: an export to a reachable Collector takes milliseconds."""

_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+|Name or service not known|Read timed out")


def _seconds(environ: Mapping[str, str]) -> float:
    raw = environ.get("OTEL_EXPORTER_OTLP_TIMEOUT", "").strip()
    try:
        value = float(raw)
    except ValueError:
        return EXIT_SECONDS
    return value if 0 < value < 3600 else EXIT_SECONDS


def _endpoint(environ: Mapping[str, str]) -> str:
    """The first OTLP endpoint configured, without credentials, query or path; or a description."""
    for name in _ENDPOINTS:
        url = environ.get(name, "").strip()
        if url:
            parts = urlsplit(url)
            host = parts.hostname or ""
            host = f"[{host}]" if ":" in host else host
            try:
                port = f":{parts.port}" if parts.port else ""
            except ValueError:
                port = ""
            return f"{parts.scheme}://{host}{port}" if parts.scheme and host else "the OTLP endpoint"
    return "the OTLP endpoint"


class _Collect(logging.Filter):
    """Keeps the OpenTelemetry records logged during the exit from the handlers, remembering them."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.records.append(record)
        return False


class BoundedExit:
    """Shuts ``providers`` down when :meth:`run` is called, each on its own parked thread (started beforehand:
    Python 3.12 starts no thread during exit), waiting at most ``seconds`` for all of them."""

    def __init__(self, providers: Sequence[object], seconds: float, endpoint: str) -> None:
        self.shutdowns: list[Callable[[], object]] = [
            shutdown for p in providers if callable(shutdown := getattr(p, "shutdown", None))
        ]
        self.seconds = seconds
        self.endpoint = endpoint
        self._errors: list[BaseException] = []
        self._go = threading.Event()
        self._done: list[threading.Event] = []
        self._start()
        os.register_at_fork(after_in_child=self._start)  # a forked child has no copy of the threads

    def _start(self) -> None:
        self._go = threading.Event()
        self._done = [threading.Event() for _ in self.shutdowns]
        for shutdown, done in zip(self.shutdowns, self._done, strict=True):
            threading.Thread(target=self._park, args=(shutdown, done), name="llmtap-exit", daemon=True).start()

    def _park(self, shutdown: Callable[[], object], done: threading.Event) -> None:
        self._go.wait()
        try:
            shutdown()
        except Exception as exc:  # a provider's failure at exit is reported in the one line
            self._errors.append(exc)
        finally:
            done.set()

    def run(self) -> None:
        """The exit handler: flush and shut down, at most :attr:`seconds`, then one line if anything failed."""
        collect = _Collect()
        for name in list(logging.Logger.manager.loggerDict):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                logging.getLogger(name).addFilter(collect)  # left on: a late line of a daemon thread stays quiet
        started = time.monotonic()
        deadline = started + self.seconds
        self._go.set()
        for done in self._done:
            done.wait(max(0.0, deadline - time.monotonic()))
        waited = time.monotonic() - started
        finished = all(done.is_set() for done in self._done)
        if finished and not collect.records and not self._errors:
            return
        cause = self._cause(collect.records)
        if finished:
            logger.warning("llmtap run: the last spans and metrics were not delivered to %s (%s)", self.endpoint, cause)
        else:
            logger.warning(
                "llmtap run: the last spans and metrics were not delivered to %s (%s); the program exits after "
                "waiting %.1f s for them (OTEL_EXPORTER_OTLP_TIMEOUT sets the wait)",
                self.endpoint,
                cause,
                waited,
            )

    def _cause(self, records: Sequence[logging.LogRecord]) -> str:
        for record in records:
            try:
                text = record.getMessage()
            except Exception:  # a record whose arguments do not format: look at the next one
                continue
            found = _ERRNO.search(text)
            if found:
                return found.group(0).strip()
        if self._errors:
            return type(self._errors[0]).__name__
        return "no answer in time" if not records else "export failed"


def install(environ: Mapping[str, str] = os.environ) -> BoundedExit | None:
    """Replace the global SDK providers' exit handlers with one bounded :class:`BoundedExit` (``None`` when
    no SDK provider is set: nothing is flushed at exit then)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    providers: list[TracerProvider | MeterProvider] = []
    tracer_provider = trace.get_tracer_provider()
    if isinstance(tracer_provider, TracerProvider):
        providers.append(tracer_provider)
    meter_provider = metrics.get_meter_provider()
    if isinstance(meter_provider, MeterProvider):
        providers.append(meter_provider)
    if not providers:
        return None
    for provider in providers:
        atexit.unregister(provider.shutdown)
    bounded = BoundedExit(providers, _seconds(environ), _endpoint(environ))
    atexit.register(bounded.run)
    return bounded
