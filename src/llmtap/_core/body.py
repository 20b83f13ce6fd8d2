"""Incremental content decoding of raw response bytes (``content-encoding``), bounded in memory.

llmtap must see the body the app sees, so this mirrors what httpx and httpx2 do (their
``_decoders.py`` and ``Response._get_content_decoder``), without importing their private modules:

- every ``content-encoding`` header value is split on commas, each coding stripped and lower-cased;
- ``identity`` and codings the client does not support are skipped (the client passes those bytes
  through undecoded, so the app sees them raw, and so does llmtap);
- the remaining codings are undone in reverse order (``gzip, gzip`` is inflated twice); more than
  five is an error (httpx2's limit, the app sees a ``DecodingError``);
- ``gzip`` decodes the first member only; ``deflate`` tries zlib-wrapped then raw deflate on the
  first chunk; ``br`` needs ``brotli`` (or ``brotlicffi``), ``zstd`` needs ``backports.zstd`` /
  ``compression.zstd`` (or ``zstandard``): exactly the optional packages the clients use.

``tests/test_wire_values.py`` checks every case against the real clients on the same bytes.
"""

from __future__ import annotations

import importlib
import sys
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_CODINGS", "BodyDecodeError", "Decoder", "make_decoder", "supported_codings"]

# Never inflate more than this at once: a decompression bomb costs a loop, not memory.
_MAX_INFLATE = 1 << 20
MAX_CODINGS = 5
"""More stacked codings than this are refused, as httpx2 does."""


class BodyDecodeError(Exception):
    """The body could not be decoded (bad compressed data, too many codings)."""


Decoder = Callable[[bytes], bytes]


def _zlib(wbits: int) -> Decoder:
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


def _gzip() -> Decoder:
    return _zlib(zlib.MAX_WBITS | 16)


def _deflate() -> Decoder:
    """zlib-wrapped per RFC 9110; raw deflate when the first chunk is not (as the clients do)."""
    state: list[Decoder] = [_zlib(zlib.MAX_WBITS)]
    first = [True]

    def decode(chunk: bytes) -> bytes:
        was_first = first[0]
        first[0] = False
        try:
            return state[0](chunk)
        except BodyDecodeError:
            if not was_first:
                raise
            state[0] = _zlib(-zlib.MAX_WBITS)
            return state[0](chunk)

    return decode


def _first_module(*names: str) -> Any:
    """The first of ``names`` that imports (the clients' optional decoder packages), else ``None``."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_BROTLI: Any = _first_module("brotli", "brotlicffi")
_ZSTD: Any = _first_module("compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd")
_ZSTANDARD: Any = _first_module("zstandard") if _ZSTD is None else None


def _brotli() -> Decoder:
    brotli = _BROTLI
    decompressor = brotli.Decompressor()
    cffi = hasattr(decompressor, "decompress")
    limit = _MAX_INFLATE // 2

    def decode(chunk: bytes) -> bytes:
        if not chunk:
            return b""
        try:
            if cffi:
                out: bytes = decompressor.decompress(chunk)
                return out
            parts = [decompressor.process(chunk, output_buffer_limit=limit)]
            while parts[-1]:
                more = decompressor.process(b"", output_buffer_limit=limit)
                if not more:
                    break
                parts.append(more)
            return b"".join(parts)
        except brotli.error as exc:
            raise BodyDecodeError(f"invalid brotli body: {exc}") from None

    return decode


def _zstd() -> Decoder:
    zstd = _ZSTD
    box = [zstd.ZstdDecompressor()]

    def decode(chunk: bytes) -> bytes:
        if not chunk:
            return b""
        parts: list[bytes] = []
        try:
            if box[0].eof:
                chunk = box[0].unused_data + chunk
                box[0] = zstd.ZstdDecompressor()
            while True:
                d = box[0]
                out = d.decompress(chunk, _MAX_INFLATE)
                while out:
                    parts.append(out)
                    if d.needs_input or d.eof:
                        break
                    out = d.decompress(b"", _MAX_INFLATE)
                if not (d.eof and d.unused_data):
                    break
                chunk = d.unused_data
                box[0] = zstd.ZstdDecompressor()
        except zstd.ZstdError as exc:
            raise BodyDecodeError(f"invalid zstd body: {exc}") from None
        return b"".join(parts)

    return decode


def _zstandard() -> Decoder:
    zstandard = _ZSTANDARD
    box = [zstandard.ZstdDecompressor().decompressobj()]

    def decode(chunk: bytes) -> bytes:
        try:
            parts = [box[0].decompress(chunk)]
            while box[0].eof and box[0].unused_data:
                unused = box[0].unused_data
                box[0] = zstandard.ZstdDecompressor().decompressobj()
                parts.append(box[0].decompress(unused))
        except zstandard.ZstdError as exc:
            raise BodyDecodeError(f"invalid zstd body: {exc}") from None
        return b"".join(parts)

    return decode


_FACTORIES: dict[str, Callable[[], Decoder]] = {"gzip": _gzip, "deflate": _deflate}
if _BROTLI is not None:
    _FACTORIES["br"] = _brotli
if _ZSTD is not None:
    _FACTORIES["zstd"] = _zstd
elif _ZSTANDARD is not None:
    _FACTORIES["zstd"] = _zstandard


def supported_codings() -> frozenset[str]:
    """The content codings decoded here (``identity`` aside): those the clients decode in this process."""
    return frozenset(_FACTORIES)


def _text(value: bytes) -> str:
    # header values as the clients read them: ASCII, else UTF-8, else Latin-1
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def make_decoder(encoding: bytes) -> Decoder | None:
    """A decoder for the joined ``content-encoding`` header values, ``None`` when nothing is to undo.

    Raises:
        BodyDecodeError: more than :data:`MAX_CODINGS` codings (the client refuses the body too).
    """
    codings = [coding.strip().lower() for coding in _text(encoding).split(",")]
    codings = [coding for coding in codings if coding in _FACTORIES]
    if not codings:
        return None
    if len(codings) > MAX_CODINGS:
        raise BodyDecodeError(f"more than {MAX_CODINGS} content-encodings: {encoding[:80]!r}")
    decoders = [_FACTORIES[coding]() for coding in reversed(codings)]
    if len(decoders) == 1:
        return decoders[0]

    def decode(chunk: bytes) -> bytes:
        for decoder in decoders:
            chunk = decoder(chunk)
        return chunk

    return decode
