"""What OpenAI's Chat Completions and Responses APIs share: headers and error objects."""

from __future__ import annotations

from typing import Any

from llmtap._providers._base import Facts, Header

__all__ = ["ERROR_TYPES", "HEADERS", "apply_error"]

ERROR_TYPES = frozenset(
    {
        "invalid_request_error", "invalid_api_key", "authentication_error", "permission_error", "not_found_error",
        "model_not_found", "rate_limit_exceeded", "rate_limit_error", "insufficient_quota", "tokens_exceeded",
        "context_length_exceeded", "server_error", "api_error", "service_unavailable", "overloaded_error",
        "content_filter", "invalid_prompt", "vector_store_timeout", "unsupported_value", "error",
    }
)  # fmt: skip
"""The error codes / types the OpenAI APIs document (and OpenAI-compatible servers commonly send)."""

HEADERS: dict[bytes, tuple[Header, str]] = {
    b"x-request-id": (Header.REQUEST_ID, ""),
    b"openai-processing-ms": (Header.SERVER_TIME_MS, ""),
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
