"""ollama's native API: ``POST /api/chat`` and ``POST /api/generate``, streamed and not.

Wire format as the ``ollama`` Python client (0.6.x, ``ollama/_client.py`` ``Client._request``,
``ollama/_types.py`` ``ChatResponse`` / ``GenerateResponse``) decodes it: a stream is NDJSON
(``application/x-ndjson``), one JSON object per line, each ``{"model", "created_at", "message":
{"role", "content"}, "done": false}`` (``/api/chat``) or ``{..., "response", "done": false}``
(``/api/generate``); the last line has ``done: true``, ``done_reason`` (``stop`` or ``length``) and the
counts and durations (``prompt_eval_count``, ``eval_count``, ``*_duration`` in nanoseconds). A
non-streamed answer is that last object with the whole text. Errors are ``{"error": "<message>"}``: the
body of a non-2xx status, or a line of its own mid-stream (the client raises it).

Simulator specifics: the request's ``stream`` defaults to true, as on the server; ``options.num_predict`` is
the output cap ``fill`` uses; ollama sends no request id and no rate-limit headers; with ``tool_call``
(``/api/chat``) delta 0 carries the whole tool call (``message.tool_calls``, its arguments an object, as
ollama sends one) and the later deltas no output; ``reasoning`` and the cache counts are not simulated
(ollama reports no cache counts); the ollama client numbers no attempt (it never retries), so ``fail``
counts the requests of the same path, model and scenario (:attr:`Scenario.fail`).
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

from ._exchange import Api, json_bytes

__all__ = ["OllamaChatApi", "OllamaGenerateApi"]

_DONE_REASON = {"max_tokens": "length"}  # every other stop reason of a scenario is ollama's "stop"
_NS = 1_000_000_000


def _created_at() -> str:
    """The time now as ollama writes it (RFC 3339, nanoseconds, UTC)."""
    now = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // _NS)) + f".{now % _NS:09d}Z"


class _OllamaApi(Api):
    stream_content_type: ClassVar[str] = "application/x-ndjson"
    default_model: ClassVar[str] = "llama3.2"

    @classmethod
    def request_stream(cls, path: str, query: str, body: dict[str, Any]) -> bool:
        return body.get("stream") is not False

    @classmethod
    def request_max_tokens(cls, path: str, body: dict[str, Any]) -> int | None:
        options = body.get("options")
        value = options.get("num_predict") if isinstance(options, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def common_headers(self) -> list[tuple[str, str]]:
        return []

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}

    def _output(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def _chunk(self, text: str) -> dict[str, Any]:
        return {"model": self.ctx.model, "created_at": _created_at(), **self._output(text), "done": False}

    def _final(self, text: str) -> dict[str, Any]:
        sc = self.ctx.scenario
        total = max(1, time.perf_counter_ns() - int(self.ctx.received_at * _NS))
        return {
            **self._chunk(text),
            "done": True,
            "done_reason": _DONE_REASON.get(sc.stop_reason, "stop"),
            "total_duration": total,
            "load_duration": total // 10,
            "prompt_eval_count": sc.input,
            "prompt_eval_duration": total // 5,
            "eval_count": sc.tokens,
            "eval_duration": total // 2,
        }

    @staticmethod
    def _line(obj: dict[str, Any]) -> bytes:
        return json_bytes(obj) + b"\n"

    def json_body(self) -> dict[str, Any]:
        return self._final(self.ctx.scenario.expected_text())

    def preamble_events(self) -> list[bytes]:
        return []

    def delta_event(self, index: int, text: str) -> bytes:
        return self._line(self._chunk(text))

    def error_event(self) -> bytes:
        return self._line({"error": "model runner has unexpectedly stopped (simulated)"})

    def close_events(self) -> list[bytes]:
        return []

    def stop_events(self) -> list[bytes]:
        return [self._line(self._final(""))]


class OllamaChatApi(_OllamaApi):
    name: ClassVar[str] = "ollama-chat"

    def _output(self, text: str) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": text}}

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if not sc.tool_call:
            return super().delta_event(index, text)
        chunk = self._chunk("")
        if index == 0:
            call = {"function": {"name": "lookup", "arguments": json.loads(sc.tool_arguments())}}
            chunk["message"]["tool_calls"] = [call]
        return self._line(chunk)

    def json_body(self) -> dict[str, Any]:
        body = super().json_body()
        if self.ctx.scenario.tool_call:
            call = {"function": {"name": "lookup", "arguments": json.loads(self.ctx.scenario.tool_arguments())}}
            body["message"] = {"role": "assistant", "content": "", "tool_calls": [call]}
        return body


class OllamaGenerateApi(_OllamaApi):
    name: ClassVar[str] = "ollama-generate"

    def _output(self, text: str) -> dict[str, Any]:
        return {"response": text}

    def _final(self, text: str) -> dict[str, Any]:
        return {**super()._final(text), "context": [1, 2, 3]}
