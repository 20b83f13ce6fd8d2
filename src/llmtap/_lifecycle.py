"""Turning llmtap on and off, all or nothing: :func:`instrument` / :func:`uninstrument`.

Nothing here imports OpenTelemetry's instrumentation machinery (about 1.6 MiB of modules): the
:class:`~llmtap.LlmtapInstrumentor` that ``opentelemetry-instrument`` loads by its entry point is a
thin adapter onto :func:`activate` and :func:`deactivate`, imported only when it is used.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

from llmtap import _exporters, _installation
from llmtap._core import handoff as _handoff
from llmtap._core.bytecode import python_checked
from llmtap._core.tap import Tap
from llmtap._hooks.patches import Patches
from llmtap._installation import Installation
from llmtap._log import logger
from llmtap._settings import Settings

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from llmtap._core.sinks import Sink
    from llmtap._exporters.serve import MetricsServer

__all__ = ["activate", "deactivate", "instrument", "uninstrument"]


def activate(
    settings: Settings | None = None,
    *,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    patch: bool = True,
    extra_sinks: list[Sink] | None = None,
) -> Tap:
    """Build the exporters and the tap, serve ``/metrics`` if asked, patch, then make it the installation
    in effect; when a step fails, what the earlier steps did is undone before the error propagates (the
    metrics' names are taken in the registry, the port cannot be bound, patching fails)."""
    settings = settings or Settings.from_env()
    python_checked()
    exporters = _exporters.build(  # registers the metrics (all or none of them)
        settings,
        registry=registry,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        drain=_handoff.drain,  # each scrape and collection first ends what the garbage collector handed off
    )
    try:
        tap = Tap(settings, (*exporters.sinks, *(extra_sinks or ())), spans=exporters.spans)
    except BaseException:  # no price table for Settings.cost: nothing stays registered
        with contextlib.suppress(Exception):
            exporters.close()
        raise
    server: MetricsServer | None = None
    patches: Patches | None = None
    try:
        if settings.metrics_port is not None and exporters.prometheus is not None:
            from llmtap._exporters.serve import MetricsServer

            server = MetricsServer.start(settings.metrics_addr, settings.metrics_port, exporters.prometheus.registry)
            tap.metrics_address = None if server is None else server.address
        if patch:
            patches = Patches(sdk_calls=settings.sdk_calls)
            try:
                patches.apply()
            except Exception as exc:
                exc.add_note("llmtap.instrument(): patching the HTTP clients failed; nothing stays patched")
                raise
            logger.debug("instrumented %s", ", ".join(patches.packages) or "nothing")
    except BaseException:
        with contextlib.suppress(Exception):  # the error that stopped the build is the one to see
            Installation(tap, server, patches).close()
        raise
    registry = None if exporters.prometheus is None else exporters.prometheus.registry
    _installation.current = Installation(tap, server, patches, registry)
    if patches is not None:
        patches.catch_up()
    return tap


def deactivate() -> None:
    """Undo :func:`activate`: no tap active, nothing patched, the metrics unregistered, the server stopped."""
    installation, _installation.current = _installation.current, None
    if installation is not None:
        installation.close()


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
    installation = _installation.current
    if installation is not None:
        _check_same(installation, settings, registry)
        return installation.tap
    return activate(
        settings, registry=registry, tracer_provider=tracer_provider, meter_provider=meter_provider, patch=patch
    )


def _check_same(active: Installation, settings: Settings | None, registry: CollectorRegistry | None) -> None:
    if settings is not None and settings != active.tap.settings:
        differ = sorted(
            name for name in Settings.model_fields if getattr(settings, name) != getattr(active.tap.settings, name)
        )
        raise RuntimeError(
            "llmtap is already instrumented with other settings (differing: "
            f"{', '.join(differ)}); call llmtap.uninstrument() before instrumenting again"
        )
    if registry is not None and active.registry is not None and registry is not active.registry:
        raise RuntimeError(
            "llmtap is already instrumented with another Prometheus registry; "
            "call llmtap.uninstrument() before instrumenting again"
        )


def uninstrument() -> None:
    """Stop observing: restore the patched methods, unregister the metrics, stop the ``/metrics``
    server. Idempotent."""
    module = sys.modules.get("llmtap._instrumentor")
    if module is not None and module.LlmtapInstrumentor().is_instrumented_by_opentelemetry:
        module.LlmtapInstrumentor().uninstrument()  # clears its own flag too; calls deactivate()
    else:
        deactivate()
