"""How an attempt ended: what ended its body (an :class:`Ending`, or the exception it raised) and what the
response said, turned into an :class:`~llmtap.Outcome` and an ``error.type``. Decided here only, by one
table (:data:`TABLE`)."""

from __future__ import annotations

import asyncio
import enum

from llmtap._core.record import Outcome

__all__ = ["TABLE", "Ending", "Heard", "classify_exception", "decide", "heard"]


class Ending(enum.Enum):
    """What ended an attempt's body, as the shells see it. :func:`decide` turns it into an
    :class:`~llmtap.Outcome` together with what the parsed events said."""

    TERMINAL = "terminal"
    """The provider's terminal event (``message_stop``, ``[DONE]``, ``response.completed``, Gemini's
    ``finishReason`` chunk) or an in-band error event was parsed: the attempt ends there, whatever the
    SDK does next (reads on, closes, raises, or leaves the response to the garbage collector)."""
    EOF = "eof"
    """The body was read to its end."""
    CLOSED = "closed"
    """The app (or the SDK on its behalf) closed the response."""
    DROPPED = "dropped"
    """The response was closed only because the app dropped it (its generator was finalised), or the
    garbage collector found it unclosed."""
    RAISED = "raised"
    """An exception came out of the transport (before the headers or while reading the body)."""
    INTERNAL = "internal"
    """llmtap itself failed mid-attempt: the books are closed with what is known so far."""

    __hash__ = object.__hash__  # members are singletons: the :data:`TABLE` lookup hashes without a Python call


class Heard(enum.Enum):
    """What the response said, as far as it was read."""

    NOTHING = "nothing"
    """No response (no status line)."""
    REJECTED = "rejected"
    """An HTTP error status (non-2xx)."""
    ERROR = "error"
    """A 2xx whose body carried an error (an in-band error event or error body)."""
    FINAL = "final"
    """A 2xx whose terminal event (or whole success body) was parsed."""
    ANSWERED = "answered"
    """A 2xx event stream whose stop reason was parsed, without its terminal event: the answer is whole
    (LiteLLM stops reading an Anthropic stream at ``message_delta``, before ``message_stop``)."""
    STREAM = "stream"
    """A 2xx event stream without its stop reason or terminal event (so far)."""
    BODY = "body"
    """A 2xx plain body without a success body parsed (so far)."""

    __hash__ = object.__hash__  # as Ending's


_TIMEOUT_NAMES = frozenset({"TimeoutException", "TimeoutError", "Timeout"})
"""Timeout classes by name, so no HTTP library is imported: httpx's ``TimeoutException``, urllib3's ``TimeoutError``
(not the builtin: botocore's ``ReadTimeoutError`` and a timed-out read of a body urllib3 streams derive from it),
and requests' ``Timeout`` (botocore's vendored copy is a base of its ``ConnectTimeoutError``)."""


def classify_exception(exc: BaseException) -> tuple[Outcome, str]:
    """Map an exception out of the HTTP stack to an outcome and an ``error.type`` value."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return Outcome.CANCELLED, type(exc).__name__
    names = {cls.__name__ for cls in type(exc).__mro__}
    if not names.isdisjoint(_TIMEOUT_NAMES) or isinstance(exc, TimeoutError):
        return Outcome.TIMEOUT, type(exc).__name__
    if "Cancelled" in names:  # trio / anyio cancellation
        return Outcome.CANCELLED, type(exc).__name__
    return Outcome.CONNECTION_ERROR, type(exc).__name__


class _Why(enum.Enum):
    """Where ``error.type`` comes from when the provider gave no word of its own (its word wins, except
    for a completed attempt, which never has one)."""

    NEVER = "never"
    STATUS = "status"
    EXCEPTION = "exception"
    """The raised exception's class name (``None``: nothing was raised)."""
    INCOMPLETE = "incomplete_stream"
    NONE = "none"


ANY = None
"""A wildcard in :data:`TABLE`."""

# The first row that matches decides. "How it ended" is the Ending, except for Ending.RAISED, whose
# exception's class (classify_exception) takes its place.
# fmt: off
TABLE: tuple[tuple[Heard | None, Ending | Outcome | None, Outcome, _Why], ...] = (
    # what was heard  how it ended              outcome                   error.type, else
    (Heard.REJECTED,  ANY,                      Outcome.REJECTED,         _Why.STATUS),     # refused before an answer
    (Heard.ERROR,     ANY,                      Outcome.SERVER_ERROR,     _Why.EXCEPTION),  # an error inside one
    (Heard.FINAL,     Outcome.CANCELLED,        Outcome.CANCELLED,        _Why.NONE),
    (Heard.FINAL,     ANY,                      Outcome.COMPLETED,        _Why.NEVER),
    (ANY,             Outcome.CANCELLED,        Outcome.CANCELLED,        _Why.NONE),
    (ANY,             Outcome.TIMEOUT,          Outcome.TIMEOUT,          _Why.EXCEPTION),
    (ANY,             Outcome.CONNECTION_ERROR, Outcome.CONNECTION_ERROR, _Why.EXCEPTION),
    (Heard.STREAM,    Ending.EOF,               Outcome.INCOMPLETE,       _Why.INCOMPLETE),
    (Heard.ANSWERED,  Ending.EOF,               Outcome.INCOMPLETE,       _Why.INCOMPLETE),  # the server cut it
    (Heard.ANSWERED,  Ending.CLOSED,            Outcome.COMPLETED,        _Why.NEVER),  # the client had it all
    (Heard.ANSWERED,  Ending.DROPPED,           Outcome.COMPLETED,        _Why.NEVER),
    (ANY,             Ending.EOF,               Outcome.COMPLETED,        _Why.NEVER),      # a plain body, read whole
    (ANY,             Ending.CLOSED,            Outcome.CLIENT_CLOSED,    _Why.NONE),
    (ANY,             Ending.DROPPED,           Outcome.ABANDONED,        _Why.NONE),
    (Heard.NOTHING,   ANY,                      Outcome.CONNECTION_ERROR, _Why.EXCEPTION),  # internal, no response
    (ANY,             ANY,                      Outcome.COMPLETED,        _Why.NEVER),      # internal: what is known
)
# fmt: on


def heard(status: int | None, server_error: bool, final: bool, streamed: bool, stopped: bool = False) -> Heard:
    """What the response said: its status, then what its parsed body said (``stopped``: a stop reason)."""
    if status is None:
        return Heard.NOTHING
    if not 200 <= status < 300:
        return Heard.REJECTED
    if server_error:
        return Heard.ERROR
    if final:
        return Heard.FINAL
    if not streamed:
        return Heard.BODY
    return Heard.ANSWERED if stopped else Heard.STREAM


def decide(
    said: Heard, ending: Ending, exc: BaseException | None, status: int | None, provider_error_type: str | None
) -> tuple[Outcome, str | None]:
    """The outcome and ``error.type`` of an attempt (``exc``: the exception of :attr:`Ending.RAISED`)."""
    how: Ending | Outcome = ending
    raised: str | None = None
    if ending is Ending.RAISED and exc is not None:
        how, raised = classify_exception(exc)
    outcome, why = _ROWS[said, how]
    if why is _Why.NEVER:
        return outcome, None
    if provider_error_type:
        return outcome, provider_error_type
    if why is _Why.STATUS:
        return outcome, str(status)
    if why is _Why.EXCEPTION:
        return outcome, raised
    if why is _Why.INCOMPLETE:
        return outcome, why.value
    return outcome, None


def _first_row(said: Heard, how: Ending | Outcome) -> tuple[Outcome, _Why]:
    """The first row of :data:`TABLE` matching ``said`` and ``how`` (the last row matches everything), as one
    of :data:`_ANSWERS` (the pairs share the tuples of the few rows: ~5 KiB fewer)."""
    return next(_ANSWERS[i] for i, (row, end, _, _) in enumerate(TABLE) if row in (ANY, said) and end in (ANY, how))


_ANSWERS: tuple[tuple[Outcome, _Why], ...] = tuple((outcome, why) for _, _, outcome, why in TABLE)


_ROWS: dict[tuple[Heard, Ending | Outcome], tuple[Outcome, _Why]] = {
    (said, how): _first_row(said, how) for said in Heard for how in (*Ending, *Outcome)
}
""":data:`TABLE` looked up once per pair at import (a few dozen pairs), not scanned per attempt."""
