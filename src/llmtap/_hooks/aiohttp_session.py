"""aiohttp: ``aiohttp.ClientSession`` requests observed with the same observer and bookkeeping.

google-genai's async client sends through aiohttp whenever aiohttp is installed, and so do other LLM
clients. ``patches.py`` wraps ``ClientSession._request`` when (and only when) the application imports
aiohttp, and hands the requests sent while instrumented to :func:`request_wrapper` (this module is imported
by the first of them); ``uninstrument()`` restores it.

**Where the hook sits, and why.** Three seams were weighed:

- ``TraceConfig`` hooks are public, but a session gets them at construction (``trace_configs=``), so
  a session the app or an SDK already made (google-genai's) cannot be given one; their
  ``on_response_chunk_received`` fires only for ``ClientResponse.read()``, not for the ``content``
  reads a streaming client does; and none says how the body ended (EOF, release, close, cancel, drop).
- Client middlewares (aiohttp 3.12+) are given per session or per call, so reaching every session
  would take a patch anyway, and they too end at the response headers.
- ``ClientSession._request`` is the one method every request of every session passes through
  (``request``, ``get``, ``post`` ...; google-genai itself reads its signature). It returns the
  response once its headers arrived; the body is then read from ``response.content`` (a
  ``StreamReader``). So the hook wraps ``_request``: the attempt begins before the send, and an
  exception out of it is the attempt's ending. The response's ``content`` is then replaced by
  :class:`ObservedContent`, a proxy that hands every read to the real reader and feeds the bytes it
  returns to the observer, which gives every ending:

  * the real bytes, as the app gets them and when it gets them (as the httpx shells time them);
    after aiohttp's own decompression, so the observer is then not told the ``content-encoding``;
  * the provider's terminal event (``message_stop``, ``[DONE]`` ...), parsed from what a read
    returned, as in the httpx shells; else EOF: the read after which the reader is at EOF;
  * release / close: ``ClientResponse.release()`` and ``close()`` (hence ``async with`` and
    google-genai's ``finally``) tell their ``content`` through ``set_exception``; the proxy receives
    it and ends the attempt as closed (dropped, when a dropped generator is being finalised);
  * an exception or a cancellation out of a read: raised, re-raised untouched;
  * dropped: the proxy garbage-collected first (the finaliser the httpx shells use). aiohttp itself
    keeps an unreleased response alive until its body has arrived (the reader holds the response's
    end-of-body callback), so a response dropped mid-stream is found only after that.

Reads the proxy does not know (a future ``StreamReader`` method) reach the real reader unobserved,
never broken. One ``_request`` is one attempt: aiohttp's redirects (rare for LLM APIs; recorded as
one attempt, with the final response) and its one silent resend when a kept-alive connection turns
out closed happen inside it.

**Once, never twice.** An httpx client with an aiohttp transport (``httpx-aiohttp``, the anthropic and
openai SDKs' ``DefaultAioHttpClient``) is observed by the httpx hook above; while that hook is
sending the attempt, ``_request`` below it passes through (the shells' ``OBSERVING`` flag).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import ClientResponseError, StreamReader
from multidict import CIMultiDict
from yarl import URL

from llmtap import _installation
from llmtap._core import stream as _stream
from llmtap._core.observer import Ending
from llmtap._core.stream import (
    Sending,
    after_the_end,
    begin_attempt,
    end_at_close,
    end_attempt,
    perf_clock,
    stream_error,
    watch_drop,
)
from llmtap._core.tap import Attempt, Tap

__all__ = ["ObservedContent", "request_wrapper"]

_CONTENT_ENCODING = b"content-encoding"
_DECODED_BEFORE_3_13 = frozenset((b"gzip", b"deflate", b"br"))
"""The encodings aiohttp before 3.13 decodes whenever ``auto_decompress`` is on (3.13 and later say whether
they decoded: ``StreamReader.total_compressed_bytes``)."""


class _Request:
    """``ClientSession._request``'s arguments as :meth:`Tap.begin` reads a request (``url``,
    ``method``, ``headers``, ``content``); headers and content are worked out only when read, so a
    request that is not an LLM API call costs only its URL."""

    __slots__ = ("_args", "_kwargs", "url")

    def __init__(self, url: URL, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        self.url = url
        self._args = args
        self._kwargs = kwargs

    @property
    def method(self) -> str:
        return str(self._args[0] if self._args else self._kwargs["method"]).upper()

    @property
    def headers(self) -> Mapping[str, str]:
        try:
            return CIMultiDict(self._kwargs.get("headers") or ())
        except Exception:  # headers aiohttp will refuse itself
            return CIMultiDict()

    @property
    def content(self) -> bytes | Mapping[str, Any]:
        data = self._kwargs.get("data")
        if isinstance(data, bytes | bytearray | memoryview):
            return bytes(data)
        if isinstance(data, str):
            return data.encode()
        body = self._kwargs.get("json")
        return body if isinstance(body, Mapping) else b""


def _url(session: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> URL | None:
    """The URL ``_request`` will send to (the session's ``base_url`` applied), ``None`` if it is not one:
    aiohttp then tells the app so itself."""
    try:
        target = args[1] if len(args) > 1 else kwargs["str_or_url"]
        build = getattr(session, "_build_url", None)  # aiohttp 3.8+: joins the session's base_url
        url = build(target) if build is not None else URL(target)
        return url if url.host else None
    except Exception:
        return None


def request_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``aiohttp.ClientSession._request`` (a coroutine function)."""
    installation = _installation.current
    if installation is None:
        return wrapped(*args, **kwargs)
    return _observed(installation.tap, instance, args, kwargs, functools.partial(wrapped, *args, **kwargs))


async def _observed(
    tap: Tap, session: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], send: Callable[[], Awaitable[Any]]
) -> Any:
    if _stream.OBSERVING.get():  # an httpx client above is observing this attempt already
        return await send()
    url = _url(session, args, kwargs)
    sending = None if url is None else begin_attempt(tap, _Request(url, args, kwargs))
    if sending is None:
        return await send()
    try:
        response = await send()
    except BaseException as exc:
        _failed(sending, exc)
        raise
    _responded(sending, response, session, kwargs)
    return response


def _failed(sending: Sending, exc: BaseException) -> None:
    """``_request`` raised. With ``raise_for_status`` it raises after the response's headers: that
    attempt ended with the server's status, not with a connection error."""
    if not (isinstance(exc, ClientResponseError) and isinstance(exc.status, int) and exc.status >= 400):
        sending.failed(exc)
        return
    try:
        raw = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items())
    except Exception:
        raw = ()
    if sending.answered(exc.status, raw):
        end_attempt(sending.tap, sending.attempt, Ending.RAISED, exc)


def _decoded(response: Any, session: Any, kwargs: Mapping[str, Any], raw: Sequence[tuple[bytes, bytes]]) -> bool:
    """aiohttp hands the app this body decompressed. 3.13 and later say so (``total_compressed_bytes`` is
    set when they decode); before, aiohttp decodes gzip, deflate and br whenever the request's
    ``auto_decompress`` (else the session's, on by default) is on."""
    content = response.content
    if hasattr(content, "total_compressed_bytes"):
        return content.total_compressed_bytes is not None
    auto = kwargs.get("auto_decompress")
    if auto is None:
        auto = getattr(session, "_auto_decompress", True)
    if not auto:
        return False
    encodings = [value.strip().lower() for name, value in raw if name.lower() == _CONTENT_ENCODING]
    return len(encodings) == 1 and encodings[0] in _DECODED_BEFORE_3_13


def _responded(sending: Sending, response: Any, session: Any, kwargs: Mapping[str, Any]) -> None:
    tap, attempt = sending.tap, sending.attempt
    try:
        raw = response.raw_headers
        if _decoded(response, session, kwargs, raw):
            # aiohttp decompressed the body: the observer gets decoded bytes, so no encoding for it
            raw = tuple(header for header in raw if header[0].lower() != _CONTENT_ENCODING)
    except Exception as exc:
        stream_error("aiohttp headers", exc)
        raw = ()
    if not sending.answered(getattr(response, "status", 0), raw):
        return
    try:
        content = response.content
        if content.at_eof():  # no body at all (HEAD, 204, 304): ended already
            end_attempt(tap, attempt, Ending.EOF)
            return
        observed = ObservedContent(content, tap, attempt)
        watch_drop(observed, tap, attempt)
        response.content = observed
    except Exception as exc:
        stream_error("aiohttp content", exc)
        end_attempt(tap, attempt, Ending.INTERNAL)


class ObservedContent:
    """An observed response's ``content``: every read goes to the real ``StreamReader``; what it
    returns is fed to the observer, and the read that leaves the reader at EOF, an exception out of a
    read, or ``set_exception`` (how ``release()`` / ``close()`` tell their content) ends the attempt.
    Anything else is the real reader's."""

    __slots__ = ("__weakref__", "_attempt", "_inner", "_on_chunk", "_tap")

    def __init__(self, inner: StreamReader, tap: Tap, attempt: Attempt) -> None:
        self._inner = inner
        self._tap = tap
        self._attempt = attempt
        self._on_chunk = attempt.observer.on_chunk

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)

    def _seen(self, data: bytes) -> None:
        if data:
            try:
                if self._on_chunk(data, perf_clock()):  # the provider's terminal event: the attempt ends here
                    self._on_chunk = after_the_end
                    end_attempt(self._tap, self._attempt, Ending.TERMINAL)
            except Exception as exc:
                stream_error("on_chunk", exc)
        if self._inner.at_eof():
            end_attempt(self._tap, self._attempt, Ending.EOF)

    def _raised(self, exc: BaseException) -> None:
        end_attempt(self._tap, self._attempt, Ending.RAISED, exc)

    async def _read(self, reading: Awaitable[bytes]) -> bytes:
        try:
            data = await reading
        except BaseException as exc:
            self._raised(exc)
            raise
        self._seen(data)
        return data

    def read(self, n: int = -1) -> Awaitable[bytes]:
        return self._read(self._inner.read(n))

    def readany(self) -> Awaitable[bytes]:
        return self._read(self._inner.readany())

    def readline(self, *args: Any, **kwargs: Any) -> Awaitable[bytes]:
        return self._read(self._inner.readline(*args, **kwargs))

    def readuntil(self, *args: Any, **kwargs: Any) -> Awaitable[bytes]:
        return self._read(self._inner.readuntil(*args, **kwargs))

    def readexactly(self, n: int) -> Awaitable[bytes]:
        return self._read(self._inner.readexactly(n))

    async def readchunk(self) -> tuple[bytes, bool]:
        try:
            data, end_of_chunk = await self._inner.readchunk()
        except BaseException as exc:
            self._raised(exc)
            raise
        self._seen(data)
        return data, end_of_chunk

    def read_nowait(self, n: int = -1) -> bytes:
        try:
            data = self._inner.read_nowait(n)
        except BaseException as exc:
            self._raised(exc)
            raise
        self._seen(data)
        return data

    def __aiter__(self) -> _Lines:
        return _Lines(self.readline)

    def iter_any(self) -> _Lines:
        return _Lines(self.readany)

    def iter_chunked(self, n: int) -> _Lines:
        grow = getattr(self._inner, "set_read_chunk_size", None)
        if grow is not None:
            grow(n)
        return _Lines(functools.partial(self.read, n))

    def iter_chunks(self) -> _Chunks:
        return _Chunks(self)

    def set_exception(self, exc: BaseException, *cause: BaseException) -> None:
        """``ClientResponse.release()`` / ``close()`` (or the app) ends the body here."""
        end_at_close(self._tap, self._attempt)
        self._inner.set_exception(exc, *cause)


class _Lines:
    """``async for`` over one read method of :class:`ObservedContent`, ending at its empty read."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> bytes:
        data = await self._read()
        if not data:
            raise StopAsyncIteration
        return data


class _Chunks:
    """``iter_chunks()``: ``(data, end_of_http_chunk)`` until ``(b"", False)``, as aiohttp's."""

    __slots__ = ("_content",)

    def __init__(self, content: ObservedContent) -> None:
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> tuple[bytes, bool]:
        chunk = await self._content.readchunk()
        if chunk == (b"", False):
            raise StopAsyncIteration
        return chunk
