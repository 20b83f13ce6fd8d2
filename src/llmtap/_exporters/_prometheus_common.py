"""What the Prometheus exporter's two stores share: how an instrument is exposed (:class:`Family`), what an
end hands over (:data:`Ended`), what an ended record writes (:func:`measure`) and an exemplar's labels
(:func:`exemplar_of`). The single-process store (``prometheus.py``'s ``_Folded``) and the multiprocess one
(``_prometheus_multiprocess.py``) both import them from here, so neither reaches into the other."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from prometheus_client.utils import floatToGoString

from llmtap._core.mapping import Mapping, Measurement, base_key
from llmtap._core.metrics import Instrument

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from llmtap._core.record import AttemptRecord, CallRecord

__all__ = ["Ended", "Family", "exemplar_of", "measure"]


def exemplar_of(context: SpanContext) -> dict[str, str]:
    """The OpenMetrics exemplar labels of a span: ``trace_id`` and ``span_id`` in W3C hex, the names
    Grafana links to a trace by."""
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


Ended = tuple["AttemptRecord | CallRecord", "bool | None", float]
"""What an end hands over: the record, whether its start counted a stream in flight (``None``: a call's
record) and the wall-clock time it ended (an exemplar's timestamp)."""


def measure(
    mapping: Mapping, ended: Ended
) -> tuple[tuple[str, ...], list[Measurement], SpanContext | None, AttemptRecord | None]:
    """What an ended record writes, for both stores: its base label set, its measurements, its span (for
    exemplars) and itself again when it has rate limits (converted when they are read)."""
    record, in_flight, _ = ended
    if in_flight is None:
        call = cast("CallRecord", record)
        return base_key(call), mapping.call_end(call), call.span_context, None
    attempt = cast("AttemptRecord", record)
    limits = attempt if mapping.rate_limited and attempt.rate_limit_headers else None
    return base_key(attempt), mapping.end(attempt, in_flight), attempt.span_context, limits


class Family:
    """How one instrument is exposed: family name (namespaced, without ``_total``, as prometheus-client
    takes it), label names, bucket bounds and their ``le`` strings."""

    __slots__ = ("bounds", "exemplar", "kind", "labels", "les", "name", "spec")

    def __init__(self, spec: Instrument, namespace: str, extra_labels: tuple[str, ...]) -> None:
        self.spec = spec
        self.kind = spec.kind
        self.name = spec.prometheus().removesuffix("_total")
        if namespace and not spec.semconv:
            self.name = f"{namespace}_{self.name}"
        self.labels = spec.labels_with(extra_labels)
        self.bounds = spec.buckets
        self.les = (*(floatToGoString(b) for b in spec.buckets), "+Inf")  # type: ignore[no-untyped-call]
        self.exemplar = spec.exemplar
