"""LiteLLM (``litellm``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import Mode, Sdk, is_any_of

__all__ = ["LiteLLMSdk"]


class LiteLLMSdk(Sdk):
    """LiteLLM as shipped, through its ``anthropic/`` provider: sync over legacy httpx, async over an
    ``httpx.AsyncClient`` on LiteLLM's own aiohttp transport (one request, two hooked layers), or over httpx
    alone (``transport="httpx"``: ``litellm.disable_aiohttp_transport``). Its own retries (``num_retries``)
    send a fresh request with no retry header, each its own call. It has no client object: :meth:`close`
    lets its cached clients go."""

    name = "litellm"
    provider = "anthropic"
    api = "anthropic"
    path = "/v1/messages"
    model = "claude-test"
    linked_retries = False
    retry_header = False
    transports: ClassVar[Mapping[Mode, tuple[str | None, ...]]] = {"sync": (None,), "async": (None, "httpx")}

    def _client(self) -> Any:
        import os
        import warnings

        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price map at import
        with warnings.catch_warnings():  # LiteLLM's import warns (pydantic's, its own deprecations): not the app's
            warnings.simplefilter("ignore")
            import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.disable_aiohttp_transport = self.config.transport == "httpx"
        return litellm

    @classmethod
    def package(cls) -> str:
        from importlib.metadata import version

        return f"litellm {version('litellm')}"

    def _call(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any], stream: bool) -> Any:
        params.setdefault("max_tokens", 64)
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        call = self.client.acompletion if self.is_async else self.client.completion
        return call(
            model=f"anthropic/{model}", api_base=self.config.base_url, api_key=self.config.api_key,
            num_retries=self.config.max_retries, timeout=self.config.timeout, stream=stream,
            extra_headers={**self.config.headers, **(headers or {})}, **params, **self.config.options,
        )  # fmt: skip

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self._call(model, headers, params, False)

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self._call(model, headers, params, True)

    def close_stream(self, stream: Any) -> Any:
        return stream.aclose() if self.is_async else stream.close()

    def piece(self, event: Any) -> str | None:
        choices = getattr(event, "choices", None)
        return (choices[0].delta.content or None) if choices else None

    def text(self, response: Any) -> str:
        return str(response.choices[0].message.content)

    def close(self) -> Any:
        """What an app closes of LiteLLM's: in async mode its cached async clients (an aiohttp session per event
        loop), in the loop that made them; its sync clients are shared by every call of the process."""
        self.client.disable_aiohttp_transport = False
        return self._aclose() if self.is_async else None

    async def _aclose(self) -> None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        await close_litellm_async_clients()  # type: ignore[no-untyped-call]

    @classmethod
    def classify(cls, exc: BaseException) -> str:
        """LiteLLM's own classes; an error after the stream started comes wrapped in its
        ``MidStreamFallbackError`` (``original_exception``: what it would have raised)."""
        original = getattr(exc, "original_exception", None)
        if isinstance(original, BaseException):
            exc = original
        if is_any_of(exc, frozenset({"litellm.Timeout"})):
            return "timeout"
        if is_any_of(exc, frozenset({"litellm.APIConnectionError"})):
            return "connection"
        if is_any_of(exc, frozenset({"litellm.APIError", "litellm.APIStatusError", "litellm.RateLimitError",
                               "litellm.ServiceUnavailableError", "litellm.InternalServerError"})):  # fmt: skip
            return "status"
        return super().classify(exc)
