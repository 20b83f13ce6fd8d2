"""The OpenTelemetry instrumentor (``opentelemetry-instrument`` finds it by its entry point) and the
one-call API built on it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from llmtap import _patch, _tap
from llmtap._log import logger
from llmtap._settings import Settings
from llmtap._tap import Tap

__all__ = ["LlmtapInstrumentor", "instrument", "uninstrument"]


class LlmtapInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments httpx and httpx2 clients (and links the official SDKs' retries).

    ``instrument()`` accepts ``settings``, ``registry``, ``tracer_provider``, ``meter_provider`` and
    ``patch`` keyword arguments; with none, settings come from ``LLMTAP_*`` environment variables
    and the global providers are used.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        # httpx and httpx2 are each optional: whichever is installed is patched.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        settings = kwargs.get("settings") or Settings.from_env()
        tap = Tap(
            settings,
            registry=kwargs.get("registry"),
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            sinks=kwargs.get("extra_sinks"),
        )
        _tap.activate(tap)
        if kwargs.get("patch", True):
            patched = _patch.patch(sdk_calls=settings.sdk_calls)
            logger.debug("llmtap: instrumented %s", ", ".join(patched) or "nothing")
        port = settings_port(settings)
        if port is not None and tap.prometheus is not None:
            from prometheus_client import start_http_server

            start_http_server(port, addr="127.0.0.1", registry=tap.prometheus.registry)

    def _uninstrument(self, **kwargs: Any) -> None:
        tap = _tap.active()
        _tap.activate(None)
        _patch.unpatch()
        if tap is not None:
            tap.close()


def settings_port(settings: Settings) -> int | None:
    import os

    raw = os.environ.get("LLMTAP_METRICS_PORT")
    if raw and settings.metrics:
        return int(raw)
    return None


def instrument(
    settings: Settings | None = None,
    *,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    patch: bool = True,
) -> Tap:
    """Start observing LLM API traffic. Idempotent: a second call returns the active :class:`Tap`.

    Args:
        settings: what to observe and export; default :meth:`Settings.from_env`.
        registry: Prometheus registry for the metrics (default: the global ``REGISTRY``).
        tracer_provider: for the attempt spans (default: the global tracer provider).
        meter_provider: for the OpenTelemetry GenAI metrics (default: the global meter provider).
        patch: patch the httpx/httpx2 clients; ``False`` only activates the tap for
            :func:`wrap_transport`.

    Returns:
        The active tap.
    """
    instrumentor = LlmtapInstrumentor()
    active = _tap.active()
    if instrumentor.is_instrumented_by_opentelemetry and active is not None:
        return active
    instrumentor.instrument(
        settings=settings,
        registry=registry,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        patch=patch,
    )
    active = _tap.active()
    if active is None:  # pragma: no cover - _instrument sets it or raises
        raise RuntimeError("llmtap: instrument() did not activate a tap")
    return active


def uninstrument() -> None:
    """Stop observing, restore the patched methods and unregister the metrics. Idempotent."""
    LlmtapInstrumentor().uninstrument()
