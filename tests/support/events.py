"""The output-event table every provider fills (``tests/test_providers.py``'s first-token rule, and the
Bedrock and Vertex event streams that carry Anthropic's events, ``tests/test_eventstream.py``): per provider,
events of each output kind and events with none, its terminal events, and how an event is framed."""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers import anthropic, cohere, gemini, ollama_chat, openai_chat, openai_responses
from llmtap._providers._base import Provider

__all__ = ["KINDS", "TABLE", "TERMINAL", "Event", "data", "sse"]

Event = tuple[str | None, dict[str, Any] | str]

KINDS = ("text", "reasoning", "tool_name", "tool_arguments", "none")
"""The rows every provider fills: an output kind, or ``none`` (events that carry no output)."""


def _chat(delta: dict[str, Any], **extra: Any) -> Event:
    return None, {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **extra}


def _gemini(*parts: dict[str, Any], **extra: Any) -> Event:
    return None, {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "index": 0}], **extra}


def _responses(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def _anthropic(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def _cohere(kind: str, message: dict[str, Any] | None = None, **fields: Any) -> Event:
    return kind, {"type": kind, **({} if message is None else {"delta": {"message": message}}), **fields}


def _ollama(message: dict[str, Any] | None, **extra: Any) -> Event:
    chunk: dict[str, Any] = {"model": "m", "created_at": "2026-01-01T00:00:00.000000001Z"}
    if message is not None:
        chunk["message"] = {"role": "assistant", **message}
    return None, {**chunk, "done": False, **extra}


TABLE: dict[Provider, dict[str, list[Event]]] = {
    anthropic.PROVIDER: {
        "text": [
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": "Hi"}),
        ],
        "reasoning": [
            _anthropic("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
            _anthropic("content_block_start", index=0, content_block={"type": "redacted_thinking", "data": "x"}),
        ],
        "tool_name": [
            _anthropic("content_block_start", index=1, content_block={"type": "tool_use", "id": "t", "name": "f"}),
            _anthropic("content_block_start", index=1, content_block={"type": "server_tool_use", "name": "web"}),
        ],
        "tool_arguments": [
            _anthropic("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"a'}),
        ],
        "none": [
            ("ping", {"type": "ping"}),
            _anthropic("message_start", message={"id": "msg", "model": "m", "usage": {"input_tokens": 3}}),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _anthropic("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": ""}),
            _anthropic("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
            _anthropic("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
            _anthropic("content_block_stop", index=0),
            _anthropic("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        ],
    },
    openai_chat.PROVIDER: {
        "text": [_chat({"content": "Hi"}), _chat({"refusal": "No"})],
        "reasoning": [_chat({"reasoning_content": "hmm"}), _chat({"reasoning": "hmm"})],
        "tool_name": [
            _chat({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "f"}}]}),
            _chat({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]}),
        ],
        "tool_arguments": [_chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]})],
        "none": [
            _chat({"role": "assistant", "content": ""}),
            _chat({"role": "assistant", "content": None, "refusal": None}),
            _chat({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
            (None, {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            _chat({}, usage=None),
        ],
    },
    openai_responses.PROVIDER: {
        "text": [
            _responses("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Hi"),
            _responses("response.refusal.delta", item_id="m", delta="No"),
        ],
        "reasoning": [
            _responses("response.reasoning_summary_text.delta", item_id="r", summary_index=0, delta="hmm"),
            _responses("response.reasoning_text.delta", item_id="r", delta="hmm"),
        ],
        "tool_name": [
            _responses(
                "response.output_item.added",
                output_index=1,
                item={"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": ""},
            ),
            _responses("response.output_item.added", output_index=0, item={"type": "web_search_call", "id": "w"}),
        ],
        "tool_arguments": [
            _responses("response.function_call_arguments.delta", item_id="fc", output_index=1, delta='{"a'),
        ],
        "none": [
            _responses("response.created", response={"id": "r", "model": "m", "status": "in_progress"}),
            _responses("response.in_progress", response={"id": "r", "status": "in_progress"}),
            _responses("response.output_item.added", output_index=0, item={"type": "message", "content": []}),
            _responses("response.output_item.added", output_index=0, item={"type": "reasoning", "summary": []}),
            _responses("response.content_part.added", item_id="m", part={"type": "output_text", "text": ""}),
            _responses("response.function_call_arguments.delta", item_id="fc", delta=""),
            _responses("response.function_call_arguments.done", item_id="fc", arguments="{}"),
        ],
    },
    gemini.PROVIDER: {
        "text": [_gemini({"text": "Hi"})],
        "reasoning": [_gemini({"text": "hmm", "thought": True})],
        "tool_name": [_gemini({"functionCall": {"name": "f", "args": {"a": 1}}})],
        # a Gemini function call arrives whole: its name and arguments in one part
        "tool_arguments": [_gemini({"functionCall": {"name": "f", "args": {}}}, {"text": ""})],
        "none": [
            _gemini({"text": ""}),
            _gemini({"thoughtSignature": "c2ln"}),
            (None, {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}, "modelVersion": "m"}),
            (None, {"candidates": [{"index": 0}]}),
        ],
    },
    cohere.PROVIDER: {
        "text": [
            _cohere("content-delta", {"content": {"text": "Hi"}}, index=0),
            _cohere("content-start", {"content": {"type": "text", "text": "Hi"}}, index=0),
        ],
        "reasoning": [
            _cohere("content-delta", {"content": {"thinking": "hmm"}}, index=0),
            _cohere("tool-plan-delta", {"tool_plan": "I will"}),
        ],
        "tool_name": [
            _cohere(
                "tool-call-start",
                {"tool_calls": {"id": "t", "type": "function", "function": {"name": "f", "arguments": ""}}},
                index=0,
            ),
        ],
        "tool_arguments": [_cohere("tool-call-delta", {"tool_calls": {"function": {"arguments": '{"a'}}}, index=0)],
        "none": [
            _cohere("message-start", {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": []}, id="m"),
            _cohere("content-start", {"content": {"type": "text", "text": ""}}, index=0),
            _cohere("content-delta", {"content": {"text": ""}}, index=0),
            _cohere("content-end", index=0),
            _cohere("tool-call-end", index=0),
            _cohere("citation-start", {"citations": {"start": 0, "end": 2, "text": "Hi"}}, index=0),
        ],
    },
    # NDJSON lines (each event below is framed as one line, application/x-ndjson)
    ollama_chat.PROVIDER: {
        "text": [_ollama({"content": "Hi"})],
        "reasoning": [_ollama({"content": "", "thinking": "hmm"})],
        "tool_name": [_ollama({"content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]})],
        # an ollama tool call arrives whole: its name and arguments in one chunk
        "tool_arguments": [_ollama({"tool_calls": [{"function": {"name": "f", "arguments": {}}}]})],
        "none": [
            _ollama({"content": ""}),
            _ollama({"content": "", "thinking": ""}),
            _ollama({"content": "", "tool_calls": []}),
            _ollama(None),
        ],
    },
}

# The provider's terminal events: a final one, and an in-band error. The attempt ends when one is parsed.
TERMINAL: dict[Provider, tuple[Event, Event]] = {
    anthropic.PROVIDER: (
        _anthropic("message_stop"),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    ),
    openai_chat.PROVIDER: ((None, "[DONE]"), (None, {"error": {"type": "server_error", "message": "x"}})),
    openai_responses.PROVIDER: (
        _responses("response.completed", response={"id": "r", "status": "completed", "output": []}),
        _responses("response.failed", response={"id": "r", "status": "failed", "error": {"code": "server_error"}}),
    ),
    gemini.PROVIDER: (
        (None, {"candidates": [{"index": 0, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3}}),
        (None, {"error": {"code": 503, "message": "x", "status": "UNAVAILABLE"}}),
    ),
    cohere.PROVIDER: (
        _cohere("message-end", None, delta={"finish_reason": "COMPLETE", "usage": {"tokens": {"output_tokens": 1}}}),
        _cohere("message-end", None, delta={"finish_reason": "ERROR", "error": "overloaded"}),
    ),
    ollama_chat.PROVIDER: (
        _ollama({"content": ""}, done=True, done_reason="stop", prompt_eval_count=3, eval_count=1),
        (None, {"error": "model runner has unexpectedly stopped"}),
    ),
}


def data(payload: dict[str, Any] | str) -> bytes:
    """An event's payload as its data line carries it (JSON, or the literal text such as ``[DONE]``)."""
    return (payload if isinstance(payload, str) else json.dumps(payload)).encode()


def sse(event: Event) -> bytes:
    """``event`` as one server-sent event."""
    name, payload = event
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    return head + b"data: " + data(payload) + b"\n\n"
