"""botocore: the HTTP attempts of every ``bedrock-runtime`` client (boto3's, and any library's on botocore:
Strands, LangChain's ``ChatBedrock*``, pydantic-ai, instructor ...), observed with the same observer and
bookkeeping as the httpx and aiohttp hooks. ``patches.Patches`` wraps three methods when (and only when)
the application imports botocore; ``uninstrument()`` restores them. Every client is covered, made before
``instrument()`` or after: the wraps are on the classes, not per-client event handlers.

**Where the hook sits, and why.** botocore sends an operation in ``Endpoint._send_request``: a loop that
builds, signs and sends one attempt per turn through ``_do_get_response`` and asks the ``needs-retry`` handlers
whether to go again. ``_do_get_response`` first emits ``before-send``: a handler that returns a response
(botocore's ``Stubber`` registers ``before-call`` instead; moto and recorders use ``before-send``) replaces the
send, and only when none does it call ``Endpoint._send(request)``, which hands the prepared request to the
endpoint's HTTP session. So ``Endpoint._send`` is called exactly once per attempt that goes on the wire,
retries included, and never for a stubbed one; it is wrapped here (:func:`send_wrapper`) rather than
``URLLib3Session.send`` because it is the same seam whatever HTTP session the endpoint was given, and because
llmtap registers no event handler at all (a ``before-send`` handler that returned anything but ``None`` would
skip the real request). ``_send`` returns the ``AWSResponse`` once the headers arrived, or raises what the
session raised (``EndpointConnectionError``, ``ConnectionClosedError``, ``ReadTimeoutError`` ...): the
attempt's ending when no response had come. aiobotocore's ``AioEndpoint`` defines its own ``_send`` (over
aiohttp, whose hook observes it), so it never passes here.

**The body.** botocore's session makes the ``AWSResponse`` as soon as the headers arrived, then, for an
operation without a streamed output (``Converse``), reads the whole body before ``_send`` returns. So
``AWSResponse.__init__`` is wrapped too (:func:`response_init_wrapper`): made while an observed attempt is being
sent on this thread, the response gives the attempt its status and headers, and its ``raw``, the urllib3
response everything reads the body from (``AWSResponse.content``, ``EventStream``, ``StreamingBody``), is
replaced by :class:`ObservedBody`, a proxy that hands every read to it and feeds the bytes read to the observer
(and its AWS event-stream framer), which gives every ending, with the time each byte arrived:

* the provider's terminal event (ConverseStream's ``metadata`` after ``messageStop``; ``message_stop``), or an
  ``exception`` message (``server_error``), parsed from what a read returned; else the end of the body;
* ``close()``: the app's ``EventStream.close()`` / ``StreamingBody.close()`` (``client_closed``);
* an exception out of a read (urllib3's ``ProtocolError`` on a cut connection, ``ReadTimeoutError``): re-raised;
  a body with a ``content-length`` that ends short of it (urllib3 is told not to enforce it) is a cut
  connection too (``IncompleteRead``), whatever botocore makes of it;
* dropped: the proxy garbage-collected first (``abandoned``), through the shells' own finaliser (only a hand-off).

Reads the proxy does not know reach the real response unobserved, never broken. Nothing is buffered: a read's
bytes go to the observer and on to the caller.

**Which requests.** :func:`send_wrapper` passes every request through at the cost of a few checks unless a
``bedrock-runtime`` client's call is open (``sdk_calls.py`` wraps ``BaseClient._make_api_call`` when
``sdk_calls`` is on: it links the attempts of one call, as the anthropic SDK's hook does), the URL names
``bedrock-runtime``, or the tap observes configured base URLs or any host; then the tap's endpoint rules
decide, as for every client. botocore's ``amz-sdk-invocation-id`` is the same for every attempt of one call and
``amz-sdk-request: attempt=N; max=M`` numbers them: with ``sdk_calls`` off, the attempt number is read from
the latter.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from http.client import IncompleteRead
from typing import Any
from urllib.parse import unquote, urlsplit

from llmtap import _installation
from llmtap._core.calls import CURRENT_CALL
from llmtap._core.observer import Ending
from llmtap._core.stream import (
    Sending,
    Watched,
    begin_attempt,
    end_at_close,
    end_attempt,
    observed_chunks,
    perf_clock,
    stream_error,
)
from llmtap._core.tap import Attempt, Tap

__all__ = ["PROVIDER_NAME", "SERVICE", "ObservedBody", "response_init_wrapper", "send_wrapper"]

SERVICE = "bedrock-runtime"
"""The botocore service (its endpoint prefix) whose calls are observed."""
PROVIDER_NAME = "aws.bedrock"
"""The calls' ``gen_ai.provider.name`` (the anthropic SDK's Bedrock client's too)."""


class _URL:
    """A URL string as :meth:`Tap._begin` reads one (``scheme``, ``host``, ``port``, ``path``; ``str()``)."""

    __slots__ = ("_text", "host", "path", "port", "scheme")

    def __init__(self, text: str) -> None:
        parts = urlsplit(text)
        self._text = text
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port
        self.path = unquote(parts.path)  # decoded, as httpx's and aiohttp's (yarl's) URLs give it

    def __str__(self) -> str:
        return self._text


class _Request:
    """botocore's ``AWSPreparedRequest`` as :meth:`Tap._begin` reads a request (``url``, ``method``,
    ``headers``, ``content``). Only ``amz-sdk-request`` is ever read of its headers (never the signature)."""

    __slots__ = ("_request", "url")

    def __init__(self, request: Any, url: str) -> None:
        self._request = request
        self.url = _URL(url)

    @property
    def method(self) -> str:
        return str(self._request.method)

    @property
    def headers(self) -> Mapping[str, Any]:
        headers = self._request.headers
        return headers if headers is not None else {}

    @property
    def content(self) -> bytes:
        body = self._request.body
        if isinstance(body, bytes | bytearray):
            return bytes(body)
        if isinstance(body, str):
            return body.encode()
        return b""  # a file-like body (not Bedrock's): nothing is read of it


def _wanted(tap: Tap, url: str) -> bool:
    """Whether the tap may observe a request to ``url``: the early exit every other botocore request takes."""
    call = CURRENT_CALL.get()
    if call is not None and call.sdk == PROVIDER_NAME:
        return True
    if SERVICE in url:
        return True
    settings = tap.settings
    return bool(settings.base_urls) or settings.match_any_host


class _Pending:
    """The attempt :func:`send_wrapper` is sending on this thread, until its response is made."""

    __slots__ = ("answered", "sending")

    def __init__(self, sending: Sending) -> None:
        self.sending = sending
        self.answered = False


_PENDING: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar("llmtap_botocore_pending", default=None)


def send_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``botocore.endpoint.Endpoint._send(request)``: one call per attempt on the wire."""
    installation = _installation.current
    if installation is None:
        return wrapped(*args, **kwargs)
    tap = installation.tap
    try:
        request = args[0] if args else kwargs["request"]
        url = request.url
        sending = begin_attempt(tap, _Request(request, url)) if type(url) is str and _wanted(tap, url) else None
    except Exception as exc:
        stream_error("botocore request", exc)
        sending = None
    if sending is None:
        return wrapped(*args, **kwargs)
    pending = _Pending(sending)
    token = _PENDING.set(pending)
    try:
        response = wrapped(*args, **kwargs)
    except BaseException as exc:
        if pending.answered:  # the body botocore was reading failed (its read ended the attempt already)
            end_attempt(sending.tap, sending.attempt, Ending.RAISED, exc)
        else:
            sending.failed(exc)
        raise
    finally:
        _PENDING.reset(token)
    if not pending.answered:  # a session that made no AWSResponse of its own (a custom one): seen now
        pending.answered = True
        _responded(sending, response)
    return response


def response_init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
    """The wrapper of ``botocore.awsrequest.AWSResponse.__init__``: the response of the attempt being sent,
    made as soon as its headers arrived (before botocore reads a non-streamed body inside its send)."""
    wrapped(*args, **kwargs)
    pending = _PENDING.get()
    if pending is not None and not pending.answered:
        pending.answered = True
        _responded(pending.sending, instance)


def _raw_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    """urllib3's ``HTTPHeaderDict`` (a repeated header once per value) as raw pairs."""
    items = getattr(headers, "iteritems", None)
    pairs = items() if items is not None else headers.items()
    return [(str(name).encode("latin-1"), str(value).encode("latin-1")) for name, value in pairs]


def _responded(sending: Sending, response: Any) -> None:
    tap, attempt = sending.tap, sending.attempt
    try:
        status = response.status_code
        raw_headers = _raw_headers(response.headers)
    except Exception as exc:
        stream_error("botocore headers", exc)
        status, raw_headers = getattr(response, "status_code", 0), []
    if not sending.answered(status, raw_headers):
        return
    try:
        content = getattr(response, "_content", None)
        if isinstance(content, bytes):  # read whole already (a session that made no AWSResponse of its own)
            attempt.observer.on_chunk(content, perf_clock())
            end_attempt(tap, attempt, Ending.EOF)
            return
        response.raw = ObservedBody(response.raw, tap, attempt)
    except Exception as exc:
        stream_error("botocore body", exc)
        end_attempt(tap, attempt, Ending.INTERNAL)


_OWN = frozenset({"_attempt", "_inner", "_tap"})


class ObservedBody(Watched):
    """An observed response's ``raw`` (urllib3's ``HTTPResponse``): ``stream()``, ``read()``, ``readinto()``,
    ``readlines()`` and iteration go to the real response and what they return to the observer; ``close()``
    ends the attempt as closed. Anything else is the real response's."""

    __slots__ = ("_attempt", "_inner", "_tap")

    def __init__(self, inner: Any, tap: Tap, attempt: Attempt) -> None:
        self._inner = inner
        self._tap = tap
        self._attempt = attempt

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        """The proxy's own three attributes; any other is set on the real response (``auto_close`` ...)."""
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def __repr__(self) -> str:
        return repr(self._inner)

    def __enter__(self) -> ObservedBody:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[bytes]:
        return observed_chunks(iter(self._inner), self._tap, self._attempt)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        """What ``EventStream`` and ``AWSResponse.content`` read."""
        chunks = self._inner.stream(*args, **kwargs)
        if getattr(self._inner, "length_remaining", None) is not None:  # a content-length body: is it all there?
            chunks = self._checked(chunks)
        return observed_chunks(chunks, self._tap, self._attempt)

    def _checked(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        yield from chunks
        self._short()

    def _short(self) -> None:
        """The body ended: short of its ``content-length`` (botocore has urllib3 not enforce it, and parses a
        non-streamed body cut short as it is), the connection was cut: its ending, before the end of body's."""
        remaining = getattr(self._inner, "length_remaining", None)
        if type(remaining) is int and remaining > 0:
            end_attempt(self._tap, self._attempt, Ending.RAISED, IncompleteRead(b"", remaining))

    def _seen(self, data: bytes, at_end: bool) -> None:
        """``data`` was read; ``at_end``: the read left nothing to read."""
        attempt = self._attempt
        if data:
            try:
                if attempt.observer.on_chunk(data, perf_clock()):
                    end_attempt(self._tap, attempt, Ending.TERMINAL)
            except Exception as exc:
                stream_error("on_chunk", exc)
        if at_end:
            self._short()
        if at_end or getattr(self._inner, "length_remaining", None) == 0:
            end_attempt(self._tap, attempt, Ending.EOF)

    def read(self, amt: int | None = None, *args: Any, **kwargs: Any) -> Any:
        """What ``StreamingBody.read()`` reads (``InvokeModel``'s body)."""
        try:
            data = self._inner.read(amt, *args, **kwargs)
        except BaseException as exc:
            end_attempt(self._tap, self._attempt, Ending.RAISED, exc)
            raise
        if isinstance(data, bytes):
            self._seen(data, amt is None or not data)
        return data

    def readinto(self, buffer: Any) -> Any:
        try:
            count = self._inner.readinto(buffer)
        except BaseException as exc:
            end_attempt(self._tap, self._attempt, Ending.RAISED, exc)
            raise
        if isinstance(count, int):
            self._seen(bytes(memoryview(buffer)[:count]), count == 0)
        return count

    def readlines(self, *args: Any, **kwargs: Any) -> Any:
        try:
            lines = self._inner.readlines(*args, **kwargs)
        except BaseException as exc:
            end_attempt(self._tap, self._attempt, Ending.RAISED, exc)
            raise
        self._seen(b"".join(lines), not args and not kwargs)
        return lines

    def close(self) -> None:
        if not self._attempt.observer.done:  # a body read to its end ended its attempt already
            end_at_close(self._tap, self._attempt)
        self._inner.close()
