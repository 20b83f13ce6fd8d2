"""What the tap hands records to: the interfaces every exporter implements (:class:`Sink`, and
:class:`SpanSink` for the span exporter, whose span is current while the request is sent). They live in
the core, beside the tap that calls them (``Tap(sinks=, spans=)``); the exporters implement them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord

__all__ = ["Sink", "SpanSink"]


class Sink(Protocol):
    """Receives attempts and calls, and keeps whatever per-attempt state it needs itself.

    Data only walks down: a sink gets immutable values (:class:`~llmtap.AttemptStart`,
    :class:`~llmtap.AttemptRecord`, :class:`~llmtap.CallRecord`), never the observer. Every method is
    called inside a guard: an exception is logged once and never reaches the user's request.
    """

    name: str

    def start(self, attempt: AttemptStart) -> object:
        """An attempt is about to be sent; the return value comes back in :meth:`end`."""
        ...

    def end(self, record: AttemptRecord, state: object) -> None:
        """The attempt ended (exactly once)."""
        ...

    def call_end(self, record: CallRecord) -> None:
        """A logical call (all its attempts) ended."""
        ...

    def close(self) -> None:
        """The tap is being closed (``uninstrument()``): release what the sink holds (registered
        metrics, callbacks, per-call state). Called once, after the last record."""
        ...


class SpanSink(Sink, Protocol):
    """A sink in the span exporter's role: what :meth:`start` returns is the attempt's span (``None``
    when it has none), made current while the request is sent; its span context (when sampled) lends the
    records their exemplars."""

    def attach(self, state: object) -> object:
        """Make the span :meth:`start` returned current; returns the context token to detach."""
        ...
