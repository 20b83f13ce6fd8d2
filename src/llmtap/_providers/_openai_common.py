"""What OpenAI's Chat Completions and Responses APIs share: headers and error objects."""

from __future__ import annotations

from typing import Any

from llmtap._providers._base import Facts, Header

__all__ = ["HEADERS", "apply_error"]

HEADERS: dict[bytes, tuple[Header, str]] = {
    b"x-request-id": (Header.REQUEST_ID, ""),
    b"openai-processing-ms": (Header.SERVER_TIME_MS, ""),
    b"x-envoy-upstream-service-time": (Header.UPSTREAM_TIME_MS, ""),
    **{
        f"x-ratelimit-{field}-{resource}".encode(): (kind, resource)
        for resource in ("requests", "tokens")
        for field, kind in (("limit", Header.LIMIT), ("remaining", Header.REMAINING), ("reset", Header.RESET_IN))
    },
}


def apply_error(facts: Facts, error: Any) -> None:
    """An error object, flat (``{"type":"error","code":...}``) or nested (``{"error":{...}}``)."""
    facts.server_error = True
    kind = None
    if isinstance(error, dict):
        kind = error.get("code") or error.get("type")
        if kind == "error":  # flat Responses error event: {"type":"error","code":...}
            kind = error.get("code") or None
    facts.error_type = str(kind) if kind else "error"  # bounded and sanitised in _core/bounds.py
