"""What every adapter is: :class:`Config` (how to make one client), :class:`Sdk` (one client of one SDK,
each step spelt its SDK's way by a subclass), and the helpers the adapters share.

Each adapter is named ``<Name>Sdk`` (``OpenAIChatSdk``; the simulator's side of that wire format is
``OpenAIChatApi``, llmtap's parser of it ``OpenAIChat``). Every adapter hides its SDK's spelling behind
the same few methods, so the code that drives a scenario (:mod:`._actions`) is written once for every
SDK, sync and async. In async mode the methods return what the SDK returns there (awaitables, async
iterators); :mod:`._actions` awaits them. The SDK is imported when an adapter is made, never at import of its module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

__all__ = ["Config", "Mode", "OnResponse", "Sdk", "extra_headers", "is_any_of", "ready"]

Mode = Literal["sync", "async"]
#: on_response(status, header items): every HTTP response the client receives (the probe's view)
OnResponse = Callable[[int, list[tuple[str, str]]], None]


@dataclass(frozen=True)
class Config:
    """How to make one client."""

    #: the server's root URL (the simulator's ``base_url``); adapters add ``/v1`` where their SDK wants it
    base_url: str
    mode: Mode = "sync"
    api_key: str = "sk-test-secret"
    max_retries: int = 0
    #: seconds, or the SDK's own timeout object (:meth:`Sdk.timeout`)
    timeout: Any = 10.0
    #: sent with every request (a scenario's ``headers()``)
    headers: Mapping[str, str] = field(default_factory=dict)
    #: the HTTP library under the SDK when it can choose (``httpx2``, ``httpx``, ``aiohttp``); None: its default
    transport: str | None = None
    #: shown every HTTP response (the anthropic, Bedrock, Vertex, OpenAI and Groq adapters: an httpx event hook)
    on_response: OnResponse | None = None
    #: more keyword arguments for the SDK's client (``open_telemetry=``, ``http_options`` fields, ...)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: ``base_url`` is the SDK's own base URL, given as is (an endpoint's ``https://host/v1``); else the
    #: server's root, to which the adapter adds the path its SDK expects (``/v1`` for OpenAI's)
    exact_url: bool = False


class Sdk:
    """One client of one SDK. Subclasses say how their SDK spells each step."""

    #: the adapter's name (:data:`._sdks.SDKS`)
    name: ClassVar[str]
    #: the ``gen_ai.provider.name`` llmtap records for it against the simulator
    provider: ClassVar[str]
    #: the simulator's name of the wire format (``Served.api``)
    api: ClassVar[str]
    #: the request path the simulator serves it on (None: it depends on the model)
    path: ClassVar[str | None] = None
    #: the SDK links its retries into one logical call (llmtap hooks its retry loop)
    linked_retries: ClassVar[bool] = True
    #: the SDK numbers its attempts (``x-stainless-retry-count``, ``amz-sdk-request``); without, the simulator's
    #: ``fail=N`` counts the requests of one model and scenario, across calls
    retry_header: ClassVar[bool] = True
    #: the transports the tests drive it through, per mode (None: the SDK's default)
    transports: ClassVar[Mapping[Mode, tuple[str | None, ...]]] = {"sync": (None,), "async": (None,)}
    model: ClassVar[str] = "test-model"
    #: the record's operation (``gen_ai.operation.name``)
    operation: ClassVar[str] = "chat"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.is_async = config.mode == "async"
        self.client: Any = self._client()

    # -- what each SDK spells its own way --------------------------------------------------------------

    def _client(self) -> Any:
        raise NotImplementedError

    @classmethod
    def package(cls) -> str:
        """The SDK's package (and version, where the adapter knows it)."""
        return cls.name

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """A non-streaming call (an awaitable in async mode); returns the SDK's response."""
        raise NotImplementedError

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """Start a stream (an awaitable of it in async mode)."""
        raise NotImplementedError

    def helper(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """The SDK's streaming helper (a context manager whose events are read like a stream's)."""
        raise NotImplementedError(f"{self.name} has no stream helper")

    def raw(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        """The raw response of a streaming call (its ``parse()`` is the stream)."""
        raise NotImplementedError(f"{self.name} has no raw response")

    def events(self, stream: Any) -> Any:
        """The stream's events (an async iterable in async mode)."""
        return stream

    def close_stream(self, stream: Any) -> Any:
        """Close a stream before its end (an awaitable in async mode)."""
        return stream.close()

    def piece(self, event: Any) -> str | None:
        """The text a stream event carries, None for events without content."""
        raise NotImplementedError

    def text(self, response: Any) -> str:
        """The text of a non-streaming response."""
        raise NotImplementedError

    def close(self) -> Any:
        """Close the client (an awaitable in async mode)."""
        return self.client.close()

    def timeout(self, read: float, total: float) -> Any:
        """The SDK's timeout: ``read`` seconds between bytes, ``total`` for everything else."""
        return total

    def with_options(self, **options: Any) -> Sdk:
        """This adapter over ``client.with_options(**options)`` (Stainless SDKs: the same connections,
        another timeout or retry count); closing either closes both."""
        twin = copy.copy(self)
        twin.client = self.client.with_options(**options)
        return twin

    @classmethod
    def classify(cls, exc: BaseException) -> str:
        """What the app saw, in the table's words (:class:`._cases.Raised`): ``status`` (an HTTP error
        status or an in-band error the SDK raises), ``timeout``, ``connection``, else ``other``."""
        if is_any_of(exc, _TIMEOUTS):
            return "timeout"
        if is_any_of(exc, _CONNECTION):
            return "connection"
        if cls._is_status(exc):
            return "status"
        return "other"

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return False

    # -- shared helpers --------------------------------------------------------------------------------

    def _hooked_http(self, sdk: Any) -> Any:
        """The Stainless SDKs' default HTTP client, with ``on_response`` as an event hook (or None)."""
        if self.config.on_response is None:
            return None
        on_response = self.config.on_response

        def hook(response: Any) -> None:
            on_response(response.status_code, response.headers.multi_items())

        async def ahook(response: Any) -> None:
            hook(response)

        if self.is_async:
            return sdk.DefaultAsyncHttpxClient(event_hooks={"response": [ahook]})
        return sdk.DefaultHttpxClient(event_hooks={"response": [hook]})


def _names(exc: BaseException) -> Iterable[str]:
    return (f"{c.__module__.split('.')[0]}.{c.__name__}" for c in type(exc).__mro__)


def is_any_of(exc: BaseException, names: frozenset[str]) -> bool:
    """``exc`` is of a class named in ``names`` (``"openai.APITimeoutError"``: top-level package, class), its bases
    included: an adapter classifies its SDK's exceptions without importing the SDK."""
    return any(n in names for n in _names(exc))


# by name, so that classifying imports no SDK; the cause chain is not followed (what the app caught)
_TIMEOUTS = frozenset(
    {"builtins.TimeoutError", "httpx.TimeoutException", "httpx2.TimeoutException", "anthropic.APITimeoutError",
     "openai.APITimeoutError", "groq.APITimeoutError", "aiohttp.ServerTimeoutError"}
)  # fmt: skip
_CONNECTION = frozenset(
    {"httpx.TransportError", "httpx2.TransportError", "aiohttp.ClientError", "anthropic.APIConnectionError",
     "openai.APIConnectionError", "groq.APIConnectionError",
     "builtins.ConnectionError"}  # what the ollama client raises for httpx's ConnectError
)  # fmt: skip


def extra_headers(extra: Mapping[str, str] | None) -> dict[str, Any]:
    """The keyword argument the Stainless SDKs (anthropic, openai, groq) take a call's own headers in."""
    return {"extra_headers": dict(extra)} if extra else {}


async def ready(value: Any) -> Any:
    """``value`` as an awaitable: an async adapter's step whose SDK answers at once."""
    return value
