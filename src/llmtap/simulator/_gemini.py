"""Google Gemini API: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse`` (``/v1/`` too).

Wire facts mirrored here: the model is in the URL path (there is no ``model`` or ``stream`` field
in the body); the streamed variant is SSE only with ``?alt=sse``, every event is one
``data: {GenerateContentResponse}`` line framed with CRLF (``\\r\\n\\r\\n``), there is no ``[DONE]``
and no terminal event: the chunk carrying ``finishReason`` is the last one and it carries the
final ``usageMetadata``. Earlier chunks repeat the prompt side of the usage only (as
``gemini-2.5`` models do): ``promptTokenCount`` (which includes ``cachedContentTokenCount``),
``thoughtsTokenCount`` (thinking precedes the first text) and ``totalTokenCount``.
``candidatesTokenCount`` excludes ``thoughtsTokenCount``. Errors are
``{"error":{"code","message","status"}}``, also as an in-stream ``data:`` chunk.

Simulator specifics:

* :class:`Served` ``input_tokens`` is ``promptTokenCount`` (``input + cache_read``) and
  ``output_tokens`` is ``candidatesTokenCount + thoughtsTokenCount`` (``tokens + reasoning``).
* google-genai numbers no attempt in a header (it does not retry by default; ``HttpRetryOptions``
  resends byte-identical requests), so ``fail`` counts the requests of the same path, model and
  scenario the simulator has seen (:attr:`Scenario.fail`).
* ``fail_status=529`` (the Scenario default) has no Google equivalent: it is sent as HTTP 529
  with status ``UNAVAILABLE``; use ``fail_status=503`` for what Gemini really sends when overloaded.
* ``:streamGenerateContent`` without ``alt=sse`` (a streamed JSON array) is answered with 400.
"""

from __future__ import annotations

import re
import time
from typing import Any, ClassVar

from ._exchange import Api, Context, json_bytes, rand_id
from ._scenario import Scenario

__all__ = ["GEMINI_PATH", "GeminiGenerateApi", "google_error_body"]

#: ``/v1beta/models/gemini-2.5-flash:streamGenerateContent`` -> version, model, method
GEMINI_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+):(generateContent|streamGenerateContent)$")

_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

# google.rpc.Code names as the Gemini API sends them for each HTTP status
_STATUS: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",
}

_FINISH: dict[str, str] = {
    "end_turn": "STOP",
    "stop_sequence": "STOP",
    "tool_use": "STOP",
    "max_tokens": "MAX_TOKENS",
    "refusal": "SAFETY",
}

# Scenario.error_type -> (HTTP code, message) for error_event_at (in-stream chunk or unary status)
_ERROR_EVENTS: dict[str, tuple[int, str]] = {
    "overloaded_error": (503, "The model is overloaded. Please try again later. (simulated)"),
    "api_error": (500, "An internal error has occurred. Please retry or report it. (simulated)"),
    "rate_limit_error": (429, "Resource has been exhausted (e.g. check quota). (simulated)"),
    "invalid_request_error": (400, "Request contains an invalid argument. (simulated)"),
}


def google_error_body(status: int, message: str, retry_after: float | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    if retry_after is not None and status == 429:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{round(retry_after)}s"}
        ]
    return {"error": error}


def finish_reason(scenario: Scenario) -> str:
    return _FINISH[scenario.stop_reason]


class GeminiGenerateApi(Api):
    name: ClassVar[str] = "gemini"
    default_model: ClassVar[str] = "gemini-2.5-flash"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.response_id = rand_id(23, _B64URL)

    # ------------------------------------------------------------------ routing hooks

    @classmethod
    def request_model(cls, path: str, body: dict[str, Any]) -> str | None:
        match = GEMINI_PATH.match(path)
        return match.group(2) if match else None

    @classmethod
    def request_max_tokens(cls, path: str, body: dict[str, Any]) -> int | None:
        config = body.get("generationConfig")
        value = config.get("maxOutputTokens") if isinstance(config, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return path.endswith(":streamGenerateContent")

    @classmethod
    def request_problem(cls, path: str, query: str, body: dict[str, Any]) -> str | None:
        if path.endswith(":streamGenerateContent") and "alt=sse" not in query.split("&"):
            return "the simulator serves :streamGenerateContent only with ?alt=sse"
        return None

    # ------------------------------------------------------------------ usage

    def input_tokens(self) -> int:
        return self.ctx.scenario.input + self.ctx.scenario.cache_read

    def output_tokens(self) -> int:
        return self.ctx.scenario.tokens + self.ctx.scenario.reasoning

    def _usage(self, final: bool) -> dict[str, Any]:
        sc = self.ctx.scenario
        prompt = self.input_tokens()
        usage: dict[str, Any] = {"promptTokenCount": prompt}
        total = prompt + sc.reasoning
        if final:
            usage["candidatesTokenCount"] = sc.tokens
            total += sc.tokens
        usage["totalTokenCount"] = total
        if sc.cache_read:
            usage["cachedContentTokenCount"] = sc.cache_read
        usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
        if sc.cache_read:
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": sc.cache_read}]
        if sc.reasoning:
            usage["thoughtsTokenCount"] = sc.reasoning
        return usage

    # ------------------------------------------------------------------ bodies

    def common_headers(self) -> list[tuple[str, str]]:
        ms = max(0, round((time.perf_counter() - self.ctx.received_at) * 1000))
        return [
            ("vary", "Origin"),
            ("vary", "X-Origin"),
            ("vary", "Referer"),
            ("server", "scaffolding on HTTPServer2"),
            ("x-xss-protection", "0"),
            ("x-frame-options", "SAMEORIGIN"),
            ("x-content-type-options", "nosniff"),
            ("server-timing", f"gfet4t7; dur={ms}"),
        ]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return google_error_body(status, message, self.ctx.scenario.retry_after)

    def error_status(self) -> int:
        return _ERROR_EVENTS[self.ctx.scenario.error_type][0]

    def _response(self, text: str, *, final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
        if final:
            candidate["finishReason"] = finish_reason(self.ctx.scenario)
            candidate["index"] = 0
        return {
            "candidates": [candidate],
            "usageMetadata": self._usage(final),
            "modelVersion": self.ctx.model,
            "responseId": self.response_id,
        }

    def json_body(self) -> dict[str, Any]:
        return self._response(self.ctx.scenario.expected_text(), final=True)

    @staticmethod
    def _sse(data: dict[str, Any]) -> bytes:
        return b"data: " + json_bytes(data) + b"\r\n\r\n"

    def preamble_events(self) -> list[bytes]:
        return []

    def delta_event(self, index: int, text: str) -> bytes:
        return self._sse(self._response(text, final=False))

    def error_event(self) -> bytes:
        code, message = _ERROR_EVENTS[self.ctx.scenario.error_type]
        return self._sse(google_error_body(code, message))

    def close_events(self) -> list[bytes]:
        return []

    def stop_events(self) -> list[bytes]:
        return [self._sse(self._response("", final=True))]
