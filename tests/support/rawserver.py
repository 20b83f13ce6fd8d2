"""A loopback HTTP/1.1 server that answers with exactly the bytes a test chooses (for hostile input).

Each request is read (head and ``content-length`` body), then answered with :attr:`RawServer.reply`:
raw bytes for the status line, headers and body, written in the given pieces, and the connection is
closed (so a body without a length ends at the close, and a truncation is a truncation).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RawServer", "Reply", "fixture_reply", "http_response"]


@dataclass
class Reply:
    """What the server writes: ``pieces`` one after the other, then it closes the connection."""

    pieces: list[bytes]
    pause: float = 0.0
    """Seconds between pieces."""


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class RawServer:
    reply: Callable[[Seen], Reply] | Reply = field(default_factory=lambda: Reply([b"HTTP/1.1 204 No Content\r\n\r\n"]))
    seen: list[Seen] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"RawServer({self.base_url})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __post_init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        self._sock.close()
        self._thread.join(2)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._stop:
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            seen = _read_request(conn)
            if seen is None:
                return
            self.seen.append(seen)
            del self.seen[:-20]  # the last requests only
            reply = self.reply(seen) if callable(self.reply) else self.reply
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for piece in reply.pieces:
                conn.sendall(piece)
                if reply.pause:
                    time.sleep(reply.pause)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def _read_request(conn: socket.socket) -> Seen | None:
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    length = int(dict(headers).get("content-length", "0"))
    while len(body) < length:
        more = conn.recv(65536)
        if not more:
            break
        body += more
    return Seen(method, target, headers, body)


def http_response(status: int, headers: list[tuple[bytes, bytes]], body: bytes, reason: bytes = b"X") -> bytes:
    """Status line, headers (as given: no length added) and body, as raw bytes."""
    head = b"HTTP/1.1 %d %s\r\n" % (status, reason)
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head + b"\r\n" + body


_DROP = {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive"}


def fixture_reply(path: Path) -> tuple[dict[str, Any], int, list[tuple[bytes, bytes]], bytes]:
    """A recorded fixture as (fixture, status, headers, body); length/encoding headers dropped."""
    fixture: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    response = fixture["response"]
    headers: list[tuple[bytes, bytes]] = []
    for name, value in response["headers"].items():
        if name.lower() in _DROP:
            continue
        for item in value if isinstance(value, list) else [value]:
            headers.append((name.encode("latin-1"), item.encode("latin-1")))
    headers.append((b"connection", b"close"))
    return fixture, int(response["status"]), headers, response["body_text"].encode("utf-8")


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]
