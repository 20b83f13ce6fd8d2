"""A transport that records one real response per request path, then replays it one stream event per read.

``instructions.py`` counts a stream's events against it. Over a socket, how many events one read brings
depends on timing: under valgrind the client runs ~50x slower than the simulator writes, so reads bring
several events at once, a different number in each run, and so does the per-read work of both the SDK's
decoder and llmtap's shell (two runs of one count differed by up to 45k instructions an event). Here every
read is exactly one event, as a server generating tokens delivers them, and a count repeats.

The first request to a path goes to the real server (the simulator) through ``httpx2.HTTPTransport``; its
status, headers and raw bytes are kept, cut into events: Server-Sent Events after each blank line, the AWS
event stream (Bedrock) at each message's length prefix, any other body whole. Every later request to that
path gets a new response of those bytes, one event per read. The request is still built, signed and sent
through the client (and llmtap's hook) as ever; only the socket is left out, for every configuration alike.

``AsyncReplayTransport`` is its twin for ``httpx2.AsyncClient`` (the async clients' streams, read in an asyncio
event loop); the two share the recording, the cutting and the replayed response, and differ only in their I/O.
Each async read waits for the loop as a socket's does (two passes of the loop a read), so the loop's work for
the stream is counted too.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Iterator

import httpx2

__all__ = ["AsyncReplayTransport", "ReplayTransport", "events"]

_EVENT_STREAM = "application/vnd.amazon.eventstream"
_SSE = "text/event-stream"


def events(content_type: str, body: bytes) -> list[bytes]:
    """``body`` cut into the reads a token-paced server would hand over: one event each."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == _SSE:
        parts = body.split(b"\n\n")
        out = [part + b"\n\n" for part in parts[:-1]]
        return [*out, parts[-1]] if parts[-1] else out
    if kind == _EVENT_STREAM:
        messages: list[bytes] = []
        pos = 0
        while len(body) - pos >= 4:
            (total,) = struct.unpack_from(">I", body, pos)
            if total < 16 or pos + total > len(body):
                break
            messages.append(body[pos : pos + total])
            pos += total
        return [*messages, body[pos:]] if pos < len(body) else messages
    return [body]


class _Chunks(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A recorded body handed over one event per read, to a sync or an async reader alike."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await _arrival()
            yield chunk


async def _arrival() -> None:
    """Waits for the next read as a reader of a socket does, through the event loop: a callback of the loop
    resolves the reader's future (as a socket's readiness callback does with the data), the loop's next pass
    resumes the task. Without it a replayed body never suspends the task, and a whole stream costs the loop
    two passes instead of two a read."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    loop.call_soon(waiter.set_result, None)
    await waiter


_Recording = tuple[int, list[tuple[bytes, bytes]], list[bytes]]
"""What is kept of the first response to a path: status, raw headers, the body cut into events."""


class _Recordings:
    """The recording and replaying both transports share; their shells only do the I/O (the real request, the
    body's reads), sync or async."""

    def __init__(self) -> None:
        self._recorded: dict[str, _Recording] = {}
        self.replayed = 0
        """Responses served from a recording (a positive control for the counts)."""

    def _recording(self, request: httpx2.Request) -> _Recording | None:
        """The recording of ``request``'s path, counted as a replay, or ``None``: the shell records it."""
        recorded = self._recorded.get(request.url.path)
        if recorded is not None:
            self.replayed += 1
        return recorded

    def _record(self, request: httpx2.Request, response: httpx2.Response, body: bytes) -> _Recording:
        """Keeps ``response`` (its raw ``body`` as sent, content-encoding included), cut into events."""
        chunks = events(response.headers.get("content-type", ""), body)
        recorded = self._recorded[request.url.path] = (response.status_code, response.headers.raw, chunks)
        return recorded

    @staticmethod
    def _replay(request: httpx2.Request, recorded: _Recording) -> httpx2.Response:
        """A new response of ``recorded``'s bytes, one event per read."""
        status, headers, chunks = recorded
        return httpx2.Response(status, headers=headers, stream=_Chunks(chunks), request=request)


class ReplayTransport(_Recordings, httpx2.BaseTransport):
    """Records the first response to each path from the real server, replays it one event per read after."""

    def __init__(self) -> None:
        super().__init__()
        self._real = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        recorded = self._recording(request)
        if recorded is None:
            response = self._real.handle_request(request)
            try:
                recorded = self._record(request, response, b"".join(response.iter_raw()))
            finally:
                response.close()
        request.read()
        return self._replay(request, recorded)

    def close(self) -> None:
        self._real.close()


class AsyncReplayTransport(_Recordings, httpx2.AsyncBaseTransport):
    """:class:`ReplayTransport` for ``httpx2.AsyncClient``: the same recordings, read by the event loop."""

    def __init__(self) -> None:
        super().__init__()
        self._real = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        recorded = self._recording(request)
        if recorded is None:
            response = await self._real.handle_async_request(request)
            try:
                recorded = self._record(request, response, b"".join([chunk async for chunk in response.aiter_raw()]))
            finally:
                await response.aclose()
        await request.aread()
        return self._replay(request, recorded)

    async def aclose(self) -> None:
        await self._real.aclose()
