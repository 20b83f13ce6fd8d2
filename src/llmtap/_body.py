"""Incremental content decoding of raw response bytes (``content-encoding``), bounded in memory."""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["BodyDecodeError", "make_decoder"]

# Never inflate more than this at once: a decompression bomb costs a loop, not memory.
_MAX_INFLATE = 1 << 20


class BodyDecodeError(Exception):
    """The body could not be decoded (bad gzip, unsupported encoding)."""


Decoder = Callable[[bytes], bytes]


def _zlib_decoder(wbits: int) -> Decoder:
    inflater = zlib.decompressobj(wbits)

    def decode(chunk: bytes) -> bytes:
        try:
            out = inflater.decompress(chunk, _MAX_INFLATE)
            if not inflater.unconsumed_tail:
                return out
            parts = [out]
            while inflater.unconsumed_tail:
                parts.append(inflater.decompress(inflater.unconsumed_tail, _MAX_INFLATE))
            return b"".join(parts)
        except zlib.error as exc:
            raise BodyDecodeError(f"invalid compressed body: {exc}") from None

    return decode


def _deflate_decoder() -> Decoder:
    """``deflate`` is zlib-wrapped per RFC 9110, but raw deflate is common in practice."""
    state: list[Decoder] = []

    def decode(chunk: bytes) -> bytes:
        if not state:
            # zlib header: CMF byte 0x78 for 32K windows
            state.append(_zlib_decoder(15 if chunk[:1] == b"\x78" else -15))
        return state[0](chunk)

    return decode


def make_decoder(encoding: bytes) -> Decoder | None:
    """A decoder for one ``content-encoding`` value, ``None`` for identity.

    Raises:
        BodyDecodeError: the encoding is not supported (the body is then not parsed).
    """
    codings = [c.strip().lower() for c in encoding.split(b",") if c.strip()]
    codings = [c for c in codings if c != b"identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise BodyDecodeError(f"stacked content-encodings not supported: {encoding!r}")
    coding = codings[0]
    if coding in (b"gzip", b"x-gzip"):
        return _zlib_decoder(16 + zlib.MAX_WBITS)
    if coding == b"deflate":
        return _deflate_decoder()
    raise BodyDecodeError(f"unsupported content-encoding: {coding.decode('ascii', 'replace')}")
