"""Hooks: the SDK call hooks, each a guarded wrapper of the one method an SDK retries inside.

**Logical calls.** The SDKs retry inside one method of their client (:data:`SDK_HOOKS`); a guarded
wrapper around it opens a :class:`~llmtap._core.calls.Call` so retries are linked (see ``_core/calls.py``), and
its requests are LLM requests on any host (the call carries the SDK's provider name,
:data:`SDK_PROVIDERS`). botocore's ``BaseClient._make_api_call`` and aiobotocore's async twin are wrapped
the same way for a ``bedrock-runtime`` client (:func:`botocore_api_call`, :func:`aiobotocore_api_call`);
any other service's call passes through. Which of them are patched, and when, is ``patches.py``'s to say.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from llmtap import _installation
from llmtap._core.calls import CURRENT_CALL, Call
from llmtap._core.decision import classify_exception
from llmtap._core.record import Outcome
from llmtap._core.request import UNKNOWN, info_from_body, info_from_options
from llmtap._core.tap import Tap
from llmtap._log import internal_error
from llmtap._providers._base import RequestInfo, as_int

__all__ = [
    "SDK_HOOKS",
    "SDK_MODULES",
    "SDK_PROVIDERS",
    "aiobotocore_api_call",
    "botocore_api_call",
    "sdk_async_hook",
    "sdk_sync_hook",
]

_STAINLESS = (("SyncAPIClient", "request", False), ("AsyncAPIClient", "request", True))
SDK_HOOKS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "anthropic._base_client": _STAINLESS,
    "openai._base_client": _STAINLESS,
    "groq._base_client": _STAINLESS,
    # Speakeasy: one method sends a request and, when a retry_config is set, its retries
    "mistralai.client.basesdk": (("BaseSDK", "do_request", False), ("BaseSDK", "do_request_async", True)),
    # Fern: request() retries by calling itself (the inner calls join the outer one); stream() never retries
    "cohere.core.http_client": (("HttpClient", "request", False), ("AsyncHttpClient", "request", True)),
}
"""SDK module -> (class, method, is async): the method that runs all the attempts of one SDK call."""
SDK_MODULES = tuple(SDK_HOOKS)
SDK_PROVIDERS: dict[str, str] = {
    "anthropic._base_client": "anthropic",
    "openai._base_client": "openai",
    "groq._base_client": "groq",
    "mistralai.client.basesdk": "mistral_ai",
    "cohere.core.http_client": "cohere",
}
"""SDK module -> the provider name of its requests on a host no rule covers (``gen_ai.provider.name``)."""


def _open_call(
    tap: Tap, sdk: str, args: Any, kwargs: Any, info_of: Callable[[Any], RequestInfo | None] = info_from_options
) -> Call | None:
    try:
        return Call(info_of(args[1] if len(args) > 1 else kwargs.get("options")), sdk)
    except Exception as exc:
        internal_error("sdk_hook", "could not open a logical call: %r", exc)
        return None


def _cancelled_at(exc: BaseException) -> float | None:
    """When ``exc``, raised out of an SDK's ``request()``, is the app's cancellation: the clock now (the
    float, not the exception, is kept: a frame of the exception's traceback holding it is a cycle)."""
    try:
        return time.perf_counter() if classify_exception(exc)[0] is Outcome.CANCELLED else None
    except Exception:
        return None


def _close_call(tap: Tap, call: Call, cancelled_at: float | None = None) -> None:
    try:
        record = call.request_returned(cancelled_at)
        if record is not None:
            tap._call_ended(record)
    except Exception as exc:
        internal_error("sdk_hook", "could not close a logical call: %r", exc)


def sdk_sync_hook(sdk: str, info_of: Callable[[Any], RequestInfo | None] = info_from_options) -> Any:
    """The wrapper of a sync SDK request method of the SDK ``sdk`` (a closure: one call less than a partial);
    ``info_of``: what the request is, from the method's second argument."""

    def _sdk_sync_request(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        installation = _installation.current
        if installation is None or CURRENT_CALL.get() is not None:
            return wrapped(*args, **kwargs)
        tap = installation.tap
        call = _open_call(tap, sdk, args, kwargs, info_of)
        if call is None:
            return wrapped(*args, **kwargs)
        token = CURRENT_CALL.set(call)
        cancelled_at = None
        try:
            return wrapped(*args, **kwargs)
        except BaseException as exc:
            cancelled_at = _cancelled_at(exc)
            raise
        finally:
            CURRENT_CALL.reset(token)
            _close_call(tap, call, cancelled_at)

    return _sdk_sync_request


async def _sdk_async_call(
    tap: Tap, sdk: str, wrapped: Any, args: Any, kwargs: Any, info_of: Callable[[Any], RequestInfo | None]
) -> Any:
    if CURRENT_CALL.get() is not None:
        return await wrapped(*args, **kwargs)
    call = _open_call(tap, sdk, args, kwargs, info_of)
    if call is None:
        return await wrapped(*args, **kwargs)
    token = CURRENT_CALL.set(call)
    cancelled_at = None
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as exc:
        cancelled_at = _cancelled_at(exc)
        raise
    finally:
        CURRENT_CALL.reset(token)
        _close_call(tap, call, cancelled_at)


def sdk_async_hook(sdk: str, info_of: Callable[[Any], RequestInfo | None] = info_from_options) -> Any:
    """The wrapper of an async SDK request method of the SDK ``sdk``."""

    def _sdk_async_request(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        installation = _installation.current
        if installation is None:
            return wrapped(*args, **kwargs)
        return _sdk_async_call(installation.tap, sdk, wrapped, args, kwargs, info_of)

    return _sdk_async_request


_SMALL_BODY = 64 * 1024
"""An InvokeModel body this long at most is scanned for ``max_tokens`` (a longer one: images, long contexts)."""


def _bedrock_info(api_params: Any) -> RequestInfo:
    """What a ``bedrock-runtime`` call's parameters say before it is sent, without reading a long body: the
    model and the streaming choice are in the URL path (the tap reads them there), Converse's output limit in
    ``inferenceConfig.maxTokens``, InvokeModel's in its (Anthropic) JSON body."""
    if not isinstance(api_params, dict):
        return UNKNOWN
    config = api_params.get("inferenceConfig")
    if isinstance(config, dict):
        return RequestInfo(None, None, as_int(config.get("maxTokens")))
    body = api_params.get("body")
    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, bytes) and len(body) <= _SMALL_BODY:
        return RequestInfo(None, None, info_from_body(body).max_tokens)
    return UNKNOWN


_bedrock_call = sdk_sync_hook("aws.bedrock", _bedrock_info)
_bedrock_async_call = sdk_async_hook("aws.bedrock", _bedrock_info)


def _is_bedrock_runtime(client: Any) -> bool:
    try:
        return bool(client._service_model.service_name == "bedrock-runtime")
    except Exception:
        return False


def botocore_api_call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``botocore.client.BaseClient._make_api_call``: a ``bedrock-runtime`` client's call is one
    logical call (its attempts, botocore's retries, linked as the SDK hooks link theirs); any other service's
    passes through."""
    if _installation.current is None or not _is_bedrock_runtime(instance):
        return wrapped(*args, **kwargs)
    return _bedrock_call(wrapped, instance, args, kwargs)


def aiobotocore_api_call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The async twin of :func:`botocore_api_call` (``aiobotocore.client.AioBaseClient._make_api_call``)."""
    if _installation.current is None or not _is_bedrock_runtime(instance):
        return wrapped(*args, **kwargs)
    return _bedrock_async_call(wrapped, instance, args, kwargs)
