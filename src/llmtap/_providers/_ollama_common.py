"""ollama's native API (``POST /api/chat``, ``POST /api/generate``): what its two endpoints share.

Wire facts (read from the ``ollama`` Python client's own types and decoder, 0.6.x: ``ollama/_types.py``
``BaseGenerateResponse``, ``ChatResponse``, ``GenerateResponse``, ``Message``; ``ollama/_client.py``
``Client._request``):

- A stream is NDJSON (``application/x-ndjson``): one JSON object per line, each a whole response chunk
  with ``done: false``; the last has ``done: true``, ``done_reason`` (``stop``, ``length``, ``load``,
  ``unload``), ``prompt_eval_count`` (input tokens), ``eval_count`` (output tokens) and durations in
  nanoseconds (``total_duration``, ``load_duration``, ``prompt_eval_duration``, ``eval_duration``).
- A chat chunk's output is in ``message``: ``content``, ``thinking``, ``tool_calls``; a generate chunk's in
  ``response``, ``thinking`` (and ``image`` for image-generation models).
- A non-streamed answer is one such object with ``done: true``.
- The stop reasons and the one error type (``error``) are in ``_catalog.py``.
- Errors: a non-2xx status with ``{"error": "<message>"}``; mid-stream, a line ``{"error": "<message>"}``
  (the client raises it). The message is free text: it is never recorded, ``error.type`` is ``error``.
- The request's ``stream`` defaults to true on the server; the Python client always sends it (false by
  default). The output-token cap is ``options.num_predict``.
"""

from __future__ import annotations

import json
from typing import Any

from llmtap._providers._base import Facts, Output, Provider

__all__ = ["MARKERS", "OllamaNative"]

MARKERS = (b'"done":true', b'"done": true', b'"done_reason"', b'"error"')
"""In every line the parser needs after the first output: the last one (``done: true``), an error."""

_COUNTS = (("prompt_eval_count", "input_tokens"), ("eval_count", "output_tokens"))
_NANOSECONDS = 1e9


def _chat_output(payload: dict[str, Any]) -> Output | None:
    message = payload.get("message")
    if not isinstance(message, dict):
        return None
    if message.get("thinking"):
        return Output.REASONING
    if message.get("content"):
        return Output.TEXT
    if message.get("tool_calls"):
        return Output.TOOL_NAME
    return None


def _generate_output(payload: dict[str, Any]) -> Output | None:
    if payload.get("thinking"):
        return Output.REASONING
    if payload.get("response"):
        return Output.TEXT
    if payload.get("image"):
        return Output.OTHER
    return None


class OllamaNative(Provider):
    """One endpoint of ollama's native API; :attr:`chat` says which (its output is in ``message``)."""

    name = "ollama"
    markers = MARKERS
    input_includes_cache = True  # ollama reports no cache counts
    chat: bool = True

    def _apply(self, facts: Facts, payload: dict[str, Any]) -> Output | None:
        if payload.get("error"):
            facts.server_error = True
            facts.error_type = "error"
            return None
        model = payload.get("model")
        if isinstance(model, str):
            facts.response_model = model
        output = _chat_output(payload) if self.chat else _generate_output(payload)
        if payload.get("done") is True:
            reason = payload.get("done_reason")
            if isinstance(reason, str) and reason:
                facts.set_stop_reason(reason)
            facts.take_counts(payload, _COUNTS)
            total = payload.get("total_duration")
            if total is not None and (total := facts.count(total)) is not None:
                facts.report_time("total_duration", total / _NANOSECONDS)
            facts.final = True
        return output

    def on_event(self, facts: Facts, event: bytes | None, data: bytes) -> Output | None:
        """One NDJSON line (``event`` is always ``None``)."""
        payload = json.loads(data)
        return self._apply(facts, payload) if isinstance(payload, dict) else None

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        # an error status says it all (its body's message is free text); a 2xx body is one whole answer
        if isinstance(body, dict) and 200 <= status < 300:
            self._apply(facts, body)
