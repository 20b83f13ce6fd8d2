"""The tracing exporter as a unit: hand-built records in, the spans it ends read from the SDK's in-memory
exporter (no tap, no wire)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmtap._core.record import AttemptRecord, AttemptStart
from llmtap._exporters.tracing import TracingExporter
from tests.support.records import attempt_record

__all__ = ["T0", "Spans"]

T0 = 1_700_000_000_000_000_000
"""The attempt's start, Unix ns."""


class Spans:
    """A :class:`TracingExporter` (``slim``: ``Settings.slim_spans``) on its own provider, whose ended spans an
    in-memory exporter keeps; shut :attr:`provider` down after use."""

    def __init__(self, slim: bool = False) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.exporter = TracingExporter(self.provider, slim=slim)

    def attempt(self, **fields: Any) -> AttemptRecord:
        """One attempt through the exporter (start, then end), as the tap drives every sink."""
        record = attempt_record(start_unix_ns=T0, **fields)
        start = AttemptStart(**{name: getattr(record, name) for name in AttemptStart._fields})
        self.exporter.end(record, self.exporter.start(start))
        return record

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.memory.get_finished_spans()
