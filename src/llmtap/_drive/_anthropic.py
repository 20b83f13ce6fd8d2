"""Anthropic's SDK (``anthropic``): first party, and its Bedrock and Vertex clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import Sdk, extra_headers, is_any_of

__all__ = ["AnthropicSdk", "BedrockSdk", "VertexSdk"]


class AnthropicSdk(Sdk):
    name = "anthropic"
    provider = "anthropic"
    api = "anthropic"
    path: ClassVar[str | None] = "/v1/messages"
    model = "claude-test"
    _class = "Anthropic"

    def _client(self) -> Any:
        import anthropic

        cls = getattr(anthropic, ("Async" if self.is_async else "") + self._class)
        kwargs: dict[str, Any] = {
            "max_retries": self.config.max_retries,
            "timeout": self.config.timeout,
            "default_headers": dict(self.config.headers),
        }
        http = self._hooked_http(anthropic)
        if http is not None:
            kwargs["http_client"] = http
        return cls(**self._auth(), **kwargs, **self.config.options)

    def _auth(self) -> dict[str, Any]:
        return {"base_url": self.config.base_url, "api_key": self.config.api_key}

    @classmethod
    def package(cls) -> str:
        """The SDK's package and version: ``anthropic 0.75.0``."""
        import anthropic

        return f"anthropic {anthropic.__version__}"

    def _params(self, model: str, headers: Mapping[str, str] | None, params: dict[str, Any]) -> dict[str, Any]:
        params.setdefault("max_tokens", 64)
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        return {"model": model, **params, **extra_headers(headers)}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self.client.messages.create(**self._params(model, headers, params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self.client.messages.create(stream=True, **self._params(model, headers, params))

    def helper(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """The SDK's ``messages.stream()`` context manager."""
        return self.client.messages.stream(**self._params(model, headers, params))

    def piece(self, event: Any) -> str | None:
        if getattr(event, "type", None) != "content_block_delta":
            return None
        return getattr(event.delta, "text", None) or getattr(event.delta, "partial_json", None) or ""

    def text(self, response: Any) -> str:
        return "".join(getattr(block, "text", "") for block in response.content)

    def timeout(self, read: float, total: float) -> Any:
        import anthropic

        return anthropic.Timeout(total, read=read)

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"anthropic.APIError"}))


class BedrockSdk(AnthropicSdk):
    name = "bedrock"
    provider = "aws.bedrock"
    api = "bedrock"
    path = None  # /model/{model}/invoke[-with-response-stream]
    _class = "AnthropicBedrock"

    def _auth(self) -> dict[str, Any]:
        # the SDK signs with SigV4 locally (botocore); the simulator never checks
        return {"base_url": self.config.base_url, "aws_region": "us-east-1", "aws_access_key": "AKIDEXAMPLE",
                "aws_secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}  # fmt: skip


class VertexSdk(AnthropicSdk):
    name = "vertex"
    provider = "gcp.vertex_ai"
    api = "vertex"
    path = None
    _class = "AnthropicVertex"

    def _auth(self) -> dict[str, Any]:
        return {"base_url": self.config.base_url + "/v1", "region": "us-east5", "project_id": "proj-1",
                "access_token": "ya29.secret"}  # fmt: skip
