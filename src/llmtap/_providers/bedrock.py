"""Claude on AWS Bedrock (``AnthropicBedrock``): ``POST /model/{model}/invoke`` and
``/model/{model}/invoke-with-response-stream`` on ``bedrock-runtime.<region>.amazonaws.com``.

Wire facts this parser relies on (from the ``anthropic`` SDK's Bedrock client and decoder and the
Bedrock runtime API reference):

- The model is the URL-quoted path segment after ``/model/`` (a model id, an inference profile id or
  an ARN); the body carries neither ``model`` nor ``stream``. Other vendors' models on the same paths
  speak other formats and are not observed (see :meth:`AnthropicBedrock.accepts_path`).
- A non-streaming success body is an Anthropic Messages ``message``; an error is a non-2xx status
  with ``{"message": ...}`` and its type in ``x-amzn-errortype``.
- A stream is ``application/vnd.amazon.eventstream`` (framed by :mod:`llmtap._core.eventstream`): each
  ``event`` message of ``:event-type`` ``chunk`` carries ``{"bytes": "<base64>", "p": "<padding>"}``
  whose decoded bytes are one Anthropic streaming event (the same JSON as an SSE ``data:`` line;
  ``message_stop`` adds ``amazon-bedrock-invocationMetrics``, whose ``invocationLatency`` (ms) is the
  attempt's server time). A failure mid-stream is a message of
  ``:message-type`` ``exception`` (``:exception-type`` e.g. ``throttlingException``) or ``error``
  (``:error-code``); the SDK raises it as an ``error`` event, and so it is read here.
- Response headers: ``x-amzn-requestid``, ``x-amzn-bedrock-invocation-latency`` (ms) and, on errors,
  ``x-amzn-errortype`` (``ThrottlingException:http://…``: the part before ``:`` is the ``error.type``). The
  ``x-amzn-bedrock-*-token-count`` headers repeat the body's usage on non-streaming responses only,
  so the body is what is read (as the SDK does). Bedrock sends no rate-limit headers.
"""

from __future__ import annotations

import binascii
import json
import re
from urllib.parse import unquote

from llmtap._providers._base import Facts, Header, Output, model_in_path
from llmtap._providers._catalog import BEDROCK
from llmtap._providers.anthropic import QUIET_DATA, AnthropicMessages

__all__ = ["HEADERS", "PROVIDER", "AnthropicBedrock"]

# the model segment may be decoded already (httpx's and yarl's paths are): an ARN's "/" is then in it
_PATH = re.compile(r"/model/(.+)/(invoke|invoke-with-response-stream)$")
_BYTES = re.compile(rb'"bytes"\s*:\s*"([A-Za-z0-9+/=]*)"')
_METRICS = b"amazon-bedrock-invocationMetrics"

HEADERS: dict[bytes, tuple[Header, str]] = {
    b"x-amzn-requestid": (Header.REQUEST_ID, ""),
    b"x-amzn-bedrock-invocation-latency": (Header.SERVER_TIME_MS, ""),
    b"x-amzn-errortype": (Header.ERROR_TYPE, ""),
}


def _quiet_chunk(data: bytes) -> bytes:
    """The beginning of every compact chunk payload whose decoded event begins with ``data``: its base64
    encoding is a prefix of theirs when ``data`` fills whole 3-byte groups.

    Raises:
        ValueError: ``data`` does not fill whole groups (its last characters would depend on what follows).
    """
    if len(data) % 3:
        raise ValueError(f"a quiet prefix must be a multiple of 3 bytes long: {data!r}")
    return b'{"bytes":"' + binascii.b2a_base64(data, newline=False)


def _error(kind: str) -> tuple[bytes, bytes]:
    return b"error", json.dumps({"type": "error", "error": {"type": kind or "error"}}).encode()


class AnthropicBedrock(AnthropicMessages):
    """Anthropic Messages events inside Bedrock's invoke API."""

    name = "aws.bedrock"
    path_suffixes = BEDROCK.path_suffixes
    headers = HEADERS
    # a content delta, as Bedrock wraps it (``{"bytes":"eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIs...``): past the
    # first token most messages are skipped on this prefix, their base64 never decoded
    quiet_frames: tuple[bytes, ...] = (_quiet_chunk(QUIET_DATA),)
    error_types = BEDROCK.error_types

    def accepts_path(self, path: str) -> bool:
        # Bedrock's invoke API serves every vendor's models in their own formats (clients such as
        # LiteLLM call them over httpx): only Claude is read. Model and inference-profile ids name the
        # vendor (``anthropic.claude-…``, ``us.anthropic.claude-…``); an ARN may be opaque (application
        # inference profiles) and is taken as Claude, the only model the anthropic SDK sends there.
        match = _PATH.search(path)
        if match is None:
            return False
        model = unquote(match.group(1))
        return model.startswith("arn:") or "anthropic." in model or "claude" in model

    def model_from_path(self, path: str) -> str | None:
        return model_in_path(_PATH, path)

    def stream_from_path(self, path: str) -> bool | None:
        return path.endswith("/invoke-with-response-stream")

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        output = super().on_event(facts, event, data)
        if output is None and _METRICS in data:  # the last chunk (message_stop): the server's own latency
            payload = json.loads(data)
            metrics = payload.get(_METRICS.decode()) if isinstance(payload, dict) else None
            if isinstance(metrics, dict):
                latency = metrics.get("invocationLatency")
                if type(latency) is int and 0 <= latency < 1 << 53:
                    facts.report_time("invocationLatency", latency / 1000.0)
                latency = metrics.get("firstByteLatency")
                if type(latency) is int and 0 <= latency < 1 << 53:
                    facts.report_time("firstByteLatency", latency / 1000.0, processing=False)
        return output

    def event_from_frame(self, headers: dict[str, str], payload: bytes) -> tuple[bytes | None, bytes] | None:
        kind = headers.get(":message-type")
        if kind == "event":
            if headers.get(":event-type") != "chunk":
                return None
            match = _BYTES.search(payload)
            if match is None:  # not the compact form: a full parse (e.g. an escaped "\/")
                chunk = json.loads(payload)
                data = chunk.get("bytes") if isinstance(chunk, dict) else None
                if not isinstance(data, str):
                    raise ValueError("a Bedrock chunk without bytes")
                encoded = data.encode("ascii")
            else:
                encoded = match.group(1)
            try:
                return None, binascii.a2b_base64(encoded, strict_mode=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("a Bedrock chunk with invalid base64") from exc
        if kind == "exception":
            return _error(headers.get(":exception-type", ""))
        if kind == "error":
            return _error(headers.get(":error-code", ""))
        return None


PROVIDER = AnthropicBedrock()
