"""``llmtap._core.calls``: a logical SDK call (one ``create(...)`` with its retries) ends exactly once, when the
SDK's ``request()`` has returned *and* its last attempt has ended, in whichever order those come."""

from __future__ import annotations

import os
import threading

import pytest

from llmtap._core.calls import Call, call_record, retry_reason
from llmtap._core.record import CallRecord, Outcome
from tests.support.records import attempt_record


def test_a_stream_call_ends_when_its_attempt_ends_after_request_returned() -> None:
    """A stream: ``request()`` returns at the headers, the attempt ends later, at the stream's end."""
    call = Call(None)
    call.attempt_started(0.5)
    assert call.request_returned() is None  # the stream is still open: not ended yet
    record = call.attempt_ended(attempt_record(started_at=0.5, ended_at=3.0, first_token_at=1.0))
    assert record is not None
    assert (record.call_id, record.attempts, record.outcome) == (call.call_id, 1, Outcome.COMPLETED)
    assert (record.started_at, record.ended_at, record.first_token_at) == (0.5, 3.0, 1.0)


def test_a_non_streaming_call_ends_when_request_returns_after_its_attempt() -> None:
    call = Call(None)
    call.attempt_started(0.0)
    assert call.attempt_ended(attempt_record()) is None  # the SDK may still retry: not ended yet
    record = call.request_returned()
    assert record is not None and record.attempts == 1


def test_retries_join_the_call_and_say_what_the_previous_attempt_failed_with() -> None:
    call = Call(None)
    assert call.attempt_started(1.0) is None  # the first attempt is no retry
    assert call.attempt_ended(attempt_record(outcome=Outcome.REJECTED, status_code=429, ended_at=1.2)) is None
    assert call.attempt_started(2.0) == "429"
    assert call.attempt_ended(attempt_record(outcome=Outcome.TIMEOUT, status_code=200, ended_at=2.5)) is None
    assert call.attempt_started(3.0) == "timeout"
    assert call.attempt_ended(attempt_record(started_at=3.0, ended_at=4.0)) is None
    record = call.request_returned()
    assert record is not None
    # timed from the first attempt's start to the last one's end; the last attempt's outcome is the call's
    assert (record.attempts, record.started_at, record.ended_at, record.outcome) == (3, 1.0, 4.0, Outcome.COMPLETED)


def test_a_call_ends_once() -> None:
    call = Call(None)
    call.attempt_started(0.0)
    call.attempt_ended(attempt_record())
    assert call.request_returned() is not None  # positive control: this ended it
    assert call.request_returned() is None
    assert call.attempt_ended(attempt_record()) is None


def test_a_call_without_any_attempt_has_no_record() -> None:
    """``request()`` raised before sending (a bad argument): there is no attempt to describe."""
    call = Call(None)
    assert call.request_returned() is None
    call.attempt_started(0.0)  # positive control: with an attempt, the same call ends
    assert call.attempt_ended(attempt_record()) is not None


def _return(call: Call, barrier: threading.Barrier, ended: list[CallRecord | None]) -> None:
    barrier.wait()
    ended.append(call.request_returned())


def test_concurrent_endings_make_exactly_one_record() -> None:
    """The SDK's thread returns from ``request()`` while another thread reads the stream to its end."""
    for _ in range(200):
        call = Call(None)
        call.attempt_started(0.0)
        barrier = threading.Barrier(2)
        ended: list[CallRecord | None] = []
        thread = threading.Thread(target=_return, args=(call, barrier, ended))
        thread.start()
        barrier.wait()
        ended.append(call.attempt_ended(attempt_record()))
        thread.join()
        assert len([r for r in ended if r is not None]) == 1, ended


def test_call_ids_are_unique_and_share_the_process_prefix() -> None:
    ids = [Call(None).call_id for _ in range(1000)]
    assert len(set(ids)) == 1000
    prefixes = {i.rsplit("-", 1)[0] for i in ids}
    assert len(prefixes) == 1 and len(prefixes.pop()) == 8  # 4 random bytes, hex


@pytest.mark.parametrize(
    ("status", "outcome", "reason"),
    [
        (429, Outcome.REJECTED, "429"),
        (529, Outcome.REJECTED, "529"),
        (500, Outcome.SERVER_ERROR, "500"),
        (200, Outcome.SERVER_ERROR, "server_error"),  # an in-band error after a 200
        (None, Outcome.CONNECTION_ERROR, "connection_error"),
        (None, Outcome.TIMEOUT, "timeout"),
        (200, Outcome.INCOMPLETE, "incomplete"),
        (200, Outcome.COMPLETED, "none"),  # the SDK retried a completed attempt (its own choice)
    ],
)
def test_retry_reason(status: int | None, outcome: Outcome, reason: str) -> None:
    assert retry_reason(attempt_record(status_code=status, outcome=outcome)) == reason


def test_call_record_copies_the_last_attempt() -> None:
    last = attempt_record(
        provider="openai", operation="chat", request_model="gpt", outcome=Outcome.CLIENT_CLOSED,
        ended_at=9.0, first_token_at=2.0, attribute_labels=("checkout",),
    )  # fmt: skip
    record = call_record("c-1", 2, 1.5, last)
    assert record == CallRecord(
        call_id="c-1", provider="openai", operation="chat", request_model="gpt", attempts=2,
        outcome=Outcome.CLIENT_CLOSED, started_at=1.5, ended_at=9.0, first_token_at=2.0,
        span_context=None, attribute_labels=("checkout",),
    )  # fmt: skip


def test_call_ids_are_drawn_again_in_a_forked_child() -> None:
    """Workers forked after import (gunicorn --preload) must not repeat each other's call ids."""
    parent = [Call(None).call_id for _ in range(2)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, Call(None).call_id.encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    os.close(write)
    assert parent[0] != parent[1] and parent[0].split("-")[0] == parent[1].split("-")[0]  # control: one prefix
    assert child.split("-")[0] != parent[0].split("-")[0]
    assert child not in parent


def test_a_call_cancelled_between_two_attempts_is_cancelled_at_that_moment() -> None:
    """In the SDK's back-off after a 429, the app cancels: the call is ``cancelled``, timed to the cancellation
    (the back-off it waited through included), not the ``rejected`` of its last attempt."""
    call = Call(None)
    call.attempt_started(1.0)
    assert call.attempt_ended(attempt_record(outcome=Outcome.REJECTED, status_code=429, ended_at=1.2)) is None
    record = call.request_returned(cancelled_at=4.0)
    assert record is not None
    assert (record.outcome, record.attempts, record.started_at, record.ended_at) == (Outcome.CANCELLED, 1, 1.0, 4.0)
    assert call.request_returned(cancelled_at=5.0) is None  # once


def test_a_call_that_raised_otherwise_or_whose_attempt_was_cancelled_keeps_its_last_attempt() -> None:
    """Positive controls of the rule above: the SDK gave up (its own error, no cancellation), or the cancellation
    came during an attempt (that attempt ended ``cancelled``, at its own end), or no attempt was made."""
    gave_up = Call(None)
    gave_up.attempt_started(1.0)
    gave_up.attempt_ended(attempt_record(outcome=Outcome.REJECTED, status_code=429, ended_at=1.2))
    record = gave_up.request_returned()
    assert record is not None and (record.outcome, record.ended_at) == (Outcome.REJECTED, 1.2)

    during = Call(None)
    during.attempt_started(1.0)
    during.attempt_ended(attempt_record(outcome=Outcome.CANCELLED, status_code=None, ended_at=1.5))
    record = during.request_returned(cancelled_at=1.6)
    assert record is not None and (record.outcome, record.ended_at) == (Outcome.CANCELLED, 1.5)

    in_flight = Call(None)  # request() raised while an attempt is still open: the attempt ends the call
    in_flight.attempt_started(1.0)
    assert in_flight.request_returned(cancelled_at=1.1) is None
    record = in_flight.attempt_ended(attempt_record(outcome=Outcome.CANCELLED, status_code=None, ended_at=1.2))
    assert record is not None and (record.outcome, record.ended_at) == (Outcome.CANCELLED, 1.2)

    assert Call(None).request_returned(cancelled_at=1.0) is None  # nothing sent: no call to count
