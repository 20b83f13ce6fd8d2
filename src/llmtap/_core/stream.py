"""The stream observer shells: thin sync and async wrappers around a response body stream.

They only iterate, read the clock and forward to the pure :class:`AttemptObserver`; they keep the
stream kind the client expects (a subclass of that module's ``SyncByteStream`` /
``AsyncByteStream``, made per module by :func:`shells_for`), re-raise every exception untouched
(``CancelledError`` and ``GeneratorExit`` included), and finalise the attempt exactly once: the
provider's terminal event (or an in-band error) parsed, else end of body, ``close()``, an exception,
or the garbage collector for streams nobody closed (the shell's ``__del__``; ``weakref.finalize`` for
other bodies).

Whether a close came from the app (a ``close()``, leaving a ``for`` loop) or the stream was dropped is read
from the caller's frames and bytecode, in :mod:`llmtap._core.bytecode` (a contract per Python version).

An ending that may come from the garbage collector (the finaliser, or a close made while a dropped
generator is being finalised) is only handed off (:mod:`llmtap._core.handoff`): ending an attempt takes
locks, and the collector may have interrupted their holder on this very thread.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from opentelemetry import context as otel_context

from llmtap._core import handoff as _handoff
from llmtap._core.bytecode import closed_by_the_app
from llmtap._core.observer import Ending
from llmtap._core.tap import Attempt, Tap
from llmtap._fences import HEADER_ITEMS
from llmtap._log import internal_error

__all__ = [
    "OBSERVING",
    "Sending",
    "Watched",
    "after_the_end",
    "begin_attempt",
    "end_at_close",
    "end_attempt",
    "observe_async",
    "observe_sync",
    "observed_chunks",
    "perf_clock",
    "shells_for",
    "stream_error",
    "watch_drop",
]

perf_clock = time.perf_counter
# Set while an observed attempt is being sent, so an explicit llmtap transport inside a patched
# client does not observe the same attempt twice.
OBSERVING: contextvars.ContextVar[bool] = contextvars.ContextVar("llmtap_observing", default=False)


def stream_error(where: str, exc: BaseException) -> None:
    internal_error("stream", "internal error in %s (request unaffected): %r", where, exc)


def _now(attempt: Attempt) -> float:
    """The clock, or (if reading it failed) the attempt's start: an ending is never lost to the clock."""
    try:
        return perf_clock()
    except Exception as exc:
        stream_error("clock", exc)
        return attempt.observer.start.started_at


def after_the_end(chunk: bytes, now: float) -> bool:
    """The feed once the attempt has ended at the provider's terminal event: later bytes pass untouched."""
    return False


def end_attempt(tap: Tap, attempt: Attempt, ending: Ending, exc: BaseException | None = None) -> None:
    """Every ending of every shell comes through here, guarded. A ``GeneratorExit`` is no ending by
    itself, and may be thrown in by the garbage collector: nothing to do (the shells read their own in
    :func:`_unwinding`; a close or the collector ends the attempt)."""
    if isinstance(exc, GeneratorExit):
        return
    try:
        try:
            now = perf_clock()
        except Exception as clock_failed:  # an ending is never lost to the clock
            stream_error("clock", clock_failed)
            now = attempt.observer.start.started_at
        tap._end(attempt, ending, now, exc)
    except Exception as own:
        stream_error("end", own)


def _dropped(tap: Tap, attempt: Attempt, ending: Ending = Ending.DROPPED) -> None:
    """An ending that may run inside the garbage collector: only handed off (no lock, no logging; the
    clock read is plain)."""
    try:
        at = perf_clock()
    except Exception:
        at = attempt.observer.start.started_at
    _handoff.defer(tap._end, attempt, ending, at, None)


def end_at_close(tap: Tap, attempt: Attempt) -> None:
    """``close()``. While a ``GeneratorExit`` is being handled, the generators reading the body are being
    unwound and the response is closed as they unwind (httpx2's ``iter_raw()``, or an SDK's own
    ``finally``), perhaps inside the garbage collector: ``client_closed`` when the app's ``close()``
    unwinds them or its ``for`` loop over them is left (``break``, ``return``: the response is closed at
    once all the same), ``abandoned`` when they are finalised because the app dropped them. Which one is a
    reading of the frames (:func:`closed_by_the_app`), and either way the ending is only handed off, so
    a misreading can never end an attempt inside the collector. The close that follows the end of a body
    read whole (every non-streaming response) finds the attempt ended and does nothing."""
    if attempt.observer.done:
        return
    if isinstance(sys.exc_info()[1], GeneratorExit):
        _dropped(tap, attempt, Ending.CLOSED if closed_by_the_app(stops=True) else Ending.DROPPED)
    else:
        end_attempt(tap, attempt, Ending.CLOSED)


def _unwinding(tap: Tap, attempt: Attempt) -> None:
    """The shell's own generator is being unwound (a ``GeneratorExit``) and the body is not closed yet.
    When the app's ``close()`` / ``aclose()`` call unwinds it (google-genai's generators, closed by the
    app), the attempt ends ``client_closed`` here: httpx's ``iter_raw()`` closes no response as it
    unwinds (httpx2's does, in a ``finally``), so no ``close()`` may follow. Otherwise this says nothing
    yet: a ``close()`` that follows decides (:func:`end_at_close`), or the garbage collector (``abandoned``).
    A loop left by ``break`` is no close here: the response stays open until one of those. Perhaps
    inside the collector: the ending is handed off."""
    if not attempt.observer.done and closed_by_the_app():
        _dropped(tap, attempt, Ending.CLOSED)


class Watched:
    """A shell ends its attempt as dropped (handed off) when the garbage collector takes it before the
    attempt ended: what :func:`watch_drop` does for other bodies, with nothing to set up per attempt (a
    ``weakref.finalize`` costs more than the rest of a short response's bookkeeping)."""

    _tap: Tap
    _attempt: Attempt

    def __del__(self) -> None:
        try:
            attempt = self._attempt
            if not attempt.observer.done:
                _dropped(self._tap, attempt)
        except Exception:  # inside the collector, or at exit with the modules torn down: no logging
            pass


def observed_chunks(chunks: Iterable[bytes], tap: Tap, attempt: Attempt) -> Iterator[bytes]:
    """``chunks`` as they come, each fed to the attempt's observer: the sync iteration of every body llmtap
    reads (the httpx shells', botocore's urllib3 body). The provider's terminal event, the end of
    ``chunks`` and an exception out of them end the attempt; being unwound is :func:`_unwinding`'s."""
    on_chunk = attempt.observer.on_chunk
    clock = perf_clock
    try:
        for chunk in chunks:
            try:
                if on_chunk(chunk, clock()):
                    on_chunk = after_the_end
                    end_attempt(tap, attempt, Ending.TERMINAL)
            except Exception as exc:
                stream_error("on_chunk", exc)
            yield chunk
    except GeneratorExit:
        _unwinding(tap, attempt)
        raise
    except BaseException as exc:
        end_attempt(tap, attempt, Ending.RAISED, exc)
        raise
    end_attempt(tap, attempt, Ending.EOF)


class _SyncShell(Watched):
    """Only the iteration is written twice (sync and async); every ending goes through :func:`end_attempt`."""

    def __init__(self, inner: Any, tap: Tap, attempt: Attempt) -> None:
        self._inner = inner
        self._tap = tap
        self._attempt = attempt

    def __iter__(self) -> Iterator[bytes]:
        return observed_chunks(self._inner, self._tap, self._attempt)

    def close(self) -> None:
        if not self._attempt.observer.done:  # a body read whole ended its attempt already
            end_at_close(self._tap, self._attempt)
        self._inner.close()


class _AsyncShell(Watched):
    def __init__(self, inner: Any, tap: Tap, attempt: Attempt) -> None:
        self._inner = inner
        self._tap = tap
        self._attempt = attempt

    async def __aiter__(self) -> AsyncIterator[bytes]:
        on_chunk = self._attempt.observer.on_chunk
        clock = perf_clock
        try:
            async for chunk in self._inner:
                try:
                    if on_chunk(chunk, clock()):
                        on_chunk = after_the_end
                        end_attempt(self._tap, self._attempt, Ending.TERMINAL)
                except Exception as exc:
                    stream_error("on_chunk", exc)
                yield chunk
        except GeneratorExit:
            _unwinding(self._tap, self._attempt)
            raise
        except BaseException as exc:
            end_attempt(self._tap, self._attempt, Ending.RAISED, exc)
            raise
        end_attempt(self._tap, self._attempt, Ending.EOF)

    async def aclose(self) -> None:
        if not self._attempt.observer.done:
            end_at_close(self._tap, self._attempt)
        await self._inner.aclose()


@functools.cache
def shells_for(module: ModuleType) -> tuple[type, type]:
    """Shell classes that are ``module.SyncByteStream`` / ``module.AsyncByteStream`` subclasses; their
    ``header_items`` says whether a response's headers are read as ``module`` keeps them (private), decided
    here, once per module, by the version fence of ``module`` (:data:`llmtap._fences.HEADER_ITEMS`)."""
    fence = HEADER_ITEMS.get(module.__name__)
    fields = {"__module__": __name__, "header_items": fence is not None and fence.open()}
    sync_shell = type("ObservedStream", (_SyncShell, module.SyncByteStream), fields)
    async_shell = type("AsyncObservedStream", (_AsyncShell, module.AsyncByteStream), fields)
    return sync_shell, async_shell


def _collected(tap: Tap, attempt: Attempt) -> None:
    """The garbage collector found the response unclosed: runs inside the collector."""
    _dropped(tap, attempt)


def watch_drop(body: object, tap: Tap, attempt: Attempt) -> None:
    """End ``attempt`` as dropped (handed off) if ``body`` is garbage-collected before the attempt
    ended: the aiohttp adapter's content proxy (the httpx shells watch themselves: ``Watched``)."""
    finalizer = weakref.finalize(body, _collected, tap, attempt)
    finalizer.atexit = False  # at exit nothing would drain it, and exit handlers must not end attempts
    attempt.finalizer = finalizer


class Sending:
    """The bookkeeping around one observed send, shared by the sync and async entry points."""

    __slots__ = ("_observing", "_span_token", "attempt", "tap")

    def __init__(self, tap: Tap, attempt: Attempt) -> None:
        self.tap = tap
        self.attempt = attempt
        self._span_token = None
        if attempt.span is not None:
            try:
                self._span_token = tap._enter(attempt)
            except Exception as exc:
                stream_error("enter", exc)
        self._observing = OBSERVING.set(True)

    def _leave(self) -> None:
        OBSERVING.reset(self._observing)
        if self._span_token is not None:
            try:
                otel_context.detach(self._span_token)  # type: ignore[arg-type]
            except Exception as exc:
                stream_error("detach", exc)

    def failed(self, exc: BaseException) -> None:
        self._leave()
        end_attempt(self.tap, self.attempt, Ending.RAISED, exc)

    def answered(self, status: int, raw_headers: Any) -> bool:
        """The send is over with a response's status and headers (for clients other than httpx, whose
        responses :meth:`responded` takes whole); ``False`` when llmtap failed and ended the attempt."""
        self._leave()
        try:
            self.attempt.observer.on_response(status, raw_headers, _now(self.attempt))
        except Exception as exc:
            stream_error("on_response", exc)
            end_attempt(self.tap, self.attempt, Ending.INTERNAL)
            return False
        return True

    def responded(self, response: Any, shell: type) -> None:
        self._leave()
        tap, attempt = self.tap, self.attempt
        try:
            now = perf_clock()  # as :func:`_now` (inline: once per attempt)
        except Exception as exc:
            stream_error("clock", exc)
            now = attempt.observer.start.started_at
        try:
            headers = response.headers
            # httpx keeps (raw name, lower-case name, value) items: read as they are, no copy, on the versions
            # that is tested on (the shell's header_items); else the public raw pairs
            items = getattr(headers, "_list", None) if shell.header_items else None  # type: ignore[attr-defined]
            if type(items) is list:
                attempt.observer.on_header_items(response.status_code, items, now)
            else:
                attempt.observer.on_response(response.status_code, headers.raw, now)
            if response.is_stream_consumed:
                # built with its content already read (MockTransport, ASGI/WSGI apps, test cassettes)
                attempt.observer.on_content(response.content, now)
                tap._end(attempt, Ending.EOF, now)
                return
            response.stream = shell(response.stream, tap, attempt)  # watched from here (``Watched``)
        except Exception as exc:
            stream_error("on_response", exc)
            end_attempt(tap, attempt, Ending.INTERNAL)


def begin_attempt(tap: Tap, request: Any) -> Sending | None:
    if OBSERVING.get():
        return None
    try:
        attempt = tap._begin(request)
        return None if attempt is None else Sending(tap, attempt)
    except Exception as exc:
        stream_error("begin", exc)
        return None


def observe_sync(tap: Tap, request: Any, send: Callable[[], Any], shell: type) -> Any:
    """Send ``request`` through ``send()`` as one observed attempt; the app's exceptions pass untouched."""
    sending = begin_attempt(tap, request)
    if sending is None:
        return send()
    try:
        response = send()
    except BaseException as exc:
        sending.failed(exc)
        raise
    sending.responded(response, shell)
    return response


async def observe_async(tap: Tap, request: Any, send: Callable[[], Awaitable[Any]], shell: type) -> Any:
    """Async twin of :func:`observe_sync`."""
    sending = begin_attempt(tap, request)
    if sending is None:
        return await send()
    try:
        response = await send()
    except BaseException as exc:
        sending.failed(exc)
        raise
    sending.responded(response, shell)
    return response
