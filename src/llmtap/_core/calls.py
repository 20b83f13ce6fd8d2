"""Logical SDK calls: one ``client.messages.create(...)`` with all its retries.

The official SDKs retry inside one ``request()`` method. A guarded wrapper around that method
(see ``_hooks/sdk_calls.py``) opens a :class:`Call` in a context variable; every attempt sent while it is
current joins it. The call ends when ``request()`` has returned (or raised) *and* its last attempt
has ended, which for a stream is when the stream ends: whichever of :meth:`Call.attempt_ended` and
:meth:`Call.request_returned` sees that moment returns the :class:`~llmtap.CallRecord`. Raw httpx
users have no such method: each attempt is then its own call (:func:`call_record` of one attempt).
"""

from __future__ import annotations

import contextvars
import itertools
import os
import threading

from llmtap._core.record import AttemptRecord, CallRecord, Outcome
from llmtap._providers._base import RequestInfo

__all__ = ["CURRENT_CALL", "Call", "call_record", "retry_reason"]

CURRENT_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("llmtap_call", default=None)
_new = tuple.__new__  # a named tuple with every field given, without its Python-level __new__

# Call ids: a random prefix per process, drawn again in a forked child (gunicorn forks its workers
# after the app, and llmtap, are imported), then a counter: unique across workers, hosts and restarts.
_ids = itertools.count(1)
_prefix = f"{os.urandom(4).hex()}-"


def _new_process() -> None:
    global _ids, _prefix
    _ids = itertools.count(1)
    _prefix = f"{os.urandom(4).hex()}-"


os.register_at_fork(after_in_child=_new_process)


def call_record(
    call_id: str, attempts: int, started_at: float, last: AttemptRecord, cancelled_at: float | None = None
) -> CallRecord:
    """The record of a call whose last attempt was ``last``: the one place a CallRecord is built.
    ``cancelled_at``: the app cancelled the call then, after ``last`` had ended (between two attempts)."""
    return _new(  # every field, in field order (without the named tuple's Python-level __new__)
        CallRecord,
        (
            call_id,
            last.provider,
            last.operation,
            last.request_model,
            attempts,
            last.outcome if cancelled_at is None else Outcome.CANCELLED,
            started_at,
            last.ended_at if cancelled_at is None else cancelled_at,
            last.first_token_at,
            last.span_context,
            last.attribute_labels,
        ),
    )


def retry_reason(record: AttemptRecord) -> str:
    """What an attempt failed with, as the ``reason`` label of the retry it causes."""
    if record.status_code is not None and not 200 <= record.status_code < 300:
        return str(record.status_code)
    if record.outcome is Outcome.COMPLETED:
        return "none"
    return record.outcome.value


class Call:
    """Book-keeping for one logical call. Attempts of one call are sequential."""

    __slots__ = (
        "_ended",
        "_first_started_at",
        "_in_flight",
        "_last",
        "_lock",
        "_returned",
        "attempts",
        "call_id",
        "info",
        "sdk",
    )

    def __init__(self, info: RequestInfo | None, sdk: str | None = None) -> None:
        self.call_id = f"{_prefix}{next(_ids)}"
        self.info = info
        """What the SDK's request options say (model, stream, max tokens); ``None`` when they had no JSON."""
        self.sdk = sdk
        """The provider name of the official SDK making the call (its requests are LLM requests on any host)."""
        self.attempts = 0
        self._in_flight = 0
        self._returned = False
        self._ended = False
        self._first_started_at = 0.0
        self._last: AttemptRecord | None = None
        self._lock = threading.Lock()

    def attempt_started(self, started_at: float) -> str | None:
        """Register an attempt; returns what the previous attempt failed with (the retry reason)."""
        with self._lock:
            self.attempts += 1
            self._in_flight += 1
            if self.attempts == 1:
                self._first_started_at = started_at
                return None
            return None if self._last is None else retry_reason(self._last)

    def attempt_ended(self, record: AttemptRecord) -> CallRecord | None:
        """An attempt of this call ended; the call's record if that ended the call."""
        with self._lock:
            self._in_flight -= 1
            self._last = record
            # an SDK reads a plain body before its request() returns: nothing more to do then
            return self._end_if_done() if self._returned else None

    def request_returned(self, cancelled_at: float | None = None) -> CallRecord | None:
        """The SDK's ``request()`` returned or raised; the call's record if that ended the call.

        ``cancelled_at``: it raised the app's cancellation (``CancelledError``, ``KeyboardInterrupt``) then.
        Cancelled while an attempt was in flight, that attempt ended ``cancelled`` and the call with it; cancelled
        between two attempts (in the SDK's back-off before a retry), the call is ``cancelled`` at that moment,
        not what its last attempt ended with: the app gave up before the SDK was done."""
        with self._lock:
            self._returned = True
            return self._end_if_done(cancelled_at)

    def _end_if_done(self, cancelled_at: float | None = None) -> CallRecord | None:
        last = self._last
        if self._ended or not self._returned or self._in_flight or last is None:
            return None
        self._ended = True
        if last.outcome is Outcome.CANCELLED:
            cancelled_at = None  # cancelled during its last attempt: the call ends with that attempt
        return call_record(self.call_id, self.attempts, self._first_started_at, last, cancelled_at)
