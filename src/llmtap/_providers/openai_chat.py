"""OpenAI Chat Completions (``POST /v1/chat/completions``) and compatible servers, streaming and not.

Wire facts (checked against recorded real responses):

- ``data:`` lines only, no ``event:`` names, terminated by ``data: [DONE]``.
- The first chunk usually carries only ``delta.role`` (and ``content: ""``): the first *content* token
  is the first non-empty ``content``, ``refusal`` or tool-call ``arguments``/``name``.
- Usage arrives only in a final ``choices: []`` chunk when ``stream_options.include_usage`` is set;
  otherwise none is reported and none is recorded (never invented). Mistral sends it in its last
  chunk unasked; Groq in the last chunk's ``x_groq.usage``. ``prompt_tokens`` includes
  ``prompt_tokens_details.cached_tokens``; ``completion_tokens_details.reasoning_tokens``.
- ``finish_reason`` per choice (``n > 1`` gives several); an error object can arrive mid-stream.
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers import _openai_common
from llmtap._providers._base import Facts, Output, Provider
from llmtap._providers._catalog import OPENAI_CHAT

__all__ = ["PROVIDER", "OpenAIChat"]


def _apply_usage(facts: Facts, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    facts.input_tokens = facts.count(usage.get("prompt_tokens"))
    facts.output_tokens = facts.count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        facts.cache_read_tokens = facts.count(details.get("cached_tokens"))
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict):
        facts.reasoning_tokens = facts.count(details.get("reasoning_tokens"))


def _function_output(function: Any) -> Output | None:
    if not isinstance(function, dict):
        return None
    if function.get("name"):
        return Output.TOOL_NAME
    return Output.TOOL_ARGUMENTS if function.get("arguments") else None


def _output(delta: Any) -> Output | None:
    """What generated output a choice's delta carries (the role-only first chunk carries none)."""
    if not isinstance(delta, dict):
        return None
    if delta.get("content") or delta.get("refusal"):
        return Output.TEXT
    if delta.get("reasoning_content") or delta.get("reasoning"):
        return Output.REASONING
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            found = _function_output(call.get("function") if isinstance(call, dict) else None)
            if found is not None:
                return found
    found = _function_output(delta.get("function_call"))  # the legacy functions API
    if found is not None:
        return found
    return Output.OTHER if delta.get("audio") else None


class OpenAIChat(Provider):
    """Parser for the Chat Completions wire format (OpenAI and OpenAI-compatible servers)."""

    name = "openai"
    operation = "chat"
    # once the first token is seen: a finish reason, a usage object, an error, or the terminator
    markers = (b'"finish_reason":"', b'"finish_reason": "', b'"usage":{', b'"usage": {', b"[DONE]", b'"error"')
    input_includes_cache = True
    headers = _openai_common.HEADERS
    path_suffixes = OPENAI_CHAT.path_suffixes
    stop_reasons = OPENAI_CHAT.stop_reasons
    error_types = OPENAI_CHAT.error_types

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if data == b"[DONE]":
            facts.final = True
            return None
        if not data:
            return None
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        if payload.get("error"):
            _openai_common.apply_error(facts, payload["error"])
            return None
        output = None
        if facts.response_id is None:
            ident = payload.get("id")
            if isinstance(ident, str):
                facts.response_id = ident
            model = payload.get("model")
            if isinstance(model, str):
                facts.response_model = model
        choices = payload.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if output is None:
                    output = _output(choice.get("delta"))
                reason = choice.get("finish_reason")
                if isinstance(reason, str):
                    index = choice.get("index")
                    facts.set_stop_reason(reason, index if isinstance(index, int) else 0)
        if payload.get("usage"):
            _apply_usage(facts, payload["usage"])
        extension = payload.get("x_groq")  # Groq reports a stream's usage in its last chunk's x_groq
        if isinstance(extension, dict) and extension.get("usage"):
            _apply_usage(facts, extension["usage"])
        return output

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if not isinstance(body, dict):
            return
        if body.get("error"):
            _openai_common.apply_error(facts, body["error"])
            return
        if not 200 <= status < 300:
            return
        ident = body.get("id")
        facts.response_id = ident if isinstance(ident, str) else None
        model = body.get("model")
        facts.response_model = model if isinstance(model, str) else None
        choices = body.get("choices")
        if isinstance(choices, list):
            for position, choice in enumerate(choices):
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    index = choice.get("index")
                    facts.set_stop_reason(choice["finish_reason"], index if isinstance(index, int) else position)
        _apply_usage(facts, body.get("usage"))
        facts.final = True


PROVIDER = OpenAIChat()
