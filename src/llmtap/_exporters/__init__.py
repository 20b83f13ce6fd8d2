"""Exporters (sinks): fed finished attempt and call records, knowing nothing of providers.

:func:`build` is the one place the settings become exporters; :class:`~llmtap.Tap` only receives them.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, NamedTuple

from llmtap._core.metrics import switched_off
from llmtap._core.sinks import Sink
from llmtap._log import log_once

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from llmtap._exporters.prometheus import PrometheusExporter
    from llmtap._exporters.tracing import TracingExporter
    from llmtap._settings import Settings

__all__ = ["Exporters", "Sink", "build"]


class Exporters(NamedTuple):
    """What :func:`build` made: the metric sinks, and the span exporter in its own role (its span is made
    current while the request is sent, and lends exemplars their trace id)."""

    sinks: tuple[Sink, ...]
    spans: TracingExporter | None
    prometheus: PrometheusExporter | None
    """Also in ``sinks``; named for the ``/metrics`` server, which serves its registry."""

    def close(self) -> None:
        """Close every exporter, each even if another fails (the first error propagates afterwards)."""
        error: BaseException | None = None
        for sink in (*self.sinks, *(() if self.spans is None else (self.spans,))):
            try:
                sink.close()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


def build(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    drain: Callable[[], None] | None = None,
) -> Exporters:
    """The exporters ``settings`` turn on, all or nothing: when one cannot be built (its metric names are
    taken in ``registry`` ...), those built before it are closed (no metric stays registered, no callback
    bound) and the error propagates. Each exporter module is imported only when its exporter is on.

    Args:
        registry: for the Prometheus metrics (default: prometheus-client's global ``REGISTRY``).
        tracer_provider: for the attempt spans (default: the global tracer provider).
        meter_provider: for the OpenTelemetry metrics (default: the global meter provider).
        drain: what the metric exporters call before each scrape or collection (the hand-off's
            ``drain``, which ends the attempts the garbage collector handed off); ``None``: nothing.
    """
    # instruments whose Settings flag is off are never created
    exclude = (*settings.excluded_metrics, *sorted(switched_off(settings)))
    sinks: list[Sink] = []
    prometheus: PrometheusExporter | None = None
    spans: TracingExporter | None = None
    try:
        if settings.prometheus:
            from llmtap._exporters.prometheus import PrometheusExporter

            prometheus = PrometheusExporter(
                registry,
                settings.metric_namespace,
                exclude=exclude,
                created_series=settings.prometheus_created_series,
                attribute_labels=settings.attribute_labels,
                drain=drain,
            )
            sinks.append(prometheus)
        if otel_metrics_on(settings, meter_provider):
            from llmtap._exporters.otel_metrics import OtelMetricsExporter

            sinks.append(
                OtelMetricsExporter(
                    meter_provider,
                    namespace=settings.metric_namespace,
                    exclude=exclude,
                    chunk_gaps=settings.otel_time_per_output_chunk,
                    attribute_labels=settings.attribute_labels,
                    drain=drain,
                )
            )
        if settings.traces:
            from llmtap._exporters.tracing import TracingExporter

            spans = TracingExporter(tracer_provider, detail=settings.span_detail, slim=settings.slim_spans)
    except BaseException:
        with contextlib.suppress(Exception):  # the error that stopped the build is the one to see
            Exporters(tuple(sinks), spans, prometheus).close()
        raise
    return Exporters(tuple(sinks), spans, prometheus)


def otel_metrics_on(settings: Settings, meter_provider: MeterProvider | None) -> bool:
    """Whether the OpenTelemetry metrics exporter is built: ``Settings.otel_metrics`` when it is ``True`` or
    ``False``; at ``"auto"`` (the default), only when there is a meter provider to record into (one given,
    or a global one set before ``instrument()``), so an app with no OpenTelemetry metrics pays nothing for
    them (the API's no-op provider would take every value and keep none)."""
    if settings.otel_metrics is False:
        return False
    if meter_provider is not None or settings.otel_metrics is True:
        return True
    from opentelemetry import metrics

    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":  # the API's stand-in until one is set
        return True
    log_once(
        "otel_metrics_off",
        "no OpenTelemetry meter provider is set, so llmtap records no OpenTelemetry metrics; set one "
        "before instrument(), pass meter_provider=, or set LLMTAP_OTEL_METRICS=true to record through one set later",
        level=logging.INFO,
    )
    return False
