"""Google Gen AI (``google-genai``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import Mode, Sdk, is_any_of

__all__ = ["GeminiSdk"]


class GeminiSdk(Sdk):
    """google-genai: sync through httpx2 (or httpx); async through aiohttp by default (when importable),
    or httpx2 / httpx when their transport is passed. It retries only with ``retry_options`` and links
    no retries (each attempt is its own call); ``max_retries`` > 0 means that many retries."""

    name = "gemini"
    provider = "gcp.gemini"
    operation = "generate_content"
    api = "gemini"
    model = "gemini-test"
    linked_retries = False
    retry_header = False
    #: ``httpx`` too (chosen by passing its transports): its ``iter_raw()`` closes no response as the SDK's
    #: generators unwind, httpx2's does, and an app's ``close()`` must read the same over both
    transports: ClassVar[Mapping[Mode, tuple[str | None, ...]]] = {
        "sync": (None, "httpx"),
        "async": ("httpx2", None, "httpx"),
    }

    def _client(self) -> Any:
        from google import genai
        from google.genai import types

        options: dict[str, Any] = {"base_url": self.config.base_url, "headers": dict(self.config.headers)}
        if self.config.max_retries:
            options["retry_options"] = types.HttpRetryOptions(
                attempts=self.config.max_retries + 1, initial_delay=0.001, max_delay=0.001, jitter=0
            )
        if self.config.timeout is not None:
            options["timeout"] = int(self.config.timeout * 1000)  # milliseconds
        transport = self.config.transport
        if transport == "httpx2" and self.is_async:
            import httpx2

            options["async_client_args"] = {"transport": httpx2.AsyncHTTPTransport()}
        elif transport == "httpx":
            import httpx

            options["client_args"] = {"transport": httpx.HTTPTransport()}
            options["async_client_args"] = {"transport": httpx.AsyncHTTPTransport()}
        options.update(self.config.options)
        return genai.Client(api_key=self.config.api_key, http_options=types.HttpOptions(**options))

    @property
    def uses_aiohttp(self) -> bool:
        return bool(self.is_async and self.client._api_client._use_aiohttp())

    def _models(self) -> Any:
        return self.client.aio.models if self.is_async else self.client.models

    def _config(self, headers: Mapping[str, str] | None) -> dict[str, Any]:
        if not headers:
            return {}
        from google.genai import types

        return {"config": types.GenerateContentConfig(http_options=types.HttpOptions(headers=dict(headers)))}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self._models().generate_content(
            model=model, contents=params.get("prompt", "hi"), **self._config(headers)
        )

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        models = self._models()
        return models.generate_content_stream(model=model, contents=params.get("prompt", "hi"), **self._config(headers))

    def close_stream(self, stream: Any) -> Any:
        # a generator: the sync one closes the response as it unwinds; the async one's aclose() closes
        # only the SDK's outer generator (the response is left to the event loop's finalisation)
        return stream.aclose() if self.is_async else stream.close()

    def piece(self, event: Any) -> str | None:
        return event.text or ""

    def text(self, response: Any) -> str:
        return response.text or ""

    def close(self) -> Any:
        if self.is_async:
            return self._aclose()
        self.client.close()
        return None

    async def _aclose(self) -> None:
        await self.client.aio.aclose()
        self.client.close()

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"google.APIError"}))
