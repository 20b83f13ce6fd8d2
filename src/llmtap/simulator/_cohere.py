"""Cohere Chat v2 (``POST /v2/chat``), streaming and not.

Wire format as the ``cohere`` SDK (7.x, ``cohere/v2/types/v2chat_stream_response.py``) reads it:
named SSE events whose ``data`` carries the same ``type`` — ``message-start``, ``content-start``,
``content-delta`` (``delta.message.content.text``), ``content-end``, then ``message-end`` with
``delta.finish_reason`` (``COMPLETE``, ``MAX_TOKENS``, ``STOP_SEQUENCE``, ``TOOL_CALL``, ``ERROR``,
``TIMEOUT``) and ``delta.usage`` (``billed_units`` and ``tokens``, ``input_tokens`` /
``output_tokens``; ``cached_tokens``). An in-stream failure is a ``message-end`` with
``finish_reason: ERROR`` and ``delta.error``. Error bodies are ``{"id", "message"}``.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from ._exchange import Api, Context, json_bytes

__all__ = ["CohereChatApi"]

_FINISH = {
    "end_turn": "COMPLETE",
    "stop_sequence": "STOP_SEQUENCE",
    "max_tokens": "MAX_TOKENS",
    "tool_use": "TOOL_CALL",
    "refusal": "COMPLETE",
}


class CohereChatApi(Api):
    name: ClassVar[str] = "cohere-chat"
    default_model: ClassVar[str] = "command-a-03-2025"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.message_id = str(uuid.uuid4())

    def input_tokens(self) -> int:
        return self.ctx.scenario.input + self.ctx.scenario.cache_read  # cached tokens are part of the input

    def common_headers(self) -> list[tuple[str, str]]:
        return [("x-debug-trace-id", self.ctx.request_id), ("num_tokens", str(self.input_tokens()))]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"id": str(uuid.uuid4()), "message": message}

    def _usage(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        tokens = {"input_tokens": self.input_tokens(), "output_tokens": sc.tokens}
        return {"billed_units": dict(tokens), "tokens": tokens, "cached_tokens": sc.cache_read}

    def json_body(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "id": self.message_id,
            "message": {"role": "assistant", "content": [{"type": "text", "text": sc.expected_text()}]},
            "finish_reason": _FINISH[sc.stop_reason],
            "usage": self._usage(),
        }

    def _ev(self, kind: str, data: dict[str, Any]) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + json_bytes({"type": kind, **data}) + b"\n\n"

    def preamble_events(self) -> list[bytes]:
        message = {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
        if self.ctx.scenario.tool_call:  # the tool call starts with delta 0
            return [self._ev("message-start", {"id": self.message_id, "delta": {"message": message}})]
        return [
            self._ev("message-start", {"id": self.message_id, "delta": {"message": message}}),
            self._ev("content-start", {"index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}}),
        ]

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if sc.tool_call and index == 0:
            function = {"name": "lookup", "arguments": ""}
            call = {"id": "lookup_" + self.message_id[:8], "type": "function", "function": function}
            return self._ev("tool-call-start", {"index": 0, "delta": {"message": {"tool_calls": call}}})
        if sc.tool_call:
            return self._arguments(sc.tool_piece(index))
        return self._ev("content-delta", {"index": 0, "delta": {"message": {"content": {"text": text}}}})

    def error_event(self) -> bytes:
        message = "The model is overloaded. (simulated)"
        return self._ev("message-end", {"delta": {"error": message, "finish_reason": "ERROR"}})

    def _arguments(self, piece: str) -> bytes:
        calls = {"function": {"arguments": piece}}
        return self._ev("tool-call-delta", {"index": 0, "delta": {"message": {"tool_calls": calls}}})

    def close_events(self) -> list[bytes]:
        if self.ctx.scenario.tool_call:
            return [self._arguments(self.ctx.scenario.tool_closing()), self._ev("tool-call-end", {"index": 0})]
        return [self._ev("content-end", {"index": 0})]

    def stop_events(self) -> list[bytes]:
        finish = _FINISH[self.ctx.scenario.stop_reason]
        return [self._ev("message-end", {"delta": {"finish_reason": finish, "usage": self._usage()}})]
