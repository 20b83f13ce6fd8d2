"""The sink interface every exporter implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord

__all__ = ["Sink"]


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
