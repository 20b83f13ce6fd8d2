"""Cohere Chat v2 (``POST /v2/chat``), streaming and not.

Wire facts (read from the ``cohere`` SDK's own types, 7.x, ``cohere/v2/types/v2chat_stream_response.py``
and ``cohere/types/usage*.py``; no recorded real response):

- Named SSE events, each ``data`` carrying the same ``type``: ``message-start`` (``id``),
  ``content-start`` / ``content-delta`` / ``content-end`` (``delta.message.content.text``, or
  ``.thinking`` for reasoning models), ``tool-plan-delta`` (``delta.message.tool_plan``),
  ``tool-call-start`` (``delta.message.tool_calls.function.name``) / ``tool-call-delta``
  (``...function.arguments``) / ``tool-call-end``, ``citation-start`` / ``citation-end``, ``debug``.
- ``message-end`` is the terminal event: ``delta.finish_reason`` (``COMPLETE``, ``STOP_SEQUENCE``,
  ``MAX_TOKENS``, ``TOOL_CALL``, ``ERROR``, ``TIMEOUT``), ``delta.usage`` (``tokens`` and
  ``billed_units``, each ``input_tokens`` / ``output_tokens``; ``cached_tokens``) and, on an in-stream
  failure, ``delta.error``. The SDK also stops at a ``data: [DONE]``.
- A whole body: ``{"id", "finish_reason", "message", "usage"}``; error bodies are ``{"message": ...}``
  (the status says the rest). The response names no model.
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers._base import Facts, Output, Provider
from llmtap._providers._catalog import COHERE

__all__ = ["PROVIDER", "CohereChat"]

_FAILED = frozenset({"ERROR", "TIMEOUT"})


def _message(payload: dict[str, Any]) -> dict[str, Any]:
    delta = payload.get("delta")
    message = delta.get("message") if isinstance(delta, dict) else None
    return message if isinstance(message, dict) else {}


def _output(kind: object, payload: dict[str, Any]) -> Output | None:
    if kind in ("content-delta", "content-start"):
        content = _message(payload).get("content")
        if isinstance(content, dict):
            if content.get("text"):
                return Output.TEXT
            if content.get("thinking"):
                return Output.REASONING
    elif kind == "tool-plan-delta":
        return Output.REASONING if _message(payload).get("tool_plan") else None
    elif kind in ("tool-call-start", "tool-call-delta"):
        call = _message(payload).get("tool_calls")
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            if function.get("name"):
                return Output.TOOL_NAME
            if function.get("arguments"):
                return Output.TOOL_ARGUMENTS
    return None


def _apply_usage(facts: Facts, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    tokens = usage.get("tokens")
    if not isinstance(tokens, dict):
        tokens = usage.get("billed_units")
    if isinstance(tokens, dict):
        facts.input_tokens = facts.count(tokens.get("input_tokens"))
        facts.output_tokens = facts.count(tokens.get("output_tokens"))
    facts.cache_read_tokens = facts.count(usage.get("cached_tokens"))


def _apply_end(facts: Facts, finish: Any, usage: Any, error: Any) -> None:
    if isinstance(finish, str):
        facts.set_stop_reason(finish)
    _apply_usage(facts, usage)
    if finish in _FAILED or error:
        facts.server_error = True
        facts.error_type = finish if finish in _FAILED else "ERROR"
    else:
        facts.final = True


class CohereChat(Provider):
    """Parser for the Cohere Chat v2 wire format."""

    name = "cohere"
    operation = "chat"
    markers = (b"message-end", b"[DONE]")
    input_includes_cache = True
    path_suffixes = COHERE.path_suffixes
    stop_reasons = COHERE.stop_reasons
    error_types = COHERE.error_types

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if data == b"[DONE]":
            facts.final = facts.final or not facts.server_error
            return None
        if not data:
            return None
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        kind = payload.get("type")
        if kind == "message-end":
            delta = payload.get("delta")
            if isinstance(delta, dict):
                _apply_end(facts, delta.get("finish_reason"), delta.get("usage"), delta.get("error"))
            else:
                facts.final = True
            return None
        if kind == "message-start":
            ident = payload.get("id")
            if isinstance(ident, str):
                facts.response_id = ident
            return None
        return _output(kind, payload)

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if not isinstance(body, dict) or not 200 <= status < 300:
            return
        ident = body.get("id")
        facts.response_id = ident if isinstance(ident, str) else None
        _apply_end(facts, body.get("finish_reason"), body.get("usage"), None)


PROVIDER = CohereChat()
