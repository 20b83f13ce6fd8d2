"""ollama's own client (``ollama``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import Sdk, is_any_of

__all__ = ["OllamaSdk"]


class OllamaSdk(Sdk):
    """ollama's own client (``ollama.Client`` / ``ollama.AsyncClient``), its native chat API (``/api/chat``)
    over legacy httpx. It never retries (each attempt is its own call, no retry header), and a call takes
    no headers of its own: a call with headers is made by a client of its own, closed with this adapter.
    The key goes as ``authorization: Bearer`` (what the client sends for ollama.com's ``OLLAMA_API_KEY``).

    What it raises (0.6.x): ``ollama.ResponseError`` for an error status (its ``status_code``) and for an
    error line mid-stream (``status_code`` -1); httpx's own exceptions for a timeout or a cut body
    (``httpx.ReadTimeout``, ``httpx.RemoteProtocolError``), and ``ConnectionError`` for a refused connection.
    A stream is a generator that sends its request at its first read: one dropped unread sent nothing."""

    name = "ollama"
    provider = "ollama"
    api = "ollama-chat"
    path = "/api/chat"
    model = "llama-test"
    linked_retries = False
    retry_header = False

    def _client(self) -> Any:
        self._more: list[Any] = []
        return self._make({})

    def _make(self, headers: Mapping[str, str]) -> Any:
        import ollama

        kwargs: dict[str, Any] = {}
        if self.config.on_response is not None:
            on_response = self.config.on_response

            def hook(response: Any) -> None:
                on_response(response.status_code, response.headers.multi_items())

            async def ahook(response: Any) -> None:
                hook(response)

            kwargs["event_hooks"] = {"response": [ahook if self.is_async else hook]}
        cls: Any = ollama.AsyncClient if self.is_async else ollama.Client
        headers = {"authorization": f"Bearer {self.config.api_key}", **self.config.headers, **headers}
        return cls(host=self.config.base_url, timeout=self.config.timeout, headers=headers, **kwargs,
                   **self.config.options)  # fmt: skip

    def _for(self, headers: Mapping[str, str] | None) -> Any:
        if not headers:
            return self.client
        client = self._make(headers)
        self._more.append(client)
        return client

    @classmethod
    def package(cls) -> str:
        """The client's package and version: ``ollama 0.6.3``."""
        from importlib.metadata import version

        return f"ollama {version('ollama')}"

    def _params(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        params.setdefault("messages", [{"role": "user", "content": params.pop("prompt", "hi")}])
        if "max_tokens" in params:
            params["options"] = {**params.get("options", {}), "num_predict": params.pop("max_tokens")}
        return {"model": model, **params}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        return self._for(headers).chat(stream=False, **self._params(model, params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        # sync: a generator whose first read sends the request; async: an awaitable of an async generator
        return self._for(headers).chat(stream=True, **self._params(model, params))

    def close_stream(self, stream: Any) -> Any:
        return self._aclose_stream(stream) if self.is_async else stream.close()

    @staticmethod
    async def _aclose_stream(stream: Any) -> None:
        # awaited here, as an app writes it (``await stream.aclose()``): llmtap reads the close from the frame
        # that awaits it, and a bare ``stream.aclose()`` handed back is awaited by a frame that names no close
        await stream.aclose()

    def piece(self, event: Any) -> str | None:
        return event.message.content or None

    def text(self, response: Any) -> str:
        return str(response.message.content or "")

    def close(self) -> Any:
        clients = [self.client, *self._more]
        if self.is_async:
            return self._aclose(clients)
        for client in clients:
            client.close()
        return None

    @staticmethod
    async def _aclose(clients: list[Any]) -> None:
        for client in clients:
            await client.close()

    def timeout(self, read: float, total: float) -> Any:
        import httpx

        return httpx.Timeout(total, read=read)

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"ollama.ResponseError"}))
