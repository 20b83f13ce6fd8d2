"""OpenAI Chat Completions (``POST /v1/chat/completions``) and Responses (``POST /v1/responses``)."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from ._exchange import Api, Context, json_bytes, rand_id
from ._scenario import delta_text

__all__ = ["OpenAIChatApi", "OpenAIResponsesApi", "go_duration", "openai_error_body"]

_HEX = "0123456789abcdef"

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout", None),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", "overloaded"),
    529: ("server_error", "overloaded"),
}


def go_duration(seconds: float) -> str:
    """OpenAI's reset format: ``20ms``, ``1s``, ``1.5s``, ``6m0s``."""

    def secs(s: float) -> str:
        return f"{s:.3f}".rstrip("0").rstrip(".") + "s"

    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return secs(seconds)
    minutes = int(seconds // 60)
    return f"{minutes}m{secs(seconds - 60 * minutes)}"


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    etype, code = _ERRORS.get(status, ("server_error", None))
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


class _OpenAIApi(Api):
    default_model: ClassVar[str] = "gpt-4o-mini"

    def input_tokens(self) -> int:
        # OpenAI's prompt/input tokens include the cached ones.
        return self.ctx.scenario.input + self.ctx.scenario.cache_read

    def output_tokens(self) -> int:
        return self.ctx.scenario.tokens + self.ctx.scenario.reasoning

    def common_headers(self) -> list[tuple[str, str]]:
        rl = self.ctx.ratelimit
        processing_ms = max(0, round((time.perf_counter() - self.ctx.received_at) * 1000))
        return [
            ("x-request-id", self.ctx.request_id),
            ("openai-processing-ms", str(processing_ms)),
            ("openai-version", "2020-10-01"),
            ("x-ratelimit-limit-requests", str(rl.requests_limit)),
            ("x-ratelimit-limit-tokens", str(rl.tokens_limit)),
            ("x-ratelimit-remaining-requests", str(rl.requests_remaining)),
            ("x-ratelimit-remaining-tokens", str(rl.tokens_remaining)),
            ("x-ratelimit-reset-requests", go_duration(rl.reset_in)),
            (
                "x-ratelimit-reset-tokens",
                go_duration(rl.reset_in * (1 - rl.tokens_remaining / rl.tokens_limit)),
            ),
        ]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)

    def _error_message(self) -> str:
        if self.ctx.scenario.error_type == "overloaded_error":
            return "The server is overloaded, please try again later. (simulated)"
        return "The server had an error while processing your request. Sorry about that! (simulated)"


class OpenAIChatApi(_OpenAIApi):
    name: ClassVar[str] = "openai-chat"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.completion_id = "chatcmpl-" + rand_id(29)
        self.fingerprint = "fp_" + rand_id(10, _HEX)
        opts = ctx.body.get("stream_options")
        self.include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))

    def _usage(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        prompt, completion = self.input_tokens(), self.output_tokens()
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sc.cache_read, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": sc.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def json_body(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.ctx.created,
            "model": self.ctx.model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": sc.expected_text(),
                        "refusal": None,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": _FINISH[sc.stop_reason],
                }
            ],
            "usage": self._usage(),
            "service_tier": "default",
            "system_fingerprint": self.fingerprint,
        }

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        data: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.ctx.created,
            "model": self.ctx.model,
            "service_tier": "default",
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        }
        if self.include_usage:
            data["usage"] = usage
        return b"data: " + json_bytes(data) + b"\n\n"

    @staticmethod
    def _choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def preamble_events(self) -> list[bytes]:
        return [self._chunk([self._choice({"role": "assistant", "content": "", "refusal": None})])]

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if sc.tool_call and index == 0:
            call = {"index": 0, "id": "call_" + self.completion_id[9:33], "type": "function"}
            return self._chunk(
                [self._choice({"tool_calls": [{**call, "function": {"name": "lookup", "arguments": ""}}]})]
            )
        if sc.tool_call:
            return self._arguments(sc.tool_piece(index))
        return self._chunk([self._choice({"content": text})])

    def _arguments(self, piece: str) -> bytes:
        return self._chunk([self._choice({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})])

    def error_event(self) -> bytes:
        body = {"error": {"message": self._error_message(), "type": "server_error", "param": None, "code": None}}
        return b"data: " + json_bytes(body) + b"\n\n"

    def close_events(self) -> list[bytes]:
        return [self._arguments(self.ctx.scenario.tool_closing())] if self.ctx.scenario.tool_call else []

    def stop_events(self) -> list[bytes]:
        sc = self.ctx.scenario
        if self.ctx.path.startswith("/openai/"):  # Groq: usage in the finishing chunk's x_groq, always
            chunk = self._chunk([self._choice({}, _FINISH[sc.stop_reason])])
            x_groq = b',"x_groq":' + json_bytes({"id": "req_" + rand_id(26).lower(), "usage": self._usage()})
            return [chunk[: chunk.rindex(b"}")] + x_groq + b"}\n\n", b"data: [DONE]\n\n"]
        if self.ctx.user_agent.startswith("mistral-client"):  # Mistral: usage in the finishing chunk, always
            self.include_usage = True
            return [self._chunk([self._choice({}, _FINISH[sc.stop_reason])], self._usage()), b"data: [DONE]\n\n"]
        events = [self._chunk([self._choice({}, _FINISH[sc.stop_reason])])]
        if self.include_usage:
            events.append(self._chunk([], self._usage()))
        events.append(b"data: [DONE]\n\n")
        return events


class OpenAIResponsesApi(_OpenAIApi):
    name: ClassVar[str] = "openai-responses"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.response_id = "resp_" + rand_id(48, _HEX)
        self.item_id = "msg_" + rand_id(48, _HEX)
        self.seq = 0

    def _usage(self) -> dict[str, Any]:
        sc = self.ctx.scenario
        inp, out = self.input_tokens(), self.output_tokens()
        return {
            "input_tokens": inp,
            "input_tokens_details": {"cached_tokens": sc.cache_read},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": sc.reasoning},
            "total_tokens": inp + out,
        }

    def _status(self) -> str:
        return "incomplete" if self.ctx.scenario.stop_reason == "max_tokens" else "completed"

    def _item(self, done: bool) -> dict[str, Any]:
        if self.ctx.scenario.tool_call:
            return {
                "id": "fc_" + self.item_id[4:],
                "type": "function_call",
                "status": "completed" if done else "in_progress",
                "arguments": self.ctx.scenario.tool_arguments() if done else "",
                "call_id": "call_" + self.item_id[4:28],
                "name": "lookup",
            }
        return {
            "id": self.item_id,
            "type": "message",
            "status": self._status() if done else "in_progress",
            "content": [self._part(self.ctx.scenario.expected_text())] if done else [],
            "role": "assistant",
        }

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _response(self, done: bool) -> dict[str, Any]:
        body = self.ctx.body
        status = self._status() if done else "in_progress"
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.ctx.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self.ctx.model,
            "output": [self._item(True)] if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": self._usage() if done else None,
            "user": None,
            "metadata": {},
        }

    def json_body(self) -> dict[str, Any]:
        return self._response(done=True)

    def _ev(self, event: str, data: dict[str, Any]) -> bytes:
        payload = {"type": event, "sequence_number": self.seq, **data}
        self.seq += 1
        return b"event: " + event.encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"

    def _loc(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def preamble_events(self) -> list[bytes]:
        started = [
            self._ev("response.created", {"response": self._response(False)}),
            self._ev("response.in_progress", {"response": self._response(False)}),
        ]
        if self.ctx.scenario.tool_call:  # the function_call item is added (named) with delta 0
            return started
        return [
            *started,
            self._ev("response.output_item.added", {"output_index": 0, "item": self._item(False)}),
            self._ev("response.content_part.added", {**self._loc(), "part": self._part("")}),
        ]

    def delta_event(self, index: int, text: str) -> bytes:
        sc = self.ctx.scenario
        if sc.tool_call and index == 0:
            return self._ev("response.output_item.added", {"output_index": 0, "item": self._item(False)})
        if sc.tool_call:
            return self._arguments(sc.tool_piece(index))
        return self._ev("response.output_text.delta", {**self._loc(), "delta": text, "logprobs": []})

    def _arguments(self, piece: str) -> bytes:
        item_id = self._item(False)["id"]
        return self._ev(
            "response.function_call_arguments.delta", {"item_id": item_id, "output_index": 0, "delta": piece}
        )

    def error_event(self) -> bytes:
        return self._ev("error", {"code": "server_error", "message": self._error_message(), "param": None})

    def close_events(self) -> list[bytes]:
        sc = self.ctx.scenario
        if sc.tool_call:
            item = self._item(True)
            done = {"item_id": item["id"], "output_index": 0, "arguments": item["arguments"]}
            return [
                self._arguments(sc.tool_closing()),
                self._ev("response.function_call_arguments.done", done),
                self._ev("response.output_item.done", {"output_index": 0, "item": item}),
            ]
        text = "".join(delta_text(i) for i in range(self.ctx.scenario.tokens))
        return [
            self._ev("response.output_text.done", {**self._loc(), "text": text, "logprobs": []}),
            self._ev("response.content_part.done", {**self._loc(), "part": self._part(text)}),
            self._ev("response.output_item.done", {"output_index": 0, "item": self._item(True)}),
        ]

    def stop_events(self) -> list[bytes]:
        event = "response.incomplete" if self._status() == "incomplete" else "response.completed"
        return [self._ev(event, {"response": self._response(True)})]
