"""The AWS event-stream framer (``application/vnd.amazon.eventstream``): Bedrock's streaming wire format.

A message is a 12-byte prelude (total length, headers length, CRC32 of those 8 bytes; big-endian
uint32s), the headers, the payload and a CRC32 of everything before it. Headers are a 1-byte name
length, the name, a 1-byte type and a value whose size the type gives (strings and byte arrays
carry a 2-byte length). Both CRCs are checked as botocore's ``EventStreamBuffer`` checks them, with the
same function (``binascii.crc32``, zlib's: inside the SDK its code is still warm from llmtap's call when
botocore's follows); the message CRC continues from the prelude's, i.e. covers the whole message.

Why not botocore's ``EventStreamBuffer`` when it is installed: it keeps the unparsed bytes in one
``bytes`` it re-slices per message and accepts 24 MiB payloads, so it would neither honour
``max_event_bytes`` nor spare the copy; llmtap must also work without botocore. This framer is
small, pure and bounded: it holds at most one partial message of at most ``max_frame`` bytes. A
longer message (its prelude CRC checked, so its length is trusted) is skipped unread and counted
as an error; a message with a bad message CRC is dropped and counted; a bad prelude loses the
framing, so the rest of the body is ignored (one error), as botocore stops there too.

Past the first token a reader needs few messages: :meth:`EventStreamFramer.skip` consumes a read of whole
messages it needs nothing from (payload prefixes the provider names, :attr:`Provider.quiet_frames`) on their
framing alone: lengths, the header block, the payload's prefix; not their CRCs, which the client's own
decoder checks (see there). A message failing any check is left to :meth:`EventStreamFramer.feed`, which
reads and counts it as ever.
"""

from __future__ import annotations

import struct
from binascii import crc32

__all__ = ["EventStreamFramer", "Frame"]

Frame = tuple[dict[str, str], bytes]
"""One message: its string-valued headers (``:message-type``, ``:event-type`` ...) and its payload."""

_PRELUDE = 12
_MIN_MESSAGE = _PRELUDE + 4
_MAX_HEADERS = 128 * 1024  # botocore's limit
_UINT32X3 = struct.Struct(">III")
_UINT32X2 = struct.Struct(">II")
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


_HEADER_CACHE: dict[bytes, dict[str, str]] = {}
_HEADER_CACHE_LIMIT = 64


def _headers(raw: bytes) -> dict[str, str]:
    """:func:`parse_headers`, cached: a stream repeats the same few header blocks in every message.
    The returned dict is shared; callers only read it."""
    headers = _HEADER_CACHE.get(raw)
    if headers is None:
        headers = parse_headers(raw)
        if len(_HEADER_CACHE) >= _HEADER_CACHE_LIMIT:
            _HEADER_CACHE.clear()
        _HEADER_CACHE[raw] = headers
    return headers


class EventStreamFramer:
    """Incremental framer: :meth:`feed` raw bytes, get the whole messages they complete.

    Whole messages in a chunk are read in place; a partial one is kept (at most ``max_frame`` bytes)
    and read once its last byte has arrived, so each byte is copied a bounded number of times.
    """

    __slots__ = (
        "_buf",
        "_headers",
        "_need",
        "_quiet",
        "_quiet_headers",
        "_quiet_starts",
        "_raw_headers",
        "_skip",
        "broken",
        "errors",
        "max_frame",
    )

    def __init__(self, max_frame: int, quiet: tuple[bytes, ...] = ()) -> None:
        """``quiet``: the payload prefixes of the messages :meth:`skip` may consume (``Provider.quiet_frames``)."""
        self.max_frame = max_frame
        self._quiet = quiet
        self._quiet_starts: tuple[bytes, ...] = ()
        """The bytes a quiet message has right after its prelude: the header block of the last message read,
        then one of the ``quiet`` prefixes (the payload follows the headers)."""
        self._quiet_headers = 0
        """The length of that header block."""
        self.errors = 0
        """Messages dropped (too long, bad CRC, bad headers) plus one if the framing was lost."""
        self.broken = False
        """The framing was lost (bad prelude): nothing after it is framed."""
        self._buf = bytearray()
        self._need = 0
        """The length the partial message in ``_buf`` must reach before it is read."""
        self._skip = 0
        self._raw_headers: bytes | None = None
        """The header block of the last message read (a stream repeats a few), and its headers."""
        self._headers: dict[str, str] = {}

    def skip(self, data: bytes) -> int:
        """How many leading bytes of ``data`` are whole messages nobody needs, now consumed: each within
        ``max_frame``, with the header block of the last message read (so the same headers) and a payload
        beginning with one of the ``quiet`` prefixes. The rest (all of ``data`` when 0) goes to :meth:`feed`,
        which reads and counts it as ever; nothing is skipped while a partial message is held.

        Their CRCs are not computed: nothing of these messages is read, and the client's decoder checks both
        CRCs of every message (botocore's, in the anthropic SDK), raising a mismatch to the application, which
        closes the body: the attempt is counted ``client_closed``. A length gone wrong is still caught: the
        next message's checks fail and :meth:`feed` reads it, prelude CRC first."""
        starts = self._quiet_starts
        if not starts or self._buf or self._skip:
            return 0
        headers_len = self._quiet_headers
        limit = self.max_frame
        end = len(data)
        if end >= _MIN_MESSAGE:  # the common read: one whole message (a token-paced stream's)
            total, length = _UINT32X2.unpack_from(data)
            if total == end and length == headers_len and total <= limit and data.startswith(starts, _PRELUDE, end - 4):
                return end
        pos = 0
        while end - pos >= _MIN_MESSAGE:
            total, length = _UINT32X2.unpack_from(data, pos)
            stop = pos + total
            if (
                length != headers_len
                or stop > end
                or total > limit
                or not data.startswith(starts, pos + _PRELUDE, stop - 4)  # headers, then a quiet payload
            ):
                break
            pos = stop
        return pos

    def feed(self, data: bytes) -> list[Frame]:
        frames: list[Frame] = []
        if self.broken:
            return frames
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return frames
            data = data[self._skip :]
            self._skip = 0
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return frames
            data = bytes(self._buf)
            self._buf = bytearray()
        pos = self._scan(data, frames)
        if pos < len(data):
            self._buf = bytearray(data[pos:])
        return frames

    def _scan(self, data: bytes, frames: list[Frame]) -> int:
        """Read the whole messages of ``data`` into ``frames``; the offset of the partial rest."""
        end = len(data)
        pos = 0
        view = memoryview(data)
        while end - pos >= _PRELUDE:
            total, headers_len, prelude_crc = _UINT32X3.unpack_from(data, pos)
            if (
                crc32(view[pos : pos + 8]) != prelude_crc
                or total < _MIN_MESSAGE
                or headers_len > min(total - _MIN_MESSAGE, _MAX_HEADERS)
            ):
                self.broken = True
                self.errors += 1
                return end
            if total > self.max_frame:
                self.errors += 1
                if end - pos >= total:
                    pos += total
                    continue
                self._skip = total - (end - pos)
                return end
            if end - pos < total:
                self._need = total
                return pos
            stop = pos + total
            (message_crc,) = _UINT32.unpack_from(data, stop - 4)
            if crc32(view[pos : stop - 4]) != message_crc:
                self.errors += 1
                pos = stop
                continue
            payload_at = pos + _PRELUDE + headers_len
            raw = self._raw_headers
            if raw is not None and len(raw) == headers_len and data.startswith(raw, pos + _PRELUDE):
                headers = self._headers
            else:
                raw = data[pos + _PRELUDE : payload_at]
                try:
                    headers = _headers(raw)
                except (ValueError, UnicodeDecodeError):
                    self.errors += 1
                    pos = stop
                    continue
                self._raw_headers = raw
                self._headers = headers
                self._quiet_starts = tuple(raw + prefix for prefix in self._quiet)
                self._quiet_headers = headers_len
            frames.append((headers, data[payload_at : stop - 4]))
            pos = stop
        self._need = _PRELUDE
        return pos

    def take_errors(self) -> int:
        """The errors counted since the last call."""
        errors, self.errors = self.errors, 0
        return errors
