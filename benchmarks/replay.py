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
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import httpx2

__all__ = ["ReplayTransport", "events"]

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


class _Chunks(httpx2.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


class ReplayTransport(httpx2.BaseTransport):
    """Records the first response to each path from the real server, replays it one event per read after."""

    def __init__(self) -> None:
        self._real = httpx2.HTTPTransport()
        self._recorded: dict[str, tuple[int, list[tuple[bytes, bytes]], list[bytes]]] = {}
        self.replayed = 0
        """Responses served from a recording (a positive control for the counts)."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        recorded = self._recorded.get(path)
        if recorded is None:
            response = self._real.handle_request(request)
            try:
                body = b"".join(response.iter_raw())  # as sent (content-encoding included)
            finally:
                response.close()
            chunks = events(response.headers.get("content-type", ""), body)
            recorded = self._recorded[path] = (response.status_code, response.headers.raw, chunks)
        else:
            self.replayed += 1
        request.read()
        status, headers, chunks = recorded
        return httpx2.Response(status, headers=headers, stream=_Chunks(chunks), request=request)

    def close(self) -> None:
        self._real.close()
