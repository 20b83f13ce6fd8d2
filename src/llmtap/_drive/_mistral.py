"""Mistral's SDK (``mistralai``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import Sdk, is_any_of

__all__ = ["MistralSdk"]


class MistralSdk(Sdk):
    """mistralai (Speakeasy): httpx2, retries only with a ``retry_config`` (hooked), no retry header;
    its clients are made here (it would otherwise make its own) and closed by :meth:`close`."""

    name = "mistral"
    provider = "openai"
    api = "openai-chat"
    path = "/v1/chat/completions"
    model = "mistral-test"
    retry_header = False

    def _client(self) -> Any:
        import httpx2
        from mistralai.client import Mistral as Client
        from mistralai.client.utils import BackoffStrategy, RetryConfig

        self._http: Any = (httpx2.AsyncClient if self.is_async else httpx2.Client)(timeout=self.config.timeout)
        retry = (
            RetryConfig("backoff", BackoffStrategy(5, 10, 1.5, 100), retry_connection_errors=False)
            if self.config.max_retries
            else None
        )
        clients: dict[str, Any] = {"async_client": self._http} if self.is_async else {"client": self._http}
        return Client(
            api_key=self.config.api_key,
            server_url=self.config.base_url,
            timeout_ms=int(self.config.timeout * 1000),
            retry_config=retry,
            **clients,
            **self.config.options,
        )

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any]) -> dict[str, Any]:
        params.setdefault("max_tokens", 64)
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        return {"model": model, **params, "http_headers": {**self.config.headers, **(headers or {})}}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        call = self.client.chat.complete_async if self.is_async else self.client.chat.complete
        return call(**self._params(model, headers, params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        call = self.client.chat.stream_async if self.is_async else self.client.chat.stream
        return call(**self._params(model, headers, params))

    def close_stream(self, stream: Any) -> Any:
        return stream.close() if self.is_async else stream.__exit__(None, None, None)

    def piece(self, event: Any) -> str | None:
        choices = event.data.choices
        return (choices[0].delta.content or None) if choices else None

    def text(self, response: Any) -> str:
        return str(response.choices[0].message.content)

    def close(self) -> Any:
        return self._http.aclose() if self.is_async else self._http.close()

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"mistralai.SDKError", "mistralai.MistralError"}))
