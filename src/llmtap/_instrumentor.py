"""The OpenTelemetry instrumentor (``opentelemetry-instrument`` finds it by its entry point) and the
one-call API built on it."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from llmtap import _patch, _tap
from llmtap._log import logger
from llmtap._settings import Settings
from llmtap._tap import Tap

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from llmtap._serve import MetricsServer

__all__ = ["LlmtapInstrumentor", "instrument", "uninstrument"]


class LlmtapInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments httpx and httpx2 clients (and links the official SDKs' retries).

    ``instrument()`` accepts ``settings``, ``registry``, ``tracer_provider``, ``meter_provider`` and
    ``patch`` keyword arguments; with none, settings come from ``LLMTAP_*`` environment variables
    and the global providers are used. All or nothing: when a step fails (the metrics' names are
    taken in the registry, the ``/metrics`` port cannot be bound, patching fails), what the earlier
    steps did is undone before the error propagates.
    """

    metrics_address: tuple[str, int] | None = None
    """``(address, port)`` of the ``/metrics`` server llmtap started (``Settings.metrics_port``), if any."""
    _server: MetricsServer | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        # httpx and httpx2 are each optional: whichever is installed is patched.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        settings = kwargs.get("settings") or Settings.from_env()
        # registers the metrics (all or none of them)
        tap = Tap(
            settings,
            registry=kwargs.get("registry"),
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            sinks=kwargs.get("extra_sinks"),
        )
        server: MetricsServer | None = None
        try:
            if settings.metrics_port is not None and tap.prometheus is not None:
                from llmtap._serve import MetricsServer

                server = MetricsServer.start(settings.metrics_addr, settings.metrics_port, tap.prometheus.registry)
            if kwargs.get("patch", True):
                try:
                    patched = _patch.patch(sdk_calls=settings.sdk_calls)
                except Exception as exc:
                    exc.add_note("llmtap.instrument(): patching the HTTP clients failed; nothing stays patched")
                    raise
                logger.debug("llmtap: instrumented %s", ", ".join(patched) or "nothing")
        except BaseException:
            _patch.unpatch()
            if server is not None:
                server.stop()
            tap.close()
            raise
        _tap.activate(tap)
        cls = LlmtapInstrumentor
        cls._server = server
        cls.metrics_address = None if server is None else server.address

    def _uninstrument(self, **kwargs: Any) -> None:
        tap = _tap.active()
        _tap.activate(None)
        _patch.unpatch()
        cls = LlmtapInstrumentor
        server = cls._server
        cls._server = cls.metrics_address = None
        if server is not None:
            server.stop()
        if tap is not None:
            tap.close()


def instrument(
    settings: Settings | None = None,
    *,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    patch: bool = True,
) -> Tap:
    """Start observing LLM API traffic; all or nothing.

    Calling it again while instrumented returns the active :class:`Tap` when ``settings`` is
    ``None`` or equal to the active settings (and ``registry`` is ``None`` or the active one); other
    settings raise instead of being silently ignored: call :func:`uninstrument` first.

    Args:
        settings: what to observe and export; default :meth:`Settings.from_env`.
        registry: Prometheus registry for the metrics (default: the global ``REGISTRY``).
        tracer_provider: for the attempt spans (default: the global tracer provider).
        meter_provider: for the OpenTelemetry GenAI metrics (default: the global meter provider).
        patch: patch the httpx/httpx2 clients; ``False`` only activates the tap for
            :func:`wrap_transport`.

    Returns:
        The active tap.

    Raises:
        ValueError: invalid ``LLMTAP_*`` environment values, or the metric names are already
            registered in ``registry``.
        OSError: ``Settings.metrics_port`` cannot be bound.
        RuntimeError: llmtap is already instrumented with different settings or registry.

    When it raises, nothing stays patched, registered or bound.
    """
    instrumentor = LlmtapInstrumentor()
    active = _tap.active()
    if instrumentor.is_instrumented_by_opentelemetry and active is not None:
        _check_same(active, settings, registry)
        return active
    instrumentor.instrument(
        settings=settings,
        registry=registry,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        patch=patch,
    )
    tap = _tap.active()
    if tap is None:  # BaseInstrumentor declined (it logs why)
        raise RuntimeError("llmtap.instrument(): the OpenTelemetry instrumentor did not run")
    return tap


def _check_same(active: Tap, settings: Settings | None, registry: CollectorRegistry | None) -> None:
    if settings is not None and settings != active.settings:
        differ = sorted(
            name for name in Settings.model_fields if getattr(settings, name) != getattr(active.settings, name)
        )
        raise RuntimeError(
            "llmtap is already instrumented with other settings (differing: "
            f"{', '.join(differ)}); call llmtap.uninstrument() before instrumenting again"
        )
    prometheus = active.prometheus
    if registry is not None and prometheus is not None and registry is not prometheus.registry:
        raise RuntimeError(
            "llmtap is already instrumented with another Prometheus registry; "
            "call llmtap.uninstrument() before instrumenting again"
        )


def uninstrument() -> None:
    """Stop observing: restore the patched methods, unregister the metrics, stop the ``/metrics``
    server. Idempotent."""
    LlmtapInstrumentor().uninstrument()
