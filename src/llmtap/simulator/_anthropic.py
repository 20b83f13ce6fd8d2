"""Anthropic Messages API (``POST /v1/messages``) wire format."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar

from ._exchange import Api, Context, json_bytes, rand_id
from ._scenario import FAIL_STATUSES

__all__ = ["AnthropicMessagesApi", "anthropic_error_body", "rfc3339"]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def anthropic_error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


def _sse(event: str, data: dict[str, Any], pad: int = 0) -> bytes:
    payload = json_bytes(data)
    if pad:
        # The real API pads some data lines with spaces before the closing brace.
        payload = payload[:-1] + b" " * pad + b"}"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


class AnthropicMessagesApi(Api):
    name: ClassVar[str] = "anthropic"
    default_model: ClassVar[str] = "claude-sonnet-4-5"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.message_id = "msg_01" + rand_id(22)

    def common_headers(self) -> list[tuple[str, str]]:
        rl = self.ctx.ratelimit
        reset = rfc3339(rl.reset_at)
        # the API's Envoy front proxy reports its upstream's time to the headers (the real API sends it too)
        hs: list[tuple[str, str]] = [
            ("request-id", self.ctx.request_id),
            ("x-envoy-upstream-service-time", str(self.elapsed_ms())),
        ]
        for kind, limit, remaining in (
            ("requests", rl.requests_limit, rl.requests_remaining),
            ("tokens", rl.tokens_limit, rl.tokens_remaining),
            ("input-tokens", rl.input_tokens_limit, rl.input_tokens_remaining),
            ("output-tokens", rl.output_tokens_limit, rl.output_tokens_remaining),
        ):
            hs.append((f"anthropic-ratelimit-{kind}-limit", str(limit)))
            hs.append((f"anthropic-ratelimit-{kind}-remaining", str(remaining)))
            hs.append((f"anthropic-ratelimit-{kind}-reset", reset))
        return hs

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return anthropic_error_body(FAIL_STATUSES.get(status, "api_error"), message, self.ctx.request_id)

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "input_tokens": sc.input,
            "cache_creation_input_tokens": sc.cache_write,
            "cache_read_input_tokens": sc.cache_read,
            "cache_creation": {"ephemeral_5m_input_tokens": sc.cache_write, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def json_body(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.ctx.model,
            "content": [{"type": "text", "text": sc.expected_text()}],
            "stop_reason": sc.stop_reason,
            "stop_sequence": "###" if sc.stop_reason == "stop_sequence" else None,
            "usage": self._usage(sc.tokens),
        }

    def preamble_events(self) -> list[bytes]:
        message: dict[str, Any] = {
            "model": self.ctx.model,
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(1),
        }
        if self.ctx.scenario.tool_call:  # the tool_use block starts with delta 0
            return [
                _sse("message_start", {"type": "message_start", "message": message}, pad=10),
                _sse("ping", {"type": "ping"}),
            ]
        return [
            _sse("message_start", {"type": "message_start", "message": message}, pad=10),
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                pad=14,
            ),
            _sse("ping", {"type": "ping"}),
        ]

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if sc.tool_call and index == 0:
            block = {"type": "tool_use", "id": "toolu_" + self.message_id[4:], "name": "lookup", "input": {}}
            return _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        if sc.tool_call:
            return self._json_delta(sc.tool_piece(index))
        data = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return _sse("content_block_delta", data, pad=(8 if index % 3 == 0 else 0))

    def error_event(self) -> bytes:
        sc = self.ctx.scenario
        message = "Overloaded" if sc.error_type == "overloaded_error" else "Internal server error"
        body = {"type": "error", "error": {"type": sc.error_type, "message": message}}
        # Exactly as the real API sends it: compact JSON, no padding.
        return b"event: error\ndata: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    def _json_delta(self, piece: str) -> bytes:
        data = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}
        return _sse("content_block_delta", data)

    def close_events(self) -> list[bytes]:
        stop = _sse("content_block_stop", {"type": "content_block_stop", "index": 0}, pad=12)
        if self.ctx.scenario.tool_call:
            return [self._json_delta(self.ctx.scenario.tool_closing()), stop]
        return [stop]

    def stop_events(self) -> list[bytes]:
        sc = self.ctx.scenario
        usage = self._usage(sc.tokens)
        del usage["cache_creation"], usage["service_tier"]
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": sc.stop_reason,
                "stop_sequence": "###" if sc.stop_reason == "stop_sequence" else None,
            },
            "usage": usage,
        }
        return [
            _sse("message_delta", delta, pad=10),
            _sse("message_stop", {"type": "message_stop"}, pad=11),
        ]
