"""Bedrock's Converse API: ``POST /model/{model}/converse`` and ``/model/{model}/converse-stream`` on
``bedrock-runtime.<region>.amazonaws.com`` (boto3's ``converse`` / ``converse_stream``), for every model.

Wire facts this parser relies on (botocore's ``bedrock-runtime`` service model, ``2023-09-30``):

- The model is the URL-quoted path segment after ``/model/`` (a model id, an inference profile id or an
  ARN); the body carries neither model nor stream.
- A non-streaming success is JSON: ``stopReason``, ``usage`` (``inputTokens``, ``outputTokens``,
  ``cacheReadInputTokens``, ``cacheWriteInputTokens``; the input count leaves the cache out: ``totalTokens`` is
  the sum of all four) and ``metrics.latencyMs``. An error is a non-2xx status whose type is in
  ``x-amzn-errortype`` (``ThrottlingException:http://…``) or the body's ``__type``, as botocore reads it.
- A stream is ``application/vnd.amazon.eventstream``: ``event`` messages whose ``:event-type`` names the
  event and whose payload is its JSON (with a ``p`` padding field): ``messageStart`` (the role only),
  ``contentBlockStart`` (a tool call is named here: ``start.toolUse``), ``contentBlockDelta`` (``delta.text``,
  ``delta.reasoningContent.text`` / ``redactedContent`` / ``signature``, ``delta.toolUse.input``),
  ``contentBlockStop``, ``messageStop`` (``stopReason``) and, last, ``metadata`` (``usage``,
  ``metrics.latencyMs``). A failure mid-stream is an ``exception`` message whose ``:exception-type`` is
  ``internalServerException``, ``modelStreamErrorException``, ``validationException``, ``throttlingException``
  or ``serviceUnavailableException``.

The stream's terminal event is ``metadata`` after ``messageStop``. As for every provider (the decision table,
``_core/decision.py``), a stream the client stops reading after ``messageStop`` (its stop reason) is
``completed``, and one whose body the server ends there, without ``metadata``, is ``incomplete``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmtap._providers._base import Facts, Output, Provider, model_in_path
from llmtap._providers._catalog import BEDROCK_CONVERSE
from llmtap._providers.bedrock import HEADERS

__all__ = ["EXCEPTION", "PROVIDER", "BedrockConverse"]

# the model segment may be decoded already (httpx's and yarl's paths are): an ARN's "/" is then in it
_PATH = re.compile(r"/model/(.+)/(converse|converse-stream)$")
EXCEPTION = b":exception"
"""The event :meth:`BedrockConverse.event_from_frame` makes of an ``exception`` / ``error`` message (its data:
the exception's type)."""

_USAGE = (
    ("inputTokens", "input_tokens"),
    ("outputTokens", "output_tokens"),
    ("cacheReadInputTokens", "cache_read_tokens"),
    ("cacheWriteInputTokens", "cache_write_tokens"),
)


def _apply_usage(facts: Facts, usage: Any) -> None:
    if isinstance(usage, dict):
        facts.take_counts(usage, _USAGE)


def _apply_metrics(facts: Facts, metrics: Any) -> None:
    """``metrics.latencyMs``: the server's time for the whole call."""
    latency = metrics.get("latencyMs") if isinstance(metrics, dict) else None
    if type(latency) is int and 0 <= latency < 1 << 53:
        facts.report_time("latencyMs", latency / 1000.0)


def _delta_output(delta: Any) -> Output | None:
    if not isinstance(delta, dict):
        return None
    if delta.get("text"):
        return Output.TEXT
    reasoning = delta.get("reasoningContent")
    if isinstance(reasoning, dict):  # a signature alone carries no output
        return Output.REASONING if reasoning.get("text") or reasoning.get("redactedContent") else None
    tool = delta.get("toolUse")
    if isinstance(tool, dict):
        return Output.TOOL_ARGUMENTS if tool.get("input") else None
    if delta.get("toolResult") or delta.get("image"):
        return Output.OTHER
    return None


def _start_output(start: Any) -> Output | None:
    if not isinstance(start, dict):
        return None
    if isinstance(start.get("toolUse"), dict):
        return Output.TOOL_NAME
    if start.get("toolResult") or start.get("image"):
        return Output.OTHER
    return None


def error_code(value: str) -> str:
    """An AWS error code as botocore reads it from ``__type`` (``aws.protocols#ThrottlingException``) or
    ``x-amzn-errortype`` (``ThrottlingException:http://…``): after a ``#``, before a ``:``."""
    return value.rpartition("#")[2].partition(":")[0]


class BedrockConverse(Provider):
    """Bedrock's Converse and ConverseStream API (any model: one format for all)."""

    name = "aws.bedrock"
    operation = "chat"
    path_suffixes = BEDROCK_CONVERSE.path_suffixes
    headers = HEADERS
    # every event's type is in its headers, so past the first token a run of messages with the header block of
    # the last one read (content deltas) is skipped on its framing alone, whatever the payload
    quiet_frames: tuple[bytes, ...] = (b"{",)
    input_includes_cache = False
    stop_reasons = BEDROCK_CONVERSE.stop_reasons
    error_types = BEDROCK_CONVERSE.error_types

    def accepts_path(self, path: str) -> bool:
        return _PATH.search(path) is not None

    def model_from_path(self, path: str) -> str | None:
        return model_in_path(_PATH, path)

    def stream_from_path(self, path: str) -> bool | None:
        return path.endswith("/converse-stream")

    def event_from_frame(self, headers: dict[str, str], payload: bytes) -> tuple[bytes | None, bytes] | None:
        kind = headers.get(":message-type")
        if kind == "event":
            event = headers.get(":event-type")
            return None if event is None else (event.encode(), payload)
        if kind == "exception":
            return EXCEPTION, headers.get(":exception-type", "").encode()
        if kind == "error":
            return EXCEPTION, headers.get(":error-code", "").encode()
        return None

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if event == EXCEPTION:
            facts.server_error = True
            facts.error_type = data.decode("utf-8", "replace") or "error"
            return None
        if event in (b"contentBlockStop", b"messageStart") or not data:
            return None
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        if event == b"contentBlockDelta":
            return _delta_output(payload.get("delta"))
        if event == b"contentBlockStart":
            return _start_output(payload.get("start"))
        if event == b"messageStop":
            stop = payload.get("stopReason")
            if isinstance(stop, str):
                facts.set_stop_reason(stop)
        elif event == b"metadata":
            _apply_usage(facts, payload.get("usage"))
            _apply_metrics(facts, payload.get("metrics"))
            if facts.stop_reasons:  # after messageStop: the last event of a stream
                facts.final = True
        return None

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if not isinstance(body, dict):
            return
        if 200 <= status < 300:
            stop = body.get("stopReason")
            if isinstance(stop, str):
                facts.set_stop_reason(stop)
            _apply_usage(facts, body.get("usage"))
            _apply_metrics(facts, body.get("metrics"))
            facts.final = True
            return
        kind = body.get("__type") or body.get("code")
        if isinstance(kind, str) and (code := error_code(kind)):
            facts.error_type = code


PROVIDER = BedrockConverse()
