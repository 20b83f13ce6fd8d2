"""Framing of streamed response bodies into whole events: SSE (``text/event-stream``), AWS
event-stream messages (Bedrock, ``application/vnd.amazon.eventstream``) and JSON lines (ollama,
``application/x-ndjson``).

A framer owns the bytes between events, nothing else: it hands each whole event (its ``event:`` name
or ``None``, and its joined ``data:`` payload) to a ``dispatch`` callable and holds at most one partial
event of at most ``max_event_bytes`` (a longer one is dropped unparsed and counted in :attr:`errors`).

The per-chunk path is the hot path. Until :attr:`SseFramer.scan_all` is cleared (by the observer, at
the first content token) every event is dispatched; after it, an LF-framed stream is only *framed* (a
C-level ``rfind`` for the event boundary and one ``find`` per provider marker), and events are parsed
only when a chunk contains one of the provider's markers (``message_delta``, ``error`` ...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from llmtap._log import log_once
from llmtap._providers._base import Provider

__all__ = ["Dispatch", "FrameFeed", "NdjsonFramer", "SseFramer", "split_events"]

Dispatch = Callable[[bytes | None, bytes], None]
"""Takes one whole event: its ``event:`` name (``None``: none) and its ``data:`` lines joined."""


def split_events(region: bytes, dispatch: Dispatch) -> None:
    """Dispatch every event of ``region``: whole LF-framed SSE events separated by blank lines."""
    for block in region.split(b"\n\n"):
        if not block:
            continue
        event: bytes | None = None
        data_lines: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                data_lines.append(value[1:] if value[:1] == b" " else value)
            elif line.startswith(b"event:"):
                event = line[6:].strip()
        if event is None and not data_lines:
            continue  # comments only
        dispatch(event, data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines))


@functools.cache
def _quiet_data_line(quiet: tuple[bytes, ...]) -> int:
    """A position inside the ``data:`` line of every quiet prefix: the first LF from there ends the
    event's only data line, and when that LF is the blank line's, the read is this one event.

    Raises:
        ValueError: a prefix without its ``data:`` line, or ending before another's starts (a provider's
            mistake, found by the tests).
    """
    if not quiet:
        return 0
    position = max(prefix.index(b"\ndata:") + 1 for prefix in quiet)
    if position >= min(len(prefix) for prefix in quiet):
        raise ValueError(f"quiet events must reach into their data line: {quiet!r}")
    return position


class SseFramer:
    """The one SSE framer of an attempt: dispatches whole events, keeps at most one partial event.

    ``markers`` and ``quiet`` are the provider's (:attr:`Provider.markers`, :attr:`Provider.quiet_events`).
    """

    __slots__ = (
        "_crlf",
        "_data_line",
        "_discarding",
        "_dispatch",
        "_fast",
        "_markers",
        "_max",
        "_name",
        "_quiet",
        "errors",
        "pending",
        "scan_all",
    )

    def __init__(
        self,
        dispatch: Dispatch,
        markers: tuple[bytes, ...],
        max_event_bytes: int,
        name: str,
        quiet: tuple[bytes, ...] = (),
    ) -> None:
        self._dispatch = dispatch
        self._markers = markers
        self._quiet = quiet
        self._data_line = _quiet_data_line(quiet)
        self._max = max_event_bytes
        self._name = name
        self._fast = False
        self._crlf = False
        self._discarding = False
        self.pending = b""
        """The partial event held until its end arrives (at most ``max_event_bytes``)."""
        self.scan_all = True
        """Dispatch every event (until the first content token); after it, only regions with a marker."""
        self.errors = 0
        """Events dropped for exceeding ``max_event_bytes``."""

    def feed(self, data: bytes) -> None:
        if self._fast:
            # LF framing, past the first token: frame, and parse only regions holding a marker
            if self.pending:
                data = self.pending + data
                end = data.rfind(b"\n\n")
            elif data[-2:] == b"\n\n":  # one read, whole events: the common case needs no search
                # one event (event line, one data line, blank line) of a type the parser never needs
                # past the first token: one prefix test instead of the marker search
                if self._quiet and data.startswith(self._quiet) and data.find(b"\n", self._data_line) == len(data) - 2:
                    return
                end = len(data) - 2
            else:
                end = data.rfind(b"\n\n")
            if end >= 0:
                self.pending = data[end + 2 :]
                for marker in self._markers:
                    if data.find(marker) != -1:
                        split_events(data[:end], self._dispatch)
                        break
                return
            if len(data) <= self._max and data.find(b"\r") == -1:
                self.pending = data
                return
            # an oversized event or CR framing: the general framing below takes over for good
            self._fast = False
            self.pending = b""
        elif self.pending:
            data = self.pending + data
        self._general(data)

    def _general(self, data: bytes) -> None:
        if data.find(b"\r") != -1:
            self._crlf = True
            carry = data.endswith(b"\r")  # a CRLF may be split across reads
            data = data.replace(b"\r\n", b"\n")
            if carry:
                data = data[:-1]
            data = data.replace(b"\r", b"\n")
            if carry:
                data += b"\r"
        end = data.rfind(b"\n\n")
        if end < 0:
            if self._discarding:
                self.pending = data[-1:]  # the first half of a split boundary, at most
            elif len(data) > self._max:
                self._overflow()
            else:
                self.pending = data
            return
        self.pending = data[end + 2 :]
        if len(self.pending) > self._max:
            self._overflow()
        start = 0
        if self._discarding:
            # the bytes up to the first boundary belong to an oversized event already dropped
            start = data.find(b"\n\n") + 2
            self._discarding = False
            if start > end:
                return
        if self.scan_all or any(data.find(marker) != -1 for marker in self._markers):
            split_events(data[start:end], self._dispatch)
        if not (self.scan_all or self._discarding or self._crlf):
            self._fast = True

    def finish(self) -> None:
        """The body ended: a CR held back in case a LF followed ends its line. An event not terminated
        by a blank line is not dispatched (SSE spec; the SDKs behave the same)."""
        if self.pending.endswith(b"\r"):
            tail = self.pending[:-1] + b"\n"
            self.pending = b""
            self._fast = False
            self._general(tail)
        self.pending = b""

    def _overflow(self) -> None:
        self.pending = b""
        if self._discarding:
            return
        self._discarding = True
        self.errors += 1
        log_once(
            "overflow",
            "an SSE event from %s exceeded max_event_bytes=%d; it was dropped unparsed",
            self._name,
            self._max,
        )


class FrameFeed:
    """AWS event-stream messages as the provider turns them into events (Bedrock), filtered by marker
    once :attr:`scan_all` is cleared, as :class:`SseFramer` filters."""

    __slots__ = ("_dispatch", "_framer", "_max", "_provider", "_quiet", "errors", "scan_all")

    def __init__(self, dispatch: Dispatch, provider: Provider, max_event_bytes: int) -> None:
        self._dispatch = dispatch
        self._provider = provider
        self._max = max_event_bytes
        # Bedrock's binary framing only: its decoder is loaded by the first Bedrock stream's response headers
        # (the request's own thread, an ordinary stack, no lock of ours; ~16 KiB, ~0.1 ms once)
        from llmtap._core.eventstream import EventStreamFramer

        self._framer = EventStreamFramer(max_event_bytes, provider.quiet_frames)
        self._quiet = bool(provider.quiet_frames)
        self.scan_all = True
        self.errors = 0
        """Messages dropped (too long, bad CRC or headers) or unreadable."""

    def feed(self, data: bytes) -> None:
        if self._quiet and not self.scan_all:
            # past the first token: whole messages of a kind never needed (content deltas) are only checked
            skipped = self._framer.skip(data)
            if skipped:
                if skipped == len(data):
                    return
                data = data[skipped:]
        provider = self._provider
        for headers, payload in self._framer.feed(data):
            try:
                converted = provider.event_from_frame(headers, payload)
            except (ValueError, RecursionError) as exc:
                self.errors += 1
                log_once("frame", "unreadable event-stream message from %s (%s)", provider.name, exc)
                continue
            if converted is None:
                continue
            event, body = converted
            if self.scan_all or event is not None:
                self._dispatch(event, body)
                continue
            for marker in provider.markers:
                if body.find(marker) != -1:
                    self._dispatch(event, body)
                    break
        if self._framer.errors:
            self.errors += self._framer.take_errors()
            log_once(
                "frame-error",
                "an event-stream message from %s was dropped (longer than max_event_bytes=%d, bad CRC or "
                "bad headers); counted in parse_errors",
                provider.name,
                self._max,
            )

    def finish(self) -> None:
        """The body ended (a partial message left is not dispatched)."""


class NdjsonFramer:
    """Newline-delimited JSON (``application/x-ndjson``, ollama's streams): every non-blank line is one
    event, dispatched as ``(None, line)``; at most one partial line of at most ``max_event_bytes`` is held
    (a longer one is dropped unparsed, up to its end, and counted in :attr:`errors`).

    Until :attr:`scan_all` is cleared (at the first output) every line is dispatched; after it, only the
    lines of a read holding one of the provider's ``markers`` (its last line, an error line). A line
    may end in CRLF (JSON takes the CR as whitespace); the last line needs no newline (:meth:`finish`).
    """

    __slots__ = ("_discarding", "_dispatch", "_markers", "_max", "_name", "errors", "pending", "scan_all")

    def __init__(self, dispatch: Dispatch, markers: tuple[bytes, ...], max_event_bytes: int, name: str) -> None:
        self._dispatch = dispatch
        self._markers = markers
        self._max = max_event_bytes
        self._name = name
        self._discarding = False
        self.pending = b""
        """The partial line held until its newline arrives (at most ``max_event_bytes``)."""
        self.scan_all = True
        """Dispatch every line (until the first output); after it, only reads with a marker."""
        self.errors = 0
        """Lines dropped for exceeding ``max_event_bytes``."""

    def feed(self, data: bytes) -> None:
        if self.pending:
            data = self.pending + data
            self.pending = b""
        end = data.rfind(b"\n")
        if end < 0:
            self._hold(data)
            return
        start = 0
        if self._discarding:  # the bytes up to the first newline end a line already dropped
            start = data.find(b"\n") + 1
            self._discarding = False
        if start < end:
            if self.scan_all:
                self._lines(data[start:end])
            else:  # past the first output: a plain loop (no generator: this runs once per read)
                for marker in self._markers:
                    if data.find(marker, start, end) != -1:
                        self._lines(data[start:end])
                        break
        if end + 1 < len(data):  # the common read ends with its line: nothing to hold
            self._hold(data[end + 1 :])

    def _lines(self, region: bytes) -> None:
        dispatch = self._dispatch
        for line in region.split(b"\n"):
            if line.strip():
                dispatch(None, line)

    def _hold(self, rest: bytes) -> None:
        if self._discarding:
            return
        if len(rest) > self._max:
            self._discarding = True
            self.errors += 1
            log_once(
                "overflow-line",
                "a JSON line from %s exceeded max_event_bytes=%d; it was dropped unparsed",
                self._name,
                self._max,
            )
            return
        self.pending = rest

    def finish(self) -> None:
        """The body ended: a last line without its newline is whole (the clients decode it too)."""
        rest, self.pending = self.pending, b""
        if rest.strip() and not self._discarding:
            self._dispatch(None, rest)
