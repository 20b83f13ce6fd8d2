"""Response headers: the one walk over them on the request path (:func:`read_header_items`), and the
parsing of the values providers declare (see ``Provider.headers``).

Write cheap, read expensive: the walk keeps what the request path needs (content type and encoding,
``retry-after``, the request id, server time, error type) and only *checks* rate-limit values, which it
keeps raw; :func:`rate_limits` converts them when a reader asks (``AttemptRecord.rate_limits``).

Rate-limit reset values repeat across responses (the same timestamp or duration for a second or
more), so both parsers are memoised in small bounded dicts.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import NamedTuple

from llmtap._log import log_once
from llmtap._providers._base import SERVER_TIMES, Facts, Header, Provider

__all__ = [
    "RawRateLimits",
    "ResponseHeaders",
    "duration",
    "finite",
    "parse_duration",
    "rate_limits",
    "read_header_items",
    "read_headers",
    "reset_at",
    "retry_after_seconds",
]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_MEMO_LIMIT = 256
_reset_memo: dict[bytes, float] = {}
_duration_memo: dict[bytes, float] = {}


def parse_duration(text: str) -> float:
    """``6m0s``, ``59.369s``, ``20ms``, ``1h2m`` (or plain seconds) -> seconds.

    Raises:
        ValueError: not a duration.
    """
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"not a duration: {text!r}") from None
    else:
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {text[:40]!r}")
    return seconds


def finite(value: bytes) -> float:
    """A header number (``float()`` syntax, as the SDKs parse it) that is finite.

    Raises:
        ValueError: not a number, or ``nan`` / ``inf`` / out of float range.
    """
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def retry_after_seconds(value: bytes, now_unix: float) -> float:
    """Seconds to wait from a ``retry-after`` value: delay-seconds or an HTTP-date (RFC 9110).

    Raises:
        ValueError: neither (counted as a parse error by the caller).
    """
    try:
        return finite(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value.decode("latin-1")).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        raise ValueError("not a retry-after value") from None
    return when - now_unix


def reset_at(value: bytes) -> float:
    """Unix time of an RFC 3339 timestamp header value.

    Raises:
        ValueError: not a timestamp.
    """
    when = _reset_memo.get(value)
    if when is None:
        _one_line(value)
        if len(_reset_memo) >= _MEMO_LIMIT:
            _reset_memo.clear()
        text = value.decode("ascii").strip()
        when = _reset_memo[value] = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    return when


def duration(value: bytes) -> float:
    """Seconds of a duration header value (memoised :func:`parse_duration`).

    Raises:
        ValueError: not a duration.
    """
    seconds = _duration_memo.get(value)
    if seconds is None:
        _one_line(value)
        if len(_duration_memo) >= _MEMO_LIMIT:
            _duration_memo.clear()
        seconds = _duration_memo[value] = parse_duration(value.decode("ascii"))
    return seconds


# -- the walk on the request path ------------------------------------------------------------------


class RawRateLimits(NamedTuple):
    """The rate-limit headers of one response as :attr:`AttemptRecord.rate_limit_headers` keeps them: checked,
    not converted; :attr:`AttemptRecord.rate_limits` converts them into :class:`RateLimit` values. Three objects
    whatever the number of headers (~0.3 KiB for Anthropic's twelve, against ~1.5 KiB as a tuple per header
    holding the client's value bytes): ended records wait for the next scrape or collection, up to 256 of them.
    """

    specs: tuple[tuple[str, int], ...]
    """The provider's rate-limit headers, one per slot: resource and :class:`Header` kind (``LIMIT`` ...
    ``RESET_IN``); the same tuple for every response of the provider."""
    slots: bytes
    """The slot of each header, in the order they came."""
    values: bytes
    """Their values, joined by ``\\n`` (which no checked value holds); an empty one was garbage, counted as a
    parse error (the resource still shows)."""


def _one_line(value: bytes) -> None:
    """``ValueError`` for a value holding a line break (no HTTP client passes one on): every checked value
    can then be joined by one (:class:`RawRateLimits`)."""
    if b"\n" in value:
        raise ValueError("a line break in a header value")


# Header kinds as plain ints: enum member lookups cost more than the whole comparison on this path
_RESET_AT, _RESET_IN, _REQUEST_ID, _SERVER_TIME_MS, _ERROR_TYPE, _UPSTREAM_TIME_MS = (
    int(Header.RESET_AT),
    int(Header.RESET_IN),
    int(Header.REQUEST_ID),
    int(Header.SERVER_TIME_MS),
    int(Header.ERROR_TYPE),
    int(Header.UPSTREAM_TIME_MS),
)
_SOURCES = {source.encode(): source for source in SERVER_TIMES}
"""Server-time header names -> their ``source`` label value (the same name, as the one shared ``str``)."""
# generic headers, after the provider's Header kinds in the same table
_CONTENT_TYPE, _CONTENT_ENCODING, _RETRY_AFTER_MS, _RETRY_AFTER = range(100, 104)
_GENERIC_HEADERS: dict[bytes, tuple[int, int]] = {
    b"content-type": (_CONTENT_TYPE, 0),
    b"content-encoding": (_CONTENT_ENCODING, 0),
    b"retry-after-ms": (_RETRY_AFTER_MS, 0),
    b"retry-after": (_RETRY_AFTER, 0),
}
_MAX_PLAIN_DIGITS = 300  # float() of longer digit strings overflows to inf
_new = tuple.__new__


@functools.cache
def _header_table(provider: Provider) -> tuple[dict[bytes, tuple[int, int]], tuple[tuple[str, int], ...]]:
    """Lower-case header name -> (what it is, its slot among the rate-limit headers): one dict lookup per
    response header; and the rate-limit headers' (resource, kind) per slot (:attr:`RawRateLimits.specs`)."""
    table: dict[bytes, tuple[int, int]] = {}
    specs: list[tuple[str, int]] = []
    for name, (kind, resource) in provider.headers.items():
        if kind <= Header.RESET_IN:
            table[name] = (int(kind), len(specs))
            specs.append((resource, int(kind)))
        else:
            table[name] = (int(kind), 0)
    if len(specs) > 255:  # a slot is one byte
        raise ValueError(f"{provider.name}: more than 255 rate-limit headers")
    return {**table, **_GENERIC_HEADERS}, tuple(specs)


class ResponseHeaders(NamedTuple):
    """What the walk over one response's headers found (besides what it wrote into the attempt's facts)."""

    content_type: bytes
    """Lower-cased (``b""``: none)."""
    encoding: bytes
    """Every ``content-encoding`` value, joined with commas as the client joins them."""
    retry_after: float | None
    """Seconds (``retry-after-ms`` wins over ``retry-after``), never negative."""
    rate_limits: RawRateLimits | None
    """``None``: no rate-limit header."""
    errors: int
    """Values that could not be parsed (each logged once per kind of header)."""


def _checked(kind: int, value: bytes) -> bytes:
    """``value`` if it will convert (:func:`rate_limits`), else ``ValueError``; reset values are parsed
    through their memo (so the conversion finds them there)."""
    _one_line(value)
    if kind == _RESET_AT:
        reset_at(value)
    elif kind == _RESET_IN:
        duration(value)
    else:
        finite(value)
    return value


def read_headers(provider: Provider, raw_headers: Sequence[tuple[bytes, bytes]], facts: Facts) -> ResponseHeaders:
    """:func:`read_header_items` of raw ``(name, value)`` pairs."""
    return read_header_items(provider, [(name, name.lower(), value) for name, value in raw_headers], facts)


def read_header_items(provider: Provider, items: Sequence[tuple[bytes, bytes, bytes]], facts: Facts) -> ResponseHeaders:
    """Walk the response headers once, as ``(raw name, lower-case name, value)`` items (the form httpx keeps
    them in): the request id, server time and error type go into ``facts``, the rest is returned. A value
    that does not parse is counted and logged, never raised."""
    content_type = b""
    encoding = b""
    retry_after = retry_after_ms = None
    slots: list[int] = []
    values: list[bytes] = []
    errors = 0
    now_unix = 0.0
    table, specs = _header_table(provider)
    get = table.get
    for raw_name, name, value in items:
        spec = get(name)
        if spec is None:
            continue
        kind, slot = spec
        if kind <= _RESET_IN and (
            (value.isdigit() and len(value) < _MAX_PLAIN_DIGITS)  # a limit or what remains: plainly a number
            if kind < _RESET_AT
            else value in (_reset_memo if kind == _RESET_AT else _duration_memo)  # a reset parsed before
        ):
            slots.append(slot)
            values.append(value)
            continue
        try:
            if kind <= _RESET_IN:
                slots.append(slot)
                try:
                    values.append(_checked(kind, value))
                except ValueError:
                    values.append(b"")
                    raise
            elif kind == _CONTENT_TYPE:
                content_type = value.lower()
            elif kind == _CONTENT_ENCODING:
                encoding = encoding + b"," + value if encoding else value  # as the client joins them
            elif kind == _REQUEST_ID:
                facts.request_id = value.decode("ascii", "replace")
            elif kind in (_SERVER_TIME_MS, _UPSTREAM_TIME_MS):
                source = _SOURCES.get(name)
                milliseconds = finite(value)
                if milliseconds < 0:
                    raise ValueError("a negative server time")
                if source is not None:
                    facts.report_time(source, milliseconds / 1000.0, processing=kind == _SERVER_TIME_MS)
            elif kind == _ERROR_TYPE:
                facts.error_type = value.partition(b":")[0].decode("ascii").strip() or None
            elif kind == _RETRY_AFTER_MS:
                retry_after_ms = finite(value) / 1000.0
            else:
                now_unix = now_unix or time.time()
                retry_after = retry_after_seconds(value, now_unix)
        except (ValueError, UnicodeDecodeError):
            errors += 1
            log_once(
                "header",
                "could not parse response header %r from %s; ignored",
                raw_name.decode("latin-1"),
                provider.name,
            )
    # every value is parsed (a garbage one is a parse error); retry-after-ms is the more precise
    wait = retry_after_ms if retry_after_ms is not None else retry_after
    return _new(  # every field, in order (without the named tuple's Python-level __new__)
        ResponseHeaders,
        (
            content_type,
            encoding,
            None if wait is None else max(wait, 0.0),
            _new(RawRateLimits, (specs, bytes(slots), b"\n".join(values))) if slots else None,
            errors,
        ),
    )


# -- read expensive: the conversion, when a reader asks --------------------------------------------


def rate_limits(raw: RawRateLimits, at_unix: float) -> tuple[tuple[str, list[float | None]], ...]:
    """The rate limits of checked raw values: per resource (in the order first seen) its limit, remaining
    and seconds to reset (from ``at_unix``, the wall clock when the headers arrived; never negative)."""
    out: dict[str, list[float | None]] = {}
    specs = raw.specs
    for index, value in zip(raw.slots, raw.values.split(b"\n"), strict=True):
        resource, kind = specs[index]
        slot = out.get(resource)
        if slot is None:
            slot = out[resource] = [None, None, None]
        if not value:
            continue
        if kind < _RESET_AT:
            slot[kind] = float(value)
        elif kind == _RESET_AT:
            when = _reset_memo.get(value)
            seconds = (reset_at(value) if when is None else when) - at_unix
            slot[2] = seconds if seconds > 0.0 else 0.0
        else:
            known = _duration_memo.get(value)
            slot[2] = duration(value) if known is None else known
    return tuple(out.items())
