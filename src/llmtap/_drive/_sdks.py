"""One adapter per official SDK: make a client for a base URL, start a call, read a stream, close.

Each adapter subclasses :class:`._base.Sdk`, which says what every adapter is and how they are named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import Config, Mode, Sdk, _headers, _is, _ready

__all__ = ["SDKS", "adapter"]


# -- Anthropic: first party, Bedrock, Vertex ----------------------------------------------------------


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
        return {"model": model, **params, **_headers(headers)}

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
        return _is(exc, frozenset({"anthropic.APIError"}))


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


# -- OpenAI: Chat Completions and Responses; Groq speaks Chat too -------------------------------------


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
        return {"model": model, **params, **_headers(headers)}

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
        return _is(exc, frozenset({f"{cls._package}.APIError"}))


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
        return {"model": model, **params, **_headers(headers)}

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


# -- Google Gen AI ------------------------------------------------------------------------------------


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
        return _is(exc, frozenset({"google.APIError"}))


# -- Mistral, Cohere ----------------------------------------------------------------------------------


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
        return _is(exc, frozenset({"mistralai.SDKError", "mistralai.MistralError"}))


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
        return _ready(stream) if self.is_async else stream  # an async generator, not an awaitable

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
        return _is(exc, frozenset({"cohere.ApiError"}))


# -- Bedrock through boto3 (botocore over urllib3): Converse, and InvokeModel with Claude's own format ----------


class Boto3ConverseSdk(Sdk):
    """boto3's ``bedrock-runtime`` client: ``converse`` / ``converse_stream``. botocore has no async client (that is
    aiobotocore) and no per-call headers: the scenario rides on every attempt through a ``before-sign`` handler
    (which returns nothing: llmtap must see the real send). ``max_retries`` is botocore's standard retry mode with
    that many retries; the timeout is the connect and the read timeout."""

    name = "boto3"
    provider = "aws.bedrock"
    api = "bedrock-converse"
    path = None  # /model/{model}/converse[-stream]
    model = "us.amazon.nova-pro-v1:0"  # an inference profile id: botocore quotes its ':' in the path
    transports: ClassVar[Mapping[Mode, tuple[str | None, ...]]] = {"sync": (None,)}

    def _client(self) -> Any:
        if self.is_async:
            raise ValueError("boto3 has no async client (aiobotocore is another adapter)")
        import boto3

        self._extra: dict[str, str] = {}
        return self._registered(boto3.client("bedrock-runtime", **self._client_options()))

    def _client_options(self) -> dict[str, Any]:
        from botocore.config import Config as BotoConfig

        config = self.config
        timeout = config.timeout if isinstance(config.timeout, int | float) else 10.0
        return {
            "endpoint_url": config.base_url,
            "region_name": "us-east-1",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": config.api_key,  # signs locally (SigV4); never sent, never recorded
            "config": BotoConfig(
                retries={"total_max_attempts": config.max_retries + 1, "mode": "standard"},
                connect_timeout=timeout,
                read_timeout=timeout,
                **config.options,
            ),
        }

    def _registered(self, client: Any) -> Any:
        client.meta.events.register("before-sign.bedrock-runtime.*", self._add_headers)
        if self.config.on_response is not None:
            client.meta.events.register("after-call.bedrock-runtime.*", self._responded)
        return client

    def _add_headers(self, request: Any, **kwargs: Any) -> None:
        for name, value in {**self.config.headers, **self._extra}.items():
            request.headers[name] = value

    def _responded(self, http_response: Any, **kwargs: Any) -> None:
        if self.config.on_response is not None:
            self.config.on_response(http_response.status_code, list(http_response.headers.items()))

    @classmethod
    def package(cls) -> str:
        import boto3

        return f"boto3 {boto3.__version__}"

    def _call(self, headers: Mapping[str, str] | None) -> None:
        self._extra = dict(headers or {})

    def _params(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        prompt = params.pop("prompt", "hi")
        params.setdefault("messages", [{"role": "user", "content": [{"text": prompt}]}])
        params.setdefault("inferenceConfig", {"maxTokens": params.pop("max_tokens", 64)})
        return {"modelId": model, **params}

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        self._call(headers)
        return self.client.converse(**self._params(model, params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        self._call(headers)
        return self.client.converse_stream(**self._params(model, params))["stream"]

    def piece(self, event: Any) -> str | None:
        delta = event.get("contentBlockDelta", {}).get("delta") if isinstance(event, dict) else None
        if not isinstance(delta, dict):
            return None
        tool = delta.get("toolUse")
        return str(delta.get("text") or (tool.get("input") if isinstance(tool, dict) else "") or "")

    def text(self, response: Any) -> str:
        return "".join(block.get("text", "") for block in response["output"]["message"]["content"])

    def timeout(self, read: float, total: float) -> Any:
        return read

    def with_options(self, **options: Any) -> Sdk:
        raise NotImplementedError("boto3 clients are configured when made")

    @classmethod
    def classify(cls, exc: BaseException) -> str:
        if _is(exc, _BOTOCORE_TIMEOUTS):
            return "timeout"
        if _is(exc, _BOTOCORE_CONNECTION):
            return "connection"
        return super().classify(exc)

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return _is(exc, frozenset({"botocore.ClientError"}))  # EventStreamError (an exception frame) too


def _invoke_body(params: dict[str, Any]) -> str:
    """An Anthropic Messages request body as Bedrock's invoke API takes it (no model, no stream)."""
    import json

    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": params.pop("max_tokens", 64),
        "messages": [{"role": "user", "content": params.pop("prompt", "hi")}],
        **params,
    }
    return json.dumps(body)


def _invoke_piece(event: Any) -> str | None:
    """The text of an invoke stream's ``chunk`` event (an Anthropic event inside), None for other events."""
    import json

    data = event.get("chunk", {}).get("bytes") if isinstance(event, dict) else None
    if not data:
        return None
    payload = json.loads(data)
    if payload.get("type") != "content_block_delta":
        return None
    return str(payload["delta"].get("text") or payload["delta"].get("partial_json") or "")


class Boto3InvokeSdk(Boto3ConverseSdk):
    """boto3's ``invoke_model`` / ``invoke_model_with_response_stream`` with a Claude model: the body is Anthropic's
    Messages format, the stream its events in ``chunk`` messages."""

    name = "boto3-invoke"
    api = "bedrock"
    path = None  # /model/{model}/invoke[-with-response-stream]
    model = "anthropic.claude-test"

    def _body(self, params: dict[str, Any]) -> str:
        return _invoke_body(params)

    def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        self._call(headers)
        return self.client.invoke_model(modelId=model, body=self._body(params))

    def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        self._call(headers)
        return self.client.invoke_model_with_response_stream(modelId=model, body=self._body(params))["body"]

    def piece(self, event: Any) -> str | None:
        return _invoke_piece(event)

    def text(self, response: Any) -> str:
        import json

        message = json.loads(response["body"].read())
        return "".join(block.get("text", "") for block in message["content"])


class AioBotocoreConverseSdk(Boto3ConverseSdk):
    """aiobotocore's ``bedrock-runtime`` client (botocore's handlers over aiohttp; aioboto3 and LlamaIndex's async
    Bedrock sit on it): ``converse`` / ``converse_stream``, async only. The client is an async context manager,
    entered at the first call."""

    name = "aiobotocore"
    transports: ClassVar[Mapping[Mode, tuple[str | None, ...]]] = {"async": (None,)}

    def _client(self) -> Any:
        if not self.is_async:
            raise ValueError("aiobotocore is async only (boto3 is the sync adapter)")
        from aiobotocore.session import get_session

        self._extra = {}
        self._entered: Any = None
        return get_session().create_client("bedrock-runtime", **self._client_options())

    async def _ready_client(self, headers: Mapping[str, str] | None) -> Any:
        if self._entered is None:
            self._entered = self._registered(await self.client.__aenter__())
        self._call(headers)
        return self._entered

    async def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        client = await self._ready_client(headers)
        return await client.converse(**self._params(model, params))

    async def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        client = await self._ready_client(headers)
        return (await client.converse_stream(**self._params(model, params)))["stream"]

    def close_stream(self, stream: Any) -> Any:
        return _ready(stream.close())  # the EventStream's close() is botocore's own: not a coroutine

    def close(self) -> Any:
        return self._aclose()

    async def _aclose(self) -> None:
        if self._entered is not None:
            self._entered = None
            await self.client.__aexit__(None, None, None)


class AioBotocoreInvokeSdk(AioBotocoreConverseSdk):
    """aiobotocore's ``invoke_model`` / ``invoke_model_with_response_stream`` with Claude's format; a
    non-streaming body is read (awaited) inside :meth:`create`."""

    name = "aiobotocore-invoke"
    api = "bedrock"
    model = "anthropic.claude-test"

    def _body(self, params: dict[str, Any]) -> str:
        return _invoke_body(params)

    def piece(self, event: Any) -> str | None:
        return _invoke_piece(event)

    async def create(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        client = await self._ready_client(headers)
        response = await client.invoke_model(modelId=model, body=self._body(params))
        return {**response, "body": await response["body"].read()}

    async def open(self, model: str, *, headers: Mapping[str, str] | None = None, **params: Any) -> Any:
        client = await self._ready_client(headers)
        return (await client.invoke_model_with_response_stream(modelId=model, body=self._body(params)))["body"]

    def text(self, response: Any) -> str:
        import json

        return "".join(block.get("text", "") for block in json.loads(response["body"])["content"])


# by name, as :data:`_TIMEOUTS`: what botocore raises from its send, and urllib3 from a streamed body's read
_BOTOCORE_TIMEOUTS = frozenset({"botocore.ReadTimeoutError", "botocore.ConnectTimeoutError", "urllib3.TimeoutError"})
_BOTOCORE_CONNECTION = frozenset({"botocore.HTTPClientError", "botocore.ResponseStreamingError", "urllib3.HTTPError"})


# -- ollama -------------------------------------------------------------------------------------------


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
        return _is(exc, frozenset({"ollama.ResponseError"}))


#: every adapter by name
# -- LiteLLM ---------------------------------------------------------------------------------------------


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
        if _is(exc, frozenset({"litellm.Timeout"})):
            return "timeout"
        if _is(exc, frozenset({"litellm.APIConnectionError"})):
            return "connection"
        if _is(exc, frozenset({"litellm.APIError", "litellm.APIStatusError", "litellm.RateLimitError",
                               "litellm.ServiceUnavailableError", "litellm.InternalServerError"})):  # fmt: skip
            return "status"
        return super().classify(exc)


SDKS: dict[str, type[Sdk]] = {
    cls.name: cls
    for cls in (
        AnthropicSdk, BedrockSdk, VertexSdk, OpenAIChatSdk, OpenAIResponsesSdk, GeminiSdk, GroqSdk, MistralSdk,
        CohereSdk, Boto3ConverseSdk, Boto3InvokeSdk, AioBotocoreConverseSdk, AioBotocoreInvokeSdk, LiteLLMSdk,
        OllamaSdk,
    )
}  # fmt: skip


def adapter(sdk: str | type[Sdk], config: Config) -> Sdk:
    """A client of the SDK ``sdk`` (a key of :data:`SDKS`, or an adapter class) made from ``config``."""
    return (SDKS[sdk] if isinstance(sdk, str) else sdk)(config)
