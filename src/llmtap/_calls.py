"""Logical SDK calls: one ``client.messages.create(...)`` with all its retries.

The official SDKs retry inside one ``request()`` method. A guarded wrapper around that method
(see ``_patch.py``) opens a :class:`Call` in a context variable; every attempt sent while it is
current joins it. The call ends when ``request()`` has returned (or raised) *and* its last attempt
has ended, which for a stream is when the stream ends. Raw httpx users have no such method: each
attempt is then its own call.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

from llmtap._record import AttemptRecord, CallRecord, Outcome
from llmtap.providers._base import RequestInfo

__all__ = ["CURRENT_CALL", "Call"]

CURRENT_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("llmtap_call", default=None)

_ids = itertools.count(1)
_prefix = f"{os.getpid():x}-"


def request_info_from_options(options: Any) -> RequestInfo | None:
    """Model, stream flag and max_tokens from the SDK's ``FinalRequestOptions.json_data``."""
    data = getattr(options, "json_data", None)
    if not isinstance(data, dict):
        return None
    model = data.get("model")
    stream = data.get("stream")
    max_tokens = data.get("max_tokens", data.get("max_completion_tokens", data.get("max_output_tokens")))
    return RequestInfo(
        model=model if isinstance(model, str) else None,
        stream=stream if isinstance(stream, bool) else None,
        max_tokens=max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
    )


class Call:
    """Book-keeping for one logical call. Attempts of one call are sequential."""

    __slots__ = (
        "_lock",
        "_on_end",
        "attempts",
        "call_id",
        "ended",
        "first_started_at",
        "in_flight",
        "info",
        "last_reason",
        "last_record",
        "last_span_context",
        "returned",
    )

    def __init__(self, info: RequestInfo | None, on_end: Callable[[Call], None]) -> None:
        self.call_id = f"{_prefix}{next(_ids)}"
        self.info = info
        self.attempts = 0
        self.in_flight = 0
        self.returned = False
        self.ended = False
        self.first_started_at: float | None = None
        self.last_record: AttemptRecord | None = None
        self.last_reason: str | None = None
        self.last_span_context: Any = None
        self._on_end = on_end
        self._lock = threading.Lock()

    def attempt_started(self, started_at: float) -> str | None:
        """Register an attempt; returns what the previous attempt failed with (the retry reason)."""
        with self._lock:
            self.attempts += 1
            self.in_flight += 1
            if self.first_started_at is None:
                self.first_started_at = started_at
            return self.last_reason if self.attempts > 1 else None

    def attempt_ended(self, record: AttemptRecord) -> None:
        with self._lock:
            self.in_flight -= 1
            self.last_record = record
            self.last_reason = retry_reason(record)
            done = self.returned and self.in_flight == 0 and not self.ended
            if done:
                self.ended = True
        if done:
            self._on_end(self)

    def request_returned(self) -> None:
        with self._lock:
            self.returned = True
            done = self.in_flight == 0 and not self.ended and self.attempts > 0
            if done:
                self.ended = True
        if done:
            self._on_end(self)

    def to_record(self) -> CallRecord | None:
        last = self.last_record
        if last is None or self.first_started_at is None:
            return None
        return CallRecord(
            call_id=self.call_id,
            provider=last.provider,
            operation=last.operation,
            request_model=last.request_model,
            attempts=self.attempts,
            outcome=last.outcome,
            started_at=self.first_started_at,
            ended_at=last.ended_at,
            first_token_at=last.first_token_at,
        )


def retry_reason(record: AttemptRecord) -> str:
    """What an attempt failed with, as the ``reason`` label of the retry it causes."""
    if record.status_code is not None and not 200 <= record.status_code < 300:
        return str(record.status_code)
    if record.outcome is Outcome.COMPLETED:
        return "none"
    return record.outcome.value
