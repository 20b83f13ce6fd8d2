"""Google Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` (Gemini API and Vertex AI).

Wire facts: streamed chunks are ``data:`` lines (often CRLF-framed) each holding a
``GenerateContentResponse``; there is no terminal event, the chunk carrying ``finishReason`` is the
last one and it carries the final ``usageMetadata`` (``promptTokenCount`` incl.
``cachedContentTokenCount``; ``candidatesTokenCount`` excludes ``thoughtsTokenCount``, so output is
their sum and reasoning the latter). Errors are ``{"error":{"code","message","status"}}``. The model
is in the URL path. The API key header (``x-goog-api-key``) is never read, like every request header.
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers._base import MAX_COUNT, Facts, Output, Provider
from llmtap._providers._catalog import GEMINI

__all__ = ["PROVIDER", "Gemini"]


_OTHER_PARTS = ("inlineData", "executableCode", "codeExecutionResult", "fileData")


def _output(candidate: dict[str, Any]) -> Output | None:
    """What generated output a candidate's parts carry (a thought signature alone carries none)."""
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return None
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("text"):
            return Output.REASONING if part.get("thought") is True else Output.TEXT
        if part.get("functionCall"):
            return Output.TOOL_NAME
        if any(part.get(key) for key in _OTHER_PARTS):
            return Output.OTHER
    return None


def _apply(facts: Facts, payload: dict[str, Any]) -> Output | None:
    if payload.get("error"):
        facts.server_error = True
        error = payload["error"]
        status = error.get("status") if isinstance(error, dict) else None
        facts.error_type = status if isinstance(status, str) and status else "error"
        return None
    output = None
    ident = payload.get("responseId")
    if isinstance(ident, str):
        facts.response_id = ident
    model = payload.get("modelVersion")
    if isinstance(model, str):
        facts.response_model = model
    candidates = payload.get("candidates")
    if isinstance(candidates, list):
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, dict):
                continue
            if output is None:
                output = _output(candidate)
            reason = candidate.get("finishReason")
            if isinstance(reason, str):
                index = candidate.get("index")
                facts.set_stop_reason(reason, index if isinstance(index, int) else position)
                facts.final = True
    feedback = payload.get("promptFeedback")
    if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
        facts.set_stop_reason(feedback["blockReason"])
        facts.final = True
    usage = payload.get("usageMetadata")
    if isinstance(usage, dict):
        prompt = facts.count(usage.get("promptTokenCount"))
        if prompt is not None:
            facts.input_tokens = prompt
        candidates_tokens = facts.count(usage.get("candidatesTokenCount"))
        thoughts = facts.count(usage.get("thoughtsTokenCount"))
        if candidates_tokens is not None or thoughts is not None:
            total = (candidates_tokens or 0) + (thoughts or 0)
            facts.output_tokens = total if total <= MAX_COUNT else facts.count(total)
        if thoughts is not None:
            facts.reasoning_tokens = thoughts
        cached = facts.count(usage.get("cachedContentTokenCount"))
        if cached is not None:
            facts.cache_read_tokens = cached
    return output


class Gemini(Provider):
    name = "gcp.gemini"
    operation = "generate_content"
    markers = (b'"finishReason"', b'"error"', b'"blockReason"')
    input_includes_cache = True
    path_suffixes = GEMINI.path_suffixes
    stop_reasons = GEMINI.stop_reasons
    error_types = GEMINI.error_types

    def model_from_path(self, path: str) -> str | None:
        head, _, _ = path.rpartition(":")
        _, _, model = head.rpartition("/models/")
        return model or None

    def stream_from_path(self, path: str) -> bool | None:
        return path.endswith(":streamGenerateContent")

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        if not data:
            return None
        payload = json.loads(data)
        return _apply(facts, payload) if isinstance(payload, dict) else None

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        # non-streaming: one object; streaming without alt=sse: a JSON array of them
        items = body if isinstance(body, list) else [body]
        for item in items:
            if isinstance(item, dict):
                _apply(facts, item)
        if 200 <= status < 300 and not facts.server_error:
            facts.final = True


PROVIDER = Gemini()
