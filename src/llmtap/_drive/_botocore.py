"""Bedrock through boto3 (botocore over urllib3) and aiobotocore (botocore's handlers over aiohttp):
Converse, and InvokeModel with Claude's own format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import Mode, Sdk, is_any_of, ready

__all__ = ["AioBotocoreConverseSdk", "AioBotocoreInvokeSdk", "Boto3ConverseSdk", "Boto3InvokeSdk"]


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
        if is_any_of(exc, _BOTOCORE_TIMEOUTS):
            return "timeout"
        if is_any_of(exc, _BOTOCORE_CONNECTION):
            return "connection"
        return super().classify(exc)

    @classmethod
    def _is_status(cls, exc: BaseException) -> bool:
        return is_any_of(exc, frozenset({"botocore.ClientError"}))  # EventStreamError (an exception frame) too


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
        return ready(stream.close())  # the EventStream's close() is botocore's own: not a coroutine

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


# by name, as :data:`._base._TIMEOUTS`: what botocore raises from its send, and urllib3 from a streamed body's read
_BOTOCORE_TIMEOUTS = frozenset({"botocore.ReadTimeoutError", "botocore.ConnectTimeoutError", "urllib3.TimeoutError"})
_BOTOCORE_CONNECTION = frozenset({"botocore.HTTPClientError", "botocore.ResponseStreamingError", "urllib3.HTTPError"})
