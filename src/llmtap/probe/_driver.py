"""One official SDK (anthropic or openai) pointed at one endpoint: clients whose every response is
shown to a callback, streaming requests, and plain words for what the SDK raised."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SdkDriver", "connect_cause", "exception_name", "prompt"]

_FILLER = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
           "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
           "whiskey", "xray", "yankee", "zulu")  # fmt: skip
_INSTRUCTION = "Count upward from 1, one number per line, and do not stop until you are cut off."

#: on_response(status, header items)
OnResponse = Callable[[int, list[tuple[str, str]]], None]


def prompt(words: int) -> str:
    """The probe's prompt, padded with ``words`` filler words (to vary the input tokens)."""
    filler = " ".join(_FILLER[i % len(_FILLER)] for i in range(words))
    if not filler:
        return _INSTRUCTION
    return f"{_INSTRUCTION}\nIgnore the following filler words: {filler}"


def exception_name(exc: BaseException) -> str:
    """``anthropic.APIConnectionError``, ``asyncio.CancelledError``, ``TimeoutError``."""
    cls = type(exc)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def connect_cause(exc: BaseException) -> str:
    """Why no HTTP response came, in a few words, from the exception's cause chain (the SDK wraps the
    socket error in its own and the HTTP library's): ``connection refused``, ``DNS lookup failed ...``."""
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            return f"DNS lookup failed ({e.strerror or e})"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ssl.SSLError):
            why = getattr(e, "verify_message", None) or getattr(e, "reason", None) or e.strerror or str(e)
            return f"TLS handshake failed ({why})"
        if isinstance(e, TimeoutError) or type(e).__name__.endswith("Timeout"):
            return "no answer in time (timeout)"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror[:1].lower() + e.strerror[1:]
    last = list(_chain(exc))[-1]
    return f"{exception_name(last)}: {last}" if str(last) else exception_name(last)


class SdkDriver:
    """One SDK pointed at one endpoint; every HTTP response's status and headers go to ``on_response``."""

    def __init__(self, provider: str, base_url: str, api_key: str, on_response: OnResponse) -> None:
        self.provider = provider
        self.base_url = base_url
        self._key = api_key
        self._on_response = on_response
        if provider == "anthropic":
            import anthropic

            self.sdk: Any = anthropic
            self.sdk_name = f"anthropic {anthropic.__version__}"
        else:
            import openai

            self.sdk = openai
            self.sdk_name = f"openai {openai.__version__}"

    def _hook(self, response: Any) -> None:
        self._on_response(response.status_code, response.headers.multi_items())

    async def _ahook(self, response: Any) -> None:
        self._hook(response)

    def client(self, timeout: Any, max_retries: int = 0) -> Any:
        http = self.sdk.DefaultHttpxClient(event_hooks={"response": [self._hook]})
        cls = self.sdk.Anthropic if self.provider == "anthropic" else self.sdk.OpenAI
        return cls(
            base_url=self.base_url, api_key=self._key, timeout=timeout, max_retries=max_retries, http_client=http
        )

    def async_client(self, timeout: Any, max_retries: int = 0) -> Any:
        http = self.sdk.DefaultAsyncHttpxClient(event_hooks={"response": [self._ahook]})
        cls = self.sdk.AsyncAnthropic if self.provider == "anthropic" else self.sdk.AsyncOpenAI
        return cls(
            base_url=self.base_url, api_key=self._key, timeout=timeout, max_retries=max_retries, http_client=http
        )

    def timeout(self, read: float, total: float) -> Any:
        """The SDK's timeout object: ``read`` seconds between bytes, ``total`` for everything else."""
        return self.sdk.Timeout(total, read=read)

    def _params(self, model: str, max_tokens: int, text: str, headers: dict[str, str] | None) -> dict[str, Any]:
        params: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True}
        if headers:
            params["extra_headers"] = headers
        if self.provider == "anthropic":
            params["max_tokens"] = max_tokens
        else:
            params["stream_options"] = {"include_usage": True}
            params["max_completion_tokens" if self.provider == "openai" else "max_tokens"] = max_tokens
        return params

    def _endpoint(self, client: Any) -> Any:
        return client.messages if self.provider == "anthropic" else client.chat.completions

    def open(self, client: Any, model: str, max_tokens: int, text: str, headers: dict[str, str] | None = None) -> Any:
        """Start a stream (the SDK returns once the headers are in)."""
        return self._endpoint(client).create(**self._params(model, max_tokens, text, headers))

    async def aopen(self, client: Any, model: str, max_tokens: int, text: str) -> Any:
        return await self._endpoint(client).create(**self._params(model, max_tokens, text, None))

    def is_content(self, event: Any) -> bool:
        """The event carries content (the first such event is the first token)."""
        if self.provider == "anthropic":
            return getattr(event, "type", None) == "content_block_delta"
        choices: Any = getattr(event, "choices", None)
        return bool(choices) and bool(getattr(choices[0].delta, "content", None))

    def get_metrics_endpoint(self, client: Any) -> str:
        """GET <base>/v1/metrics (the endpoint some articles describe) and say what came back."""
        path = "/v1/metrics" if self.provider == "anthropic" else "/metrics"
        import httpx2

        try:
            response = client.get(path, cast_to=httpx2.Response)
            return f"GET {path} answered {response.status_code}"
        except self.sdk.APIStatusError as exc:
            return f"GET {path} answered {exc.status_code}"
        except Exception as exc:
            return f"GET {path} failed: {exception_name(exc)}"
