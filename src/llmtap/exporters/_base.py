"""The sink interface every exporter implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from llmtap._observer import AttemptObserver
    from llmtap._record import AttemptRecord, CallRecord

__all__ = ["Sink"]


class Sink(Protocol):
    """Receives attempts and calls. Every method is called inside a guard: an exception is logged
    once and never reaches the user's request."""

    name: str

    def start(self, attempt: AttemptObserver) -> object:
        """An attempt is about to be sent; the return value comes back in :meth:`end`."""
        ...

    def end(self, record: AttemptRecord, state: object) -> None:
        """The attempt ended (exactly once)."""
        ...

    def call_end(self, record: CallRecord) -> None:
        """A logical call (all its attempts) ended."""
        ...
