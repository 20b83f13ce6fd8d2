"""OpenAI's SDK (``openai``): Chat Completions and Responses; Groq's (``groq``) speaks Chat too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import Sdk, extra_headers, is_any_of

__all__ = ["GroqSdk", "OpenAIChatSdk", "OpenAIResponsesSdk"]


class OpenAIChatSdk(Sdk):
    name = "openai-chat"
    provider = "openai"
    api = "openai-chat"
    path = "/v1/chat/completions"
    model = "gpt-test"
    _package = "openai"
    _class = "OpenAI"
    _suffix = "/v1"

    def _client(self) -> Any:
        import importlib

        sdk = importlib.import_module(self._package)
        kwargs: dict[str, Any] = {
            "base_url": self.config.base_url + ("" if self.config.exact_url else self._suffix),
            "api_key": self.config.api_key,
            "max_retries": self.config.max_retries,
            "timeout": self.config.timeout,
            "default_headers": dict(self.config.headers),
        }
        http = self._hooked_http(sdk)
        if http is not None:
            kwargs["http_client"] = http
        return getattr(sdk, ("Async" if self.is_async else "") + self._class)(**kwargs, **self.config.options)

    @classmethod
    def package(cls) -> str:
        """The SDK's package and version: ``openai 2.8.0``."""
        import importlib

        return f"{cls._package} {importlib.import_module(cls._package).__version__}"

    @property
    def resource(self) -> Any:
        return self.client.chat.completions

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any], stream: bool) -> Any:
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        if stream:
            params.setdefault("stream_options", {"include_usage": True})
        if params.get("stream_options") is None:
            params.pop("stream_options", None)
        return {"model": model, **params, **extra_headers(headers)}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self.resource.create(**self._params(model, headers, params, False))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self.resource.create(stream=True, **self._params(model, headers, params, True))

    def helper(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """The SDK's ``.stream()`` context manager."""
        return self.resource.stream(**self._params(model, headers, params, True))

    def raw(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """``with_raw_response.create(stream=True)``: the raw response, whose ``parse()`` is the stream."""
        return self.resource.with_raw_response.create(stream=True, **self._params(model, headers, params, True))

    def piece(self, event: Any) -> str | None:
        if getattr(event, "type", None) == "content.delta":  # the .stream() helper's events
            return str(event.delta)
        choices = getattr(event, "choices", None)
        return (choices[0].delta.content or None) if choices else None

    def text(self, response: Any) -> str:
        return str(response.choices[0].message.content)

    def timeout(self, read: float, total: float) -> Any:
        import openai

        return openai.Timeout(total, read=read)

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({f"{cls._package}.APIError"}))


class OpenAIResponsesSdk(OpenAIChatSdk):
    name = "openai-responses"
    api = "openai-responses"
    path = "/v1/responses"

    @property
    def resource(self) -> Any:
        return self.client.responses

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any], stream: bool) -> Any:
        params.pop("stream_options", None)
        if "max_tokens" in params:
            params["max_output_tokens"] = params.pop("max_tokens")
        params.setdefault("input", params.pop("prompt", "hi"))
        return {"model": model, **params, **extra_headers(headers)}

    def piece(self, event: Any) -> str | None:
        return event.delta if getattr(event, "type", None) == "response.output_text.delta" else None

    def text(self, response: Any) -> str:
        return str(response.output_text)


class GroqSdk(OpenAIChatSdk):
    name = "groq"
    path = "/openai/v1/chat/completions"
    model = "groq-test"
    _package = "groq"
    _class = "Groq"
    _suffix = ""

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any], stream: bool) -> Any:
        params.setdefault("max_tokens", 64)
        return super()._params(model, headers, params, False)

    def timeout(self, read: float, total: float) -> Any:
        import groq

        return groq.Timeout(total, read=read)
