"""OpenAI Responses API (``POST /v1/responses``), streaming and not.

Wire facts (checked against recorded real responses): named events (``response.created`` ...
``response.output_text.delta`` ...), terminal ``response.completed`` / ``response.failed`` /
``response.incomplete`` carrying the whole response with its usage (``input_tokens`` incl.
``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``); no ``[DONE]``.
An ``error`` event comes flat (``{"type":"error","code":...}``) or nested (``{"error":{...}}``).
``response.incomplete`` is a completed stream whose stop reason is the incomplete reason
(``max_output_tokens``, ``content_filter``).
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers import _openai_common
from llmtap._providers._base import Facts, Output, Provider
from llmtap._providers._catalog import OPENAI_RESPONSES

__all__ = ["PROVIDER", "OpenAIResponses"]

# delta events (a non-empty ``delta`` carries output) and their kind
_DELTAS = {
    "response.output_text.delta": Output.TEXT,
    "response.refusal.delta": Output.TEXT,
    "response.audio.transcript.delta": Output.TEXT,
    "response.reasoning_text.delta": Output.REASONING,
    "response.reasoning_summary_text.delta": Output.REASONING,
    "response.function_call_arguments.delta": Output.TOOL_ARGUMENTS,
    "response.custom_tool_call_input.delta": Output.TOOL_ARGUMENTS,
    "response.mcp_call_arguments.delta": Output.TOOL_ARGUMENTS,
    "response.code_interpreter_call_code.delta": Output.TOOL_ARGUMENTS,
    "response.audio.delta": Output.OTHER,
}
_TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}


def _apply_response(facts: Facts, response: Any) -> None:
    if not isinstance(response, dict):
        return
    ident = response.get("id")
    if isinstance(ident, str):
        facts.response_id = ident
    model = response.get("model")
    if isinstance(model, str):
        facts.response_model = model
    status = response.get("status")
    if status == "completed":
        facts.set_stop_reason(_completed_reason(response))
    elif status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        facts.set_stop_reason(reason if isinstance(reason, str) else "incomplete")
    elif status == "failed":
        _openai_common.apply_error(facts, response.get("error"))
    usage = response.get("usage")
    if isinstance(usage, dict):
        facts.input_tokens = facts.count(usage.get("input_tokens"))
        facts.output_tokens = facts.count(usage.get("output_tokens"))
        details = usage.get("input_tokens_details")
        if isinstance(details, dict):
            facts.cache_read_tokens = facts.count(details.get("cached_tokens"))
        details = usage.get("output_tokens_details")
        if isinstance(details, dict):
            facts.reasoning_tokens = facts.count(details.get("reasoning_tokens"))


def _completed_reason(response: dict[str, Any]) -> str:
    output = response.get("output")
    if isinstance(output, list) and any(
        isinstance(item, dict) and item.get("type") == "function_call" for item in output
    ):
        return "tool_calls"
    return "stop"


class OpenAIResponses(Provider):
    """Parser for the Responses API wire format."""

    name = "openai"
    operation = "chat"
    markers = (b"response.completed", b"response.incomplete", b"response.failed", b'"error"')
    input_includes_cache = True
    headers = _openai_common.HEADERS
    path_suffixes = OPENAI_RESPONSES.path_suffixes
    stop_reasons = OPENAI_RESPONSES.stop_reasons
    error_types = OPENAI_RESPONSES.error_types

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if not data or data == b"[DONE]":
            return None
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        kind = payload.get("type")
        if not isinstance(kind, str) and event is not None:
            kind = event.decode("ascii", "replace")
        output = _DELTAS.get(kind) if isinstance(kind, str) else None
        if output is not None:
            return output if payload.get("delta") else None
        if kind == "response.output_item.added":
            # a tool call is named when its item is added (function_call, web_search_call, mcp_call ...);
            # message and reasoning items start empty, their deltas follow
            item = payload.get("item")
            item_type = item.get("type") if isinstance(item, dict) else None
            return Output.TOOL_NAME if isinstance(item_type, str) and item_type.endswith("_call") else None
        if kind in _TERMINAL:
            _apply_response(facts, payload.get("response"))
            if kind == "response.failed":
                facts.server_error = True
            else:
                facts.final = True
        elif kind == "response.created":
            _apply_response(facts, payload.get("response"))
            facts.stop_reasons.clear()
        elif kind == "error" or ("error" in payload and kind is None):
            _openai_common.apply_error(facts, payload.get("error") or payload)
        return None

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if not isinstance(body, dict):
            return
        if body.get("error") and body.get("object") != "response":
            _openai_common.apply_error(facts, body["error"])
            return
        if 200 <= status < 300:
            _apply_response(facts, body)
            if body.get("status") != "failed":
                facts.final = True


PROVIDER = OpenAIResponses()
