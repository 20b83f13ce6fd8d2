"""One official SDK (anthropic or openai) pointed at one endpoint, through the driver's adapters
(:mod:`llmtap._drive`): clients whose every response is shown to a callback, the probe's requests, and
plain words for what the SDK raised."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator, Mapping
from typing import Any

from llmtap._drive import SDKS, Action, Config, Mode, OnResponse, Result, Sdk, adapter, drive, run

__all__ = ["SdkDriver", "connect_cause", "exception_name", "prompt"]

_FILLER = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
           "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
           "whiskey", "xray", "yankee", "zulu")  # fmt: skip
_INSTRUCTION = "Count upward from 1, one number per line, and do not stop until you are cut off."


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
    """One SDK pointed at one endpoint; every HTTP response's status and headers go to ``on_response``.

    ``provider``: ``anthropic`` (the anthropic SDK), ``openai`` or ``openai-compatible`` (the openai
    SDK's Chat Completions; ``max_tokens`` is sent as ``max_completion_tokens`` to OpenAI itself).
    """

    def __init__(self, provider: str, base_url: str, api_key: str, on_response: OnResponse) -> None:
        self.provider = provider
        self.base_url = base_url
        self._key = api_key
        self._on_response = on_response
        self._sdk = "anthropic" if provider == "anthropic" else "openai-chat"
        self.sdk_name = SDKS[self._sdk].package()

    def _config(self, timeout: Any, max_retries: int, mode: Mode = "sync") -> Config:
        return Config(self.base_url, mode, api_key=self._key, max_retries=max_retries, timeout=timeout,
                      on_response=self._on_response, exact_url=True)  # fmt: skip

    def sdk(self, timeout: Any, max_retries: int = 0) -> Sdk:
        """A sync client (the caller closes it)."""
        return adapter(self._sdk, self._config(timeout, max_retries))

    def timeout(self, read: float, total: float) -> Any:
        """The SDK's timeout object: ``read`` seconds between bytes, ``total`` for everything else."""
        sdk = self.sdk(total)
        try:
            return sdk.timeout(read, total)
        finally:
            sdk.close()

    def params(self, max_tokens: int, text: str) -> dict[str, Any]:
        """The request's parameters for the adapter: the prompt and the token limit under the name the
        endpoint takes."""
        key = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
        return {"prompt": text, key: max_tokens}

    def stream(
        self, sdk: Sdk, model: str, max_tokens: int, text: str, headers: Mapping[str, str] | None = None
    ) -> Result:
        """A stream read to its end with the client ``sdk``; what the SDK raised is in ``error``."""
        return run(sdk, "stream", model, headers=headers, **self.params(max_tokens, text))

    def call(self, action: Action, model: str, max_tokens: int, text: str, *, timeout: Any, mode: Mode = "sync",
             early: int = 1, headers: Mapping[str, str] | None = None) -> Result:  # fmt: skip
        """``action`` (:data:`llmtap._drive.ACTIONS`) with a client of its own, no retries, closed after."""
        return drive(self._sdk, self.base_url, action, mode=mode, model=model, early=early, headers=headers,
                     params=self.params(max_tokens, text), api_key=self._key, max_retries=0, timeout=timeout,
                     on_response=self._on_response, exact_url=True)  # fmt: skip

    def get_metrics_endpoint(self, timeout: float) -> str:
        """GET <base>/v1/metrics (the endpoint some articles describe) and say what came back."""
        path = "/v1/metrics" if self.provider == "anthropic" else "/metrics"
        import httpx2

        sdk = self.sdk(timeout)
        try:
            response = sdk.client.get(path, cast_to=httpx2.Response)
            return f"GET {path} answered {response.status_code}"
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            return (
                f"GET {path} answered {status}" if status is not None else f"GET {path} failed: {exception_name(exc)}"
            )
        finally:
            sdk.close()
