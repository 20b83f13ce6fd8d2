"""The stream observer shells: thin sync and async wrappers around a response body stream.

They only iterate, read the clock and forward to the pure :class:`AttemptObserver`; they keep the
stream kind the client expects (a subclass of that module's ``SyncByteStream`` /
``AsyncByteStream``, made per module by :func:`shells_for`), re-raise every exception untouched
(``CancelledError`` and ``GeneratorExit`` included), and finalise the attempt exactly once: end of
body, ``close()``, an exception, or the garbage collector (``weakref.finalize``) for streams
nobody closed.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any

from opentelemetry import context as otel_context

from llmtap._log import internal_error
from llmtap._observer import AttemptObserver

__all__ = ["observe_async", "observe_sync", "shells_for"]

_clock = time.perf_counter
# Set while an observed attempt is being sent, so an explicit llmtap transport inside a patched
# client does not observe the same attempt twice.
_OBSERVING: contextvars.ContextVar[bool] = contextvars.ContextVar("llmtap_observing", default=False)


def _internal_error(where: str, exc: BaseException) -> None:
    internal_error("stream", "llmtap: internal error in %s (request unaffected): %r", where, exc)


def _closing_a_dropped_generator() -> bool:
    """True when close() runs while a ``GeneratorExit`` is being handled: the SDK's stream generator
    is being finalised because the app dropped it (the SDKs close the response in a ``finally``),
    not because the app closed it."""
    return isinstance(sys.exc_info()[1], GeneratorExit)


def _now(observer: AttemptObserver) -> float:
    """The clock, or (if reading it failed) the attempt's start: an ending is never lost to the clock."""
    try:
        return _clock()
    except Exception as exc:
        _internal_error("clock", exc)
        return observer.started_at


def _ended_by(observer: AttemptObserver, exc: BaseException) -> None:
    try:
        observer.on_exception(exc, _now(observer))
    except Exception as own:
        _internal_error("on_exception", own)


def _ended(observer: AttemptObserver) -> None:
    try:
        observer.on_eof(_now(observer))
    except Exception as exc:
        _internal_error("on_eof", exc)


def _closed(observer: AttemptObserver) -> None:
    try:
        observer.on_close(_now(observer), abandoned=_closing_a_dropped_generator())
    except Exception as exc:
        _internal_error("on_close", exc)


def _abandoned(observer: AttemptObserver) -> None:
    """The finaliser of a response nobody closed (runs in the garbage collector: must never raise)."""
    try:
        observer.on_abandon()
    except Exception as exc:
        _internal_error("on_abandon", exc)


class _SyncShell:
    """Only the iteration is written twice (sync and async); every ending goes through the helpers above."""

    def __init__(self, inner: Any, observer: AttemptObserver) -> None:
        self._inner = inner
        self._observer = observer

    def __iter__(self) -> Iterator[bytes]:
        on_chunk = self._observer.on_chunk
        clock = _clock
        try:
            for chunk in self._inner:
                try:
                    on_chunk(chunk, clock())
                except Exception as exc:
                    _internal_error("on_chunk", exc)
                yield chunk
        except BaseException as exc:
            _ended_by(self._observer, exc)
            raise
        _ended(self._observer)

    def close(self) -> None:
        _closed(self._observer)
        self._inner.close()


class _AsyncShell:
    def __init__(self, inner: Any, observer: AttemptObserver) -> None:
        self._inner = inner
        self._observer = observer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        on_chunk = self._observer.on_chunk
        clock = _clock
        try:
            async for chunk in self._inner:
                try:
                    on_chunk(chunk, clock())
                except Exception as exc:
                    _internal_error("on_chunk", exc)
                yield chunk
        except BaseException as exc:
            _ended_by(self._observer, exc)
            raise
        _ended(self._observer)

    async def aclose(self) -> None:
        _closed(self._observer)
        await self._inner.aclose()


@functools.cache
def shells_for(module: ModuleType) -> tuple[type, type]:
    """Shell classes that are ``module.SyncByteStream`` / ``module.AsyncByteStream`` subclasses."""
    sync_shell = type("ObservedStream", (_SyncShell, module.SyncByteStream), {"__module__": __name__})
    async_shell = type("AsyncObservedStream", (_AsyncShell, module.AsyncByteStream), {"__module__": __name__})
    return sync_shell, async_shell


def _wrap_response(response: Any, observer: AttemptObserver, shell: type) -> None:
    now = _now(observer)
    try:
        observer.on_response(response.status_code, response.headers.raw, now)
        if response.is_stream_consumed:
            # built with its content already read (MockTransport, ASGI/WSGI apps, test cassettes)
            observer.on_content(response.content, now)
            return
        wrapped = shell(response.stream, observer)
        observer.finalizer = weakref.finalize(wrapped, _abandoned, observer)
        response.stream = wrapped
    except Exception as exc:
        _internal_error("on_response", exc)
        try:
            observer.finish_internal_error(now)
        except Exception as own:
            _internal_error("finish", own)


class _Sending:
    """The bookkeeping around one observed send, shared by the sync and async entry points."""

    __slots__ = ("_observing", "_span_token", "observer")

    def __init__(self, tap: Any, observer: AttemptObserver) -> None:
        self.observer = observer
        self._span_token = _attach(tap, observer)
        self._observing = _OBSERVING.set(True)

    def _leave(self) -> None:
        _OBSERVING.reset(self._observing)
        _detach(self._span_token)

    def failed(self, exc: BaseException) -> None:
        self._leave()
        _ended_by(self.observer, exc)

    def responded(self, response: Any, shell: type) -> None:
        self._leave()
        _wrap_response(response, self.observer, shell)


def _begin(tap: Any, request: Any) -> _Sending | None:
    if _OBSERVING.get():
        return None
    try:
        observer = tap.begin(request)
        return None if observer is None else _Sending(tap, observer)
    except Exception as exc:
        _internal_error("begin", exc)
        return None


def observe_sync(tap: Any, request: Any, send: Callable[[], Any], shell: type) -> Any:
    """Send ``request`` through ``send()`` as one observed attempt; the app's exceptions pass untouched."""
    sending = _begin(tap, request)
    if sending is None:
        return send()
    try:
        response = send()
    except BaseException as exc:
        sending.failed(exc)
        raise
    sending.responded(response, shell)
    return response


async def observe_async(tap: Any, request: Any, send: Callable[[], Awaitable[Any]], shell: type) -> Any:
    """Async twin of :func:`observe_sync`."""
    sending = _begin(tap, request)
    if sending is None:
        return await send()
    try:
        response = await send()
    except BaseException as exc:
        sending.failed(exc)
        raise
    sending.responded(response, shell)
    return response


def _attach(tap: Any, observer: AttemptObserver) -> object | None:
    try:
        return tap.attach_span(observer)  # type: ignore[no-any-return]
    except Exception as exc:
        _internal_error("attach", exc)
        return None


def _detach(token: object | None) -> None:
    if token is not None:
        try:
            otel_context.detach(token)  # type: ignore[arg-type]
        except Exception as exc:
            _internal_error("detach", exc)
