"""Anthropic Messages API (``POST /v1/messages``), streaming and not.

Wire facts this parser relies on (checked against recorded real responses):

- ``message_start`` carries id, model and the initial usage (``input_tokens`` *excluding* cache,
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``, a small ``output_tokens``).
- ``message_delta`` carries ``stop_reason`` and the cumulative ``output_tokens``; since 2025 it may
  repeat input and cache counts, and ``output_tokens_details.thinking_tokens``.
- ``message_stop`` is the terminal event; ``error`` (e.g. ``overloaded_error``) can arrive after a 200.
- Data lines may carry arbitrary whitespace before the closing brace; ``ping`` may appear anywhere.
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers._base import Facts, Header, Output, Provider
from llmtap._providers._catalog import ANTHROPIC

__all__ = ["PROVIDER", "QUIET_DATA", "AnthropicMessages"]

# delta types that carry generated output: the field holding it (an empty string does not count) and
# its kind; others (signature_delta, citations_delta) carry none
_DELTAS = {
    "text_delta": ("text", Output.TEXT),
    "thinking_delta": ("thinking", Output.REASONING),
    "input_json_delta": ("partial_json", Output.TOOL_ARGUMENTS),
}
# Block starts: text and thinking blocks start empty (their deltas follow) unless they carry text;
# a tool call (tool_use, server_tool_use, mcp_tool_use) is named at its start; every other block
# type (redacted_thinking, *_tool_result ...) is generated output at its start.
_STARTS = {"text": ("text", Output.TEXT), "thinking": ("thinking", Output.REASONING)}


def _block_output(block: dict[str, Any]) -> Output | None:
    kind = block.get("type")
    if not isinstance(kind, str):
        return None
    start = _STARTS.get(kind)
    if start is not None:
        return start[1] if block.get(start[0]) else None
    if kind.endswith("tool_use"):
        return Output.TOOL_NAME
    if kind == "redacted_thinking":
        return Output.REASONING
    return Output.OTHER


HEADERS: dict[bytes, tuple[Header, str]] = {
    b"request-id": (Header.REQUEST_ID, ""),
    b"x-envoy-upstream-service-time": (Header.UPSTREAM_TIME_MS, ""),
    **{
        f"anthropic-ratelimit-{resource.replace('_', '-')}-{field}".encode(): (kind, resource)
        for resource in ("requests", "tokens", "input_tokens", "output_tokens")
        for field, kind in (("limit", Header.LIMIT), ("remaining", Header.REMAINING), ("reset", Header.RESET_AT))
    },
}


_USAGE = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_input_tokens", "cache_read_tokens"),
    ("cache_creation_input_tokens", "cache_write_tokens"),
)
"""Usage key -> Facts attribute; a count absent from an event leaves the one known (``message_delta``
repeats only some)."""
_DETAILS = (("thinking_tokens", "reasoning_tokens"),)


def _apply_usage(facts: Facts, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    facts.take_counts(usage, _USAGE)
    details = usage.get("output_tokens_details")
    if isinstance(details, dict):
        facts.take_counts(details, _DETAILS)


def _apply_error(facts: Facts, payload: Any) -> None:
    facts.server_error = True
    error = payload.get("error") if isinstance(payload, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    facts.error_type = kind if isinstance(kind, str) and kind else "error"


def _apply_message(facts: Facts, message: Any) -> None:
    if not isinstance(message, dict):
        return
    ident = message.get("id")
    if isinstance(ident, str):
        facts.response_id = ident
    model = message.get("model")
    if isinstance(model, str):
        facts.response_model = model
    stop = message.get("stop_reason")
    if isinstance(stop, str):
        facts.set_stop_reason(stop)
    _apply_usage(facts, message.get("usage"))


QUIET_DATA = b'{"type":"content_block_delta",'
"""The beginning of the one event the parser never needs past the first token, as the API sends it."""


class AnthropicMessages(Provider):
    """Parser for the Anthropic Messages wire format."""

    name = "anthropic"
    operation = "chat"
    markers = (b"message_", b'"error"')
    # the text, thinking and tool-argument deltas: most events of a stream
    quiet_events = (b"event: content_block_delta\ndata: " + QUIET_DATA,)
    input_includes_cache = False
    path_suffixes = ANTHROPIC.path_suffixes
    headers = HEADERS
    stop_reasons = ANTHROPIC.stop_reasons
    error_types = ANTHROPIC.error_types

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if event == b"ping" or not data:
            return None
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        kind = payload.get("type")
        if kind == "content_block_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict):
                spec = _DELTAS.get(delta.get("type"))  # type: ignore[arg-type]
                if spec is not None and delta.get(spec[0]):
                    return spec[1]
        elif kind == "content_block_start":
            block = payload.get("content_block")
            if isinstance(block, dict):
                return _block_output(block)
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict):
                stop = delta.get("stop_reason")
                if isinstance(stop, str):
                    facts.set_stop_reason(stop)
            _apply_usage(facts, payload.get("usage"))
        elif kind == "message_start":
            _apply_message(facts, payload.get("message"))
        elif kind == "message_stop":
            facts.final = True
        elif kind == "error":
            _apply_error(facts, payload)
        return None

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if not isinstance(body, dict):
            return
        kind = body.get("type")
        if kind == "message" and 200 <= status < 300:
            _apply_message(facts, body)
            facts.final = True
        elif kind == "error":
            _apply_error(facts, body)


PROVIDER = AnthropicMessages()
