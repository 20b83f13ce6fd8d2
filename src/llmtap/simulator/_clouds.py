"""Claude on AWS Bedrock (``/model/{model}/invoke``, ``/invoke-with-response-stream``), Bedrock's Converse API
(``/model/{model}/converse``, ``/converse-stream``: :class:`BedrockConverseApi`, one format for every model) and
Claude on Google Vertex AI (``…/publishers/anthropic/models/{model}:rawPredict``, ``:streamRawPredict``).

Both carry the Anthropic Messages API inside another cloud's envelope, so both reuse
:class:`AnthropicMessagesApi`' events and bodies:

* **Bedrock** streams AWS event-stream binary messages (``application/vnd.amazon.eventstream``):
  each Anthropic event's JSON is base64-encoded into ``{"bytes": ..., "p": <padding>}`` in an
  ``event`` message of ``:event-type`` ``chunk``; ``message_stop`` carries
  ``amazon-bedrock-invocationMetrics``. A mid-stream error is an ``exception`` message
  (``:exception-type``, e.g. ``serviceUnavailableException`` for ``overloaded_error``). There is no
  ``ping`` (the decoder would pass it on; Bedrock does not send one). Error statuses carry
  ``{"message": ...}`` and ``x-amzn-errortype``; headers are ``x-amzn-requestid`` and, on
  non-streaming responses, ``x-amzn-bedrock-invocation-latency`` and the token-count headers. No
  rate-limit headers (Bedrock sends none).
* **Vertex** streams SSE exactly like the Anthropic API, with no ``anthropic-ratelimit-*`` or
  ``request-id`` headers; a 429 comes from Google's front end (``{"error": {"code", "message",
  "status": "RESOURCE_EXHAUSTED"}}``), other errors (529 ``overloaded_error``) from Claude.

The model is URL-decoded from the path; ``Served.model`` records it.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from typing import Any, ClassVar
from urllib.parse import unquote

from ._anthropic import AnthropicMessagesApi
from ._exchange import json_bytes, rand_id
from ._gemini import google_error_body

__all__ = [
    "BEDROCK_CONVERSE_PATH",
    "BEDROCK_PATH",
    "VERTEX_PATH",
    "BedrockConverseApi",
    "BedrockInvokeApi",
    "VertexRawPredictApi",
    "encode_event_stream_message",
]

BEDROCK_PATH = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream)$")
BEDROCK_CONVERSE_PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")
VERTEX_PATH = re.compile(
    r"^(?:/v1)?/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/([^/:]+):(rawPredict|streamRawPredict)$"
)

# Scenario.error_type -> the Bedrock exception a stream fails with
_EXCEPTIONS: dict[str, str] = {
    "overloaded_error": "serviceUnavailableException",
    "api_error": "internalServerException",
    "rate_limit_error": "throttlingException",
    "invalid_request_error": "validationException",
}
# HTTP status -> x-amzn-errortype of an error response
_ERROR_TYPES: dict[int, str] = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def _string_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value


def encode_event_stream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message (string headers only), CRCs included."""
    raw_headers = b"".join(_string_header(k, v) for k, v in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw_headers + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _sse_data(sse: bytes) -> bytes:
    """The JSON of one ``event: …\\ndata: …\\n\\n`` block."""
    for line in sse.split(b"\n"):
        if line.startswith(b"data: "):
            return line[6:]
    raise ValueError("no data line")


def _chunk(data: bytes) -> bytes:
    # Bedrock pads each chunk with a random-length "p" field (so lengths do not leak content)
    payload = json_bytes({"bytes": base64.b64encode(data).decode(), "p": rand_id(1 + len(data) % 17)})
    return encode_event_stream_message(
        {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload
    )


def _path_model(pattern: re.Pattern[str], path: str) -> str | None:
    match = pattern.match(path)
    return unquote(match.group(1)) if match else None


class BedrockInvokeApi(AnthropicMessagesApi):
    name: ClassVar[str] = "bedrock"
    _first_byte_ms: int = 1
    """When the stream's first bytes were sent, ms after the request was received (``firstByteLatency``)."""
    stream_content_type: ClassVar[str] = "application/vnd.amazon.eventstream"

    @classmethod
    def request_model(cls, path: str, body: dict[str, Any]) -> str | None:
        return _path_model(BEDROCK_PATH, path)

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return path.endswith("/invoke-with-response-stream")

    @classmethod
    def request_problem(cls, path: str, query: str, body: dict[str, Any]) -> str | None:
        if "model" in body or "stream" in body:
            return "Bedrock takes the model and the streaming choice from the URL, not the body"
        if not isinstance(body.get("anthropic_version"), str):
            return "anthropic_version is required"
        return None

    def common_headers(self) -> list[tuple[str, str]]:
        return [("x-amzn-requestid", self.ctx.request_id)]

    def error_headers(self, status: int) -> list[tuple[str, str]]:
        return [
            ("x-amzn-errortype", _ERROR_TYPES.get(status, "InternalServerException") + ":http://internal.amazon.com/")
        ]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"message": message}

    def error_status(self) -> int:
        return {"overloaded_error": 503, "rate_limit_error": 429, "invalid_request_error": 400}.get(
            self.ctx.scenario.error_type, 500
        )

    def json_headers(self) -> list[tuple[str, str]]:
        sc = self.ctx.scenario
        return [
            ("x-amzn-bedrock-invocation-latency", str(self.elapsed_ms())),
            ("x-amzn-bedrock-input-token-count", str(sc.input)),
            ("x-amzn-bedrock-output-token-count", str(sc.tokens)),
            ("x-amzn-bedrock-cache-read-input-token-count", str(sc.cache_read)),
            ("x-amzn-bedrock-cache-write-input-token-count", str(sc.cache_write)),
        ]

    def preamble_events(self) -> list[bytes]:
        self._first_byte_ms = self.elapsed_ms()  # the preamble is the body's first bytes, sent right after this
        return [_chunk(_sse_data(sse)) for sse in super().preamble_events() if not sse.startswith(b"event: ping")]

    def delta_event(self, index: int, text: str) -> bytes:
        message = _chunk(_sse_data(super().delta_event(index, text)))
        if index == self.ctx.scenario.corrupt_at:  # the payload's last byte, inside the message CRC's range
            return message[:-5] + bytes([message[-5] ^ 1]) + message[-4:]
        return message

    def error_event(self) -> bytes:
        kind = _EXCEPTIONS.get(self.ctx.scenario.error_type, "modelStreamErrorException")
        return encode_event_stream_message(
            {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
            json_bytes({"message": "The system encountered an unexpected error during processing. (simulated)"}),
        )

    def close_events(self) -> list[bytes]:
        return [_chunk(_sse_data(sse)) for sse in super().close_events()]

    def stop_events(self) -> list[bytes]:
        delta, _stop = super().stop_events()
        sc = self.ctx.scenario
        stop = {
            "type": "message_stop",
            "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": sc.input,
                "outputTokenCount": sc.tokens,
                "invocationLatency": self.elapsed_ms(),
                "firstByteLatency": self._first_byte_ms,
            },
        }
        return [_chunk(_sse_data(delta)), _chunk(json.dumps(stop, separators=(",", ":")).encode())]


_CONVERSE_STOP_REASONS: dict[str, str] = {"refusal": "content_filtered"}
"""Scenario.stop_reason -> Converse's ``stopReason`` where the two vocabularies differ."""


def _converse_event(event: str, data: dict[str, Any]) -> bytes:
    # every Converse event payload carries a random-length "p" padding field, as the chunks of InvokeModel do
    payload = json_bytes({**data, "p": rand_id(1 + len(event) % 11)})
    return encode_event_stream_message(
        {":event-type": event, ":content-type": "application/json", ":message-type": "event"}, payload
    )


class BedrockConverseApi(BedrockInvokeApi):
    """Bedrock's Converse API, one format for every model: JSON in and out, streamed as one event-stream message
    per event (``messageStart``, ``contentBlockStart`` for a tool call, ``contentBlockDelta``, ``contentBlockStop``,
    ``messageStop``, ``metadata``); errors as :class:`BedrockInvokeApi`'s."""

    name: ClassVar[str] = "bedrock-converse"

    @classmethod
    def request_model(cls, path: str, body: dict[str, Any]) -> str | None:
        return _path_model(BEDROCK_CONVERSE_PATH, path)

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return path.endswith("/converse-stream")

    @classmethod
    def request_max_tokens(cls, path: str, body: dict[str, Any]) -> int | None:
        config = body.get("inferenceConfig")
        value = config.get("maxTokens") if isinstance(config, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @classmethod
    def request_problem(cls, path: str, query: str, body: dict[str, Any]) -> str | None:
        if "modelId" in body:
            return "Converse takes the model from the URL, not the body"
        if not isinstance(body.get("messages"), list):
            return "messages is required"
        return None

    def _stop_reason(self) -> str:
        stop = self.ctx.scenario.stop_reason
        return _CONVERSE_STOP_REASONS.get(stop, stop)

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "inputTokens": sc.input,
            "outputTokens": output_tokens,
            "totalTokens": sc.input + output_tokens + sc.cache_read + sc.cache_write,
            "cacheReadInputTokens": sc.cache_read,
            "cacheWriteInputTokens": sc.cache_write,
        }

    def json_headers(self) -> list[tuple[str, str]]:
        return []

    def json_body(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": sc.expected_text()}]}},
            "stopReason": self._stop_reason(),
            "usage": self._usage(sc.tokens),
            "metrics": {"latencyMs": self.elapsed_ms()},
        }

    def preamble_events(self) -> list[bytes]:
        return [_converse_event("messageStart", {"role": "assistant"})]

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if sc.tool_call and index == 0:
            start = {"toolUse": {"toolUseId": "tooluse_" + rand_id(22), "name": "lookup"}}
            message = _converse_event("contentBlockStart", {"start": start, "contentBlockIndex": 0})
        elif sc.tool_call:
            delta = {"toolUse": {"input": sc.tool_piece(index)}}
            message = _converse_event("contentBlockDelta", {"delta": delta, "contentBlockIndex": 0})
        else:
            message = _converse_event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0})
        if index == sc.corrupt_at:  # the payload's last byte, inside the message CRC's range
            return message[:-5] + bytes([message[-5] ^ 1]) + message[-4:]
        return message

    def close_events(self) -> list[bytes]:
        stop = _converse_event("contentBlockStop", {"contentBlockIndex": 0})
        if self.ctx.scenario.tool_call:
            delta = {"toolUse": {"input": self.ctx.scenario.tool_closing()}}
            return [_converse_event("contentBlockDelta", {"delta": delta, "contentBlockIndex": 0}), stop]
        return [stop]

    def stop_events(self) -> list[bytes]:
        sc = self.ctx.scenario
        return [
            _converse_event("messageStop", {"stopReason": self._stop_reason()}),
            _converse_event("metadata", {"usage": self._usage(sc.tokens), "metrics": {"latencyMs": self.elapsed_ms()}}),
        ]


class VertexRawPredictApi(AnthropicMessagesApi):
    name: ClassVar[str] = "vertex"

    @classmethod
    def request_model(cls, path: str, body: dict[str, Any]) -> str | None:
        return _path_model(VERTEX_PATH, path)

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return path.endswith(":streamRawPredict")

    @classmethod
    def request_problem(cls, path: str, query: str, body: dict[str, Any]) -> str | None:
        if "model" in body:
            return "Vertex takes the model from the URL, not the body"
        if not isinstance(body.get("anthropic_version"), str):
            return "anthropic_version is required"
        if (body.get("stream") is True) != path.endswith(":streamRawPredict"):
            return "stream in the body and the URL's method disagree"
        return None

    def common_headers(self) -> list[tuple[str, str]]:
        return []

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        if status == 429:
            return google_error_body(429, message, self.ctx.scenario.retry_after)
        return super().error_body(status, message)
