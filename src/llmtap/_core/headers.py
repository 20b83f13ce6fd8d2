"""Parsing of response header values that providers declare (see ``Provider.headers``).

Rate-limit reset values repeat across responses (the same timestamp or duration for a second or
more), so both parsers are memoised in small bounded dicts.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from email.utils import parsedate_to_datetime

__all__ = ["duration", "finite", "parse_duration", "reset_at", "retry_after_seconds"]

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
        if len(_duration_memo) >= _MEMO_LIMIT:
            _duration_memo.clear()
        seconds = _duration_memo[value] = parse_duration(value.decode("ascii"))
    return seconds
