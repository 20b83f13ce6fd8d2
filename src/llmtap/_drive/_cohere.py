"""Cohere's SDK (``cohere``), Chat v2."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import Sdk, is_any_of, ready

__all__ = ["CohereSdk"]


class CohereSdk(Sdk):
    """cohere (Fern), Chat v2: httpx; ``request()`` retries by calling itself (hooked), ``stream()`` never
    retries; no retry header. Its HTTP client is made here and closed by :meth:`close`."""

    name = "cohere"
    provider = "cohere"
    api = "cohere-chat"
    path = "/v2/chat"
    model = "cohere-test"
    retry_header = False

    def _client(self) -> Any:
        import cohere
        import httpx

        self._http: Any = (httpx.AsyncClient if self.is_async else httpx.Client)(timeout=self.config.timeout)
        cls: Any = cohere.AsyncClientV2 if self.is_async else cohere.ClientV2
        return cls(api_key=self.config.api_key, base_url=self.config.base_url, timeout=self.config.timeout,
                   httpx_client=self._http, **self.config.options)  # fmt: skip

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any]) -> dict[str, Any]:
        params.setdefault("max_tokens", 64)
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        options = {"additional_headers": {**self.config.headers, **(headers or {})},
                   "max_retries": self.config.max_retries}  # fmt: skip
        return {"model": model, **params, "request_options": options}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self.client.chat(**self._params(model, headers, params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        stream = self.client.chat_stream(**self._params(model, headers, params))
        return ready(stream) if self.is_async else stream  # an async generator, not an awaitable

    def close_stream(self, stream: Any) -> Any:
        return stream.aclose() if self.is_async else stream.close()

    def piece(self, event: Any) -> str | None:
        return str(event.delta.message.content.text) if event.type == "content-delta" else None

    def text(self, response: Any) -> str:
        return str(response.message.content[0].text)

    def close(self) -> Any:
        return self._http.aclose() if self.is_async else self._http.close()

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"cohere.ApiError"}))
