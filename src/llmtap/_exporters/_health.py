"""llmtap's own health as metrics: internal failures and label overflows, read at collection time.

The counts live in ``llmtap._log`` (plain ints under a lock, process-wide); these adapters read them
only when Prometheus scrapes or the OpenTelemetry reader collects, so the request path pays nothing. The
Prometheus one is in ``_health_prometheus.py``, so that the OpenTelemetry path does not import
prometheus-client (about 1 MiB of modules).

- ``llmtap_internal_errors_total{where}``: llmtap's own failures (a sink raised, a parser bug ...),
  ``where`` one of :data:`llmtap._log.INTERNAL_WHERE`. Non-zero means llmtap is degraded.
- ``llmtap_label_overflows_total{label}``: label values replaced by the overflow value
  (``label`` in ``request_model``, ``response_model``, ``stop_reason``, ``error_type``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmtap._log import INTERNAL_WHERE, internal_errors, label_overflows

__all__ = ["HEALTH_METRIC_NAMES", "INTERNAL_HELP", "LABELS", "OVERFLOW_HELP", "register_otel"]

HEALTH_METRIC_NAMES: tuple[str, ...] = ("llmtap_internal_errors_total", "llmtap_label_overflows_total")
LABELS: tuple[str, ...] = ("request_model", "response_model", "stop_reason", "error_type", "server", "attribute")
INTERNAL_HELP = "llmtap's own failures (the request is never affected), by where they happened."
OVERFLOW_HELP = "Label values from the wire replaced by the overflow value, by label."


def register_otel(meter: Any, namespace: str = "") -> None:
    """Observable counters ``llmtap.internal_errors`` and ``llmtap.label_overflows`` on ``meter``
    (prefixed with ``namespace.`` when given, like the other ``llmtap.*`` instruments)."""
    from opentelemetry.metrics import CallbackOptions, Observation

    def errors(options: CallbackOptions) -> Iterable[Observation]:
        counts = internal_errors()
        return [Observation(counts[where], {"where": where}) for where in INTERNAL_WHERE]

    def overflows(options: CallbackOptions) -> Iterable[Observation]:
        counts = label_overflows()
        return [Observation(counts.get(label, 0), {"label": label}) for label in LABELS]

    prefix = f"{namespace}." if namespace else ""
    meter.create_observable_counter(
        f"{prefix}llmtap.internal_errors", [errors], unit="{error}", description=INTERNAL_HELP
    )
    meter.create_observable_counter(
        f"{prefix}llmtap.label_overflows", [overflows], unit="{value}", description=OVERFLOW_HELP
    )
