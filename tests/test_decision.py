"""The decision table: what ended an attempt and what the response said -> outcome and error.type."""

from __future__ import annotations

import asyncio

import pytest

from llmtap import Outcome
from llmtap._core.decision import TABLE, Ending, Heard, classify_exception, decide, heard


@pytest.mark.parametrize(
    ("status", "server_error", "final", "streamed", "said"),
    [
        (None, False, False, False, Heard.NOTHING),
        (429, False, False, True, Heard.REJECTED),
        (500, True, True, True, Heard.REJECTED),  # the status first
        (200, True, True, True, Heard.ERROR),  # an error beats a final event
        (200, False, True, True, Heard.FINAL),
        (204, False, False, True, Heard.STREAM),
        (200, False, False, False, Heard.BODY),
    ],
)
def test_what_was_heard(status: int | None, server_error: bool, final: bool, streamed: bool, said: Heard) -> None:
    assert heard(status, server_error, final, streamed) is said


def test_a_stream_whose_stop_reason_came_is_answered() -> None:
    assert heard(200, False, False, True, stopped=True) is Heard.ANSWERED
    assert heard(200, False, True, True, stopped=True) is Heard.FINAL  # the terminal event first
    assert heard(200, False, False, False, stopped=True) is Heard.BODY  # a body read whole: its own rows


@pytest.mark.parametrize(
    ("said", "ending", "exc", "status", "provider_type", "expected"),
    [
        (Heard.REJECTED, Ending.EOF, None, 429, None, (Outcome.REJECTED, "429")),
        (Heard.REJECTED, Ending.EOF, None, 429, "rate_limit_error", (Outcome.REJECTED, "rate_limit_error")),
        (Heard.REJECTED, Ending.RAISED, TimeoutError(), 503, None, (Outcome.REJECTED, "503")),
        (Heard.ERROR, Ending.CLOSED, None, 200, "overloaded_error", (Outcome.SERVER_ERROR, "overloaded_error")),
        (Heard.ERROR, Ending.RAISED, ConnectionResetError(), 200, None, (Outcome.SERVER_ERROR, "ConnectionResetError")),
        (Heard.FINAL, Ending.RAISED, ConnectionResetError(), 200, None, (Outcome.COMPLETED, None)),
        (Heard.FINAL, Ending.RAISED, KeyboardInterrupt(), 200, None, (Outcome.CANCELLED, None)),
        (Heard.FINAL, Ending.DROPPED, None, 200, "ignored_on_success", (Outcome.COMPLETED, None)),
        (Heard.STREAM, Ending.RAISED, asyncio.CancelledError(), 200, None, (Outcome.CANCELLED, None)),
        (Heard.STREAM, Ending.RAISED, TimeoutError(), 200, None, (Outcome.TIMEOUT, "TimeoutError")),
        (Heard.STREAM, Ending.EOF, None, 200, None, (Outcome.INCOMPLETE, "incomplete_stream")),
        (Heard.BODY, Ending.EOF, None, 200, None, (Outcome.COMPLETED, None)),
        (Heard.STREAM, Ending.CLOSED, None, 200, None, (Outcome.CLIENT_CLOSED, None)),
        (Heard.STREAM, Ending.DROPPED, None, 200, None, (Outcome.ABANDONED, None)),
        # the stop reason came, the terminal event not: the client had the whole answer (LiteLLM's reading)
        (Heard.ANSWERED, Ending.CLOSED, None, 200, None, (Outcome.COMPLETED, None)),
        (Heard.ANSWERED, Ending.DROPPED, None, 200, None, (Outcome.COMPLETED, None)),
        (Heard.ANSWERED, Ending.EOF, None, 200, None, (Outcome.INCOMPLETE, "incomplete_stream")),  # server cut it
        (
            Heard.ANSWERED,
            Ending.RAISED,
            ConnectionResetError(),
            200,
            None,
            (Outcome.CONNECTION_ERROR, "ConnectionResetError"),
        ),
        (Heard.ANSWERED, Ending.RAISED, asyncio.CancelledError(), 200, None, (Outcome.CANCELLED, None)),
        (Heard.NOTHING, Ending.RAISED, OSError(), None, None, (Outcome.CONNECTION_ERROR, "OSError")),
        (Heard.NOTHING, Ending.INTERNAL, None, None, None, (Outcome.CONNECTION_ERROR, None)),
        (Heard.STREAM, Ending.INTERNAL, None, 200, None, (Outcome.COMPLETED, None)),
    ],
)
def test_the_table(
    said: Heard,
    ending: Ending,
    exc: BaseException | None,
    status: int | None,
    provider_type: str | None,
    expected: tuple[Outcome, str | None],
) -> None:
    assert decide(said, ending, exc, status, provider_type) == expected


def test_every_situation_has_a_row() -> None:
    """The last row is the catch-all: every combination decides, and every outcome is reachable."""
    hows: list[Ending | Outcome] = [*Ending, Outcome.CANCELLED, Outcome.TIMEOUT, Outcome.CONNECTION_ERROR]
    assert TABLE[-1][:2] == (None, None)
    reached = {row[2] for row in TABLE}
    assert reached == set(Outcome)
    for said in Heard:
        for how in hows:
            assert any(row[0] in (None, said) and row[1] in (None, how) for row in TABLE)


def test_exceptions_are_classified_by_class_name() -> None:
    class TimeoutException(Exception):  # httpx's name, without importing httpx
        pass

    class ReadTimeout(TimeoutException):
        pass

    assert classify_exception(ReadTimeout()) == (Outcome.TIMEOUT, "ReadTimeout")
    assert classify_exception(asyncio.CancelledError()) == (Outcome.CANCELLED, "CancelledError")
    assert classify_exception(ConnectionResetError()) == (Outcome.CONNECTION_ERROR, "ConnectionResetError")


def test_urllib3_and_botocore_timeouts_are_timeouts() -> None:
    """urllib3's ``TimeoutError`` is its own class, not the builtin: botocore's read and connect timeouts, and
    what a timed-out read of a streamed body raises, derive from it."""
    from botocore.exceptions import ConnectionClosedError, ConnectTimeoutError, ReadTimeoutError
    from urllib3.exceptions import ProtocolError
    from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeout

    assert classify_exception(Urllib3ReadTimeout(None, "/", "read timed out")) == (Outcome.TIMEOUT, "ReadTimeoutError")  # type: ignore[arg-type]
    assert classify_exception(ReadTimeoutError(endpoint_url="u")) == (Outcome.TIMEOUT, "ReadTimeoutError")
    assert classify_exception(ConnectTimeoutError(endpoint_url="u")) == (Outcome.TIMEOUT, "ConnectTimeoutError")
    # the controls: a cut connection is not a timeout
    assert classify_exception(ProtocolError("Response ended prematurely"))[0] is Outcome.CONNECTION_ERROR
    assert classify_exception(ConnectionClosedError(endpoint_url="u"))[0] is Outcome.CONNECTION_ERROR
