"""llmtap's own health counters (:mod:`llmtap._exporters._health`) as a prometheus-client collector."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from llmtap._exporters._health import INTERNAL_HELP, LABELS, OVERFLOW_HELP
from llmtap._log import internal_errors, label_overflows

__all__ = ["HealthCollector"]


class HealthCollector(Collector):
    """A prometheus-client collector for the counts in ``llmtap._log``; every ``where`` and ``label``
    series exists from the start (at 0), so ``increase()`` sees the first failure."""

    def __init__(self, namespace: str = "") -> None:
        self._prefix = f"{namespace}_" if namespace else ""

    def collect(self) -> Iterator[CounterMetricFamily]:
        errors = CounterMetricFamily(f"{self._prefix}llmtap_internal_errors", INTERNAL_HELP, labels=("where",))
        for where, count in internal_errors().items():
            errors.add_metric((where,), count)
        yield errors
        overflows = CounterMetricFamily(f"{self._prefix}llmtap_label_overflows", OVERFLOW_HELP, labels=("label",))
        counts = label_overflows()
        for label in LABELS:
            overflows.add_metric((label,), counts.get(label, 0))
        yield overflows

    def register(self, registry: CollectorRegistry) -> HealthCollector:
        registry.register(self)
        return self
