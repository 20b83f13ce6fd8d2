"""What OpenAI's Chat Completions and Responses APIs share: headers and error objects."""

from __future__ import annotations

import re
from typing import Any

from llmtap.providers._base import Facts

__all__ = ["HEADER_NAMES", "apply_error", "on_header", "parse_duration"]

_RATELIMIT = {
    b"x-ratelimit-limit-requests": ("requests", 0),
    b"x-ratelimit-limit-tokens": ("tokens", 0),
    b"x-ratelimit-remaining-requests": ("requests", 1),
    b"x-ratelimit-remaining-tokens": ("tokens", 1),
    b"x-ratelimit-reset-requests": ("requests", 2),
    b"x-ratelimit-reset-tokens": ("tokens", 2),
}
HEADER_NAMES = frozenset({b"x-request-id", b"openai-processing-ms", *_RATELIMIT})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``6m0s``, ``59.369s``, ``20ms``, ``1h2m`` -> seconds.

    Raises:
        ValueError: not a duration.
    """
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        try:
            return float(text)  # some compatible servers send plain seconds
        except ValueError:
            raise ValueError(f"not a duration: {text!r}") from None
    return sum(float(n) * _UNIT[u] for n, u in parts)


_durations: dict[bytes, float] = {}


def _duration(value: bytes) -> float:
    seconds = _durations.get(value)
    if seconds is None:
        if len(_durations) > 256:
            _durations.clear()
        seconds = _durations[value] = parse_duration(value.decode("ascii"))
    return seconds


def on_header(facts: Facts, name: bytes, value: bytes) -> None:
    if name == b"x-request-id":
        facts.request_id = value.decode("ascii", "replace")
    elif name == b"openai-processing-ms":
        facts.server_time = float(value) / 1000.0
    else:
        resource, index = _RATELIMIT[name]
        facts.set_rate_limit(resource, index, _duration(value) if index == 2 else float(value))


def apply_error(facts: Facts, error: Any) -> None:
    """An error object, flat (``{"type":"error","code":...}``) or nested (``{"error":{...}}``)."""
    facts.server_error = True
    kind = None
    if isinstance(error, dict):
        kind = error.get("code") or error.get("type")
        if kind == "error":  # flat Responses error event: {"type":"error","code":...}
            kind = error.get("code") or None
    facts.error_type = str(kind)[:64] if kind else "error"
