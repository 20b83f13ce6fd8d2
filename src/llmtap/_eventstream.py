"""The AWS event-stream framer (``application/vnd.amazon.eventstream``): Bedrock's streaming wire format.

A message is a 12-byte prelude (total length, headers length, CRC32 of those 8 bytes; big-endian
uint32s), the headers, the payload and a CRC32 of everything before it. Headers are a 1-byte name
length, the name, a 1-byte type and a value whose size the type gives (strings and byte arrays
carry a 2-byte length). Both CRCs are checked as botocore's ``EventStreamBuffer`` checks them
(``zlib.crc32``; the message CRC continues from the prelude's, i.e. covers the whole message).

Why not botocore's ``EventStreamBuffer`` when it is installed: it keeps the unparsed bytes in one
``bytes`` it re-slices per message and accepts 24 MiB payloads, so it would neither honour
``max_event_bytes`` nor spare the copy; llmtap must also work without botocore. This framer is
small, pure and bounded: it holds at most one partial message of at most ``max_frame`` bytes. A
longer message (its prelude CRC checked, so its length is trusted) is skipped unread and counted
as an error; a message with a bad message CRC is dropped and counted; a bad prelude loses the
framing, so the rest of the body is ignored (one error), as botocore stops there too.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["EventStreamFramer", "Frame"]

Frame = tuple[dict[str, str], bytes]
"""One message: its string-valued headers (``:message-type``, ``:event-type`` ...) and its payload."""

_PRELUDE = 12
_MIN_MESSAGE = _PRELUDE + 4
_MAX_HEADERS = 128 * 1024  # botocore's limit
_UINT32X3 = struct.Struct(">III")
_UINT32 = struct.Struct(">I")
_UINT16 = struct.Struct(">H")
# header value type -> fixed size (None: 2-byte length prefix); 7 is a UTF-8 string
_VALUE_SIZES: dict[int, int | None] = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 6: None, 7: None, 8: 8, 9: 16}


def parse_headers(data: bytes) -> dict[str, str]:
    """The string-valued headers of one message (other types are skipped); ``ValueError`` when malformed."""
    headers: dict[str, str] = {}
    pos = 0
    end = len(data)
    while pos < end:
        name_len = data[pos]
        name = data[pos + 1 : pos + 1 + name_len]
        pos += 1 + name_len
        if pos >= end:
            raise ValueError("truncated event-stream header")
        kind = data[pos]
        pos += 1
        if kind not in _VALUE_SIZES:
            raise ValueError(f"unknown event-stream header type {kind}")
        size = _VALUE_SIZES[kind]
        if size is None:
            if pos + 2 > end:
                raise ValueError("truncated event-stream header")
            (size,) = _UINT16.unpack_from(data, pos)
            pos += 2
            if kind == 7:
                headers[name.decode("utf-8")] = data[pos : pos + size].decode("utf-8")
        pos += size
        if pos > end:
            raise ValueError("truncated event-stream header")
    return headers


class EventStreamFramer:
    """Incremental framer: :meth:`feed` raw bytes, get the whole messages they complete."""

    __slots__ = ("_buf", "_skip", "broken", "errors", "max_frame")

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self.errors = 0
        """Messages dropped (too long, bad CRC, bad headers) plus one if the framing was lost."""
        self.broken = False
        """The framing was lost (bad prelude): nothing after it is framed."""
        self._buf = bytearray()
        self._skip = 0

    def feed(self, data: bytes) -> list[Frame]:
        if self.broken:
            return []
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return []
            data = data[self._skip :]
            self._skip = 0
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        while len(buf) >= _PRELUDE:
            total, headers_len, prelude_crc = _UINT32X3.unpack_from(buf)
            if (
                zlib.crc32(memoryview(buf)[:8]) != prelude_crc
                or total < _MIN_MESSAGE
                or headers_len > min(total - _MIN_MESSAGE, _MAX_HEADERS)
            ):
                self.broken = True
                self.errors += 1
                buf.clear()
                return frames
            if total > self.max_frame:
                self.errors += 1
                if len(buf) >= total:
                    del buf[:total]
                    continue
                self._skip = total - len(buf)
                buf.clear()
                return frames
            if len(buf) < total:
                break
            message = bytes(buf[:total])
            del buf[:total]
            (message_crc,) = _UINT32.unpack_from(message, total - 4)
            if zlib.crc32(memoryview(message)[: total - 4]) != message_crc:
                self.errors += 1
                continue
            try:
                headers = parse_headers(message[_PRELUDE : _PRELUDE + headers_len])
            except (ValueError, UnicodeDecodeError):
                self.errors += 1
                continue
            frames.append((headers, message[_PRELUDE + headers_len : total - 4]))
        return frames

    def take_errors(self) -> int:
        """The errors counted since the last call."""
        errors, self.errors = self.errors, 0
        return errors
