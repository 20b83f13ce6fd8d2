"""The OpenTelemetry instrumentor: ``opentelemetry-instrument`` (and ``llmtap run``) find it by its
``opentelemetry_instrumentor`` entry point. A thin adapter onto :mod:`llmtap._lifecycle`; imported only
when used (``llmtap.LlmtapInstrumentor`` is loaded lazily), since OpenTelemetry's instrumentation
machinery costs about 1.6 MiB of modules."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from llmtap import _installation, _lifecycle
from llmtap._log import logger
from llmtap._run_exit import RUN_ENV

__all__ = ["LlmtapInstrumentor"]


def _exports(environ: Mapping[str, str]) -> bool:
    """Whether the OpenTelemetry SDK exports anything (``llmtap run`` sets ``none`` when it has nowhere to)."""
    return any(
        environ.get(name, "none").strip().lower() not in ("", "none")
        for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER")
    )


class LlmtapInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments httpx and httpx2 clients (and links the official SDKs' retries).

    ``instrument()`` accepts the keyword arguments of :func:`llmtap.instrument` (``settings``,
    ``registry``, ``tracer_provider``, ``meter_provider``, ``patch``); with none, settings come from
    ``LLMTAP_*`` environment variables and the global providers are used. All or nothing, like
    :func:`llmtap.instrument`.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        # httpx and httpx2 are each optional: whichever is installed is patched.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        if os.environ.get(RUN_ENV) == "1" and _exports(os.environ):
            from llmtap import _run_exit

            _run_exit.install()  # the exit waits a bounded time for an OTLP endpoint, said in one line
        if _installation.current is not None:
            logger.warning("already instrumented by llmtap.instrument(); the instrumentor leaves it as it is")
            return
        try:
            _lifecycle.activate(
                kwargs.get("settings"),
                registry=kwargs.get("registry"),
                tracer_provider=kwargs.get("tracer_provider"),
                meter_provider=kwargs.get("meter_provider"),
                patch=kwargs.get("patch", True),
                extra_sinks=kwargs.get("extra_sinks"),
            )
        except OSError as exc:
            if os.environ.get(RUN_ENV) != "1":
                raise
            # `llmtap run` checked the port before the program started; a process of the program lost it
            # since (a worker beside another program, or without multiprocess mode): one line, not the two
            # tracebacks of opentelemetry's loader, and the process runs without llmtap (all or nothing)
            logger.error("%s; process %d runs without llmtap", exc.strerror or exc, os.getpid())

    def _uninstrument(self, **kwargs: Any) -> None:
        _lifecycle.deactivate()
