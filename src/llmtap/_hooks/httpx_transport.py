"""Hooks: the httpx / httpx2 client patch, the explicit wrapping transport, and the guarded SDK hook.

**Where the hook sits.** ``Client._send_single_request`` (and the async twin) of ``httpx`` and
``httpx2`` is called exactly once per HTTP attempt, after redirects and auth are resolved and
whatever transport is used (default, custom, mounted, the SDKs' aiohttp adapters), so patching it
sees every attempt exactly once. It is a private method: the patch checks it exists and logs a
warning naming the version when it does not. Users who prefer no patching wrap their transport
with :func:`wrap_transport` instead.

**aiohttp.** ``aiohttp.ClientSession._request`` is wrapped by ``aiohttp_session.py`` (where and why is
written there), patched like the others only when the application imports aiohttp.

**botocore.** ``botocore.endpoint.Endpoint._send`` (every attempt on the wire), ``AWSResponse.__init__`` (its
response, as soon as the headers arrived) and, with ``sdk_calls``,
``botocore.client.BaseClient._make_api_call`` (a ``bedrock-runtime`` client's logical call) are wrapped when
the application imports botocore; where and why is written in ``botocore_endpoint.py``. aiobotocore sends
through aiohttp (observed there, once: its ``AioEndpoint`` has its own ``_send``); with ``sdk_calls``,
``aiobotocore.client.AioBaseClient._make_api_call`` links a ``bedrock-runtime`` call's attempts.

**Logical calls.** The SDKs retry inside one method of their client (:data:`SDK_HOOKS`); a guarded
wrapper around it opens a :class:`~llmtap._core.calls.Call` so retries are linked (see ``_core/calls.py``), and
its requests are LLM requests on any host (the call carries the SDK's provider name,
:data:`SDK_PROVIDERS`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from llmtap import _installation
from llmtap._core.calls import CURRENT_CALL, Call
from llmtap._core.decision import classify_exception
from llmtap._core.record import Outcome
from llmtap._core.request import UNKNOWN, info_from_body, info_from_options
from llmtap._core.stream import observe_async, observe_sync, shells_for
from llmtap._core.tap import Tap
from llmtap._hooks._patching import when_imported, wrap_method
from llmtap._log import internal_error, logger
from llmtap._providers._base import RequestInfo, as_int

__all__ = ["Patches", "wrap_transport"]

HTTP_MODULES = ("httpx", "httpx2")
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
AIOHTTP_MODULE = "aiohttp"  # observed by ``aiohttp_session.py``, below any httpx client sending through it
BOTOCORE_ENDPOINT = "botocore.endpoint"  # ``Endpoint._send``: every botocore attempt (``botocore_endpoint.py``)
BOTOCORE_CLIENT = "botocore.client"  # ``BaseClient._make_api_call``: a bedrock-runtime call, all its attempts
AIOBOTOCORE_CLIENT = "aiobotocore.client"  # its async ``_make_api_call``; the attempts go through aiohttp's hook

_hooked: set[str] = set()
"""Module names given llmtap's post-import hook. A hook is never taken back, so each is registered once
per process, and the hook asks the installation in effect (if any) what to do: a fact of the process,
not lifecycle state."""


# -- the httpx / httpx2 client patch --------------------------------------------------------------


def _send_wrapper(module: ModuleType, is_async: bool) -> Any:
    """The wrapper of ``Client._send_single_request`` (or the async one) of ``module``."""
    shell = shells_for(module)[1 if is_async else 0]
    observe = observe_async if is_async else observe_sync

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        installation = _installation.current
        if installation is None:
            return wrapped(*args, **kwargs)
        tap = installation.tap
        request = args[0] if args else kwargs["request"]
        return observe(tap, request, functools.partial(wrapped, *args, **kwargs), shell)

    return wrapper


# -- the SDK hook: logical calls --------------------------------------------------------------------


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


def _sdk_sync_hook(sdk: str, info_of: Callable[[Any], RequestInfo | None] = info_from_options) -> Any:
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


def _sdk_async_hook(sdk: str, info_of: Callable[[Any], RequestInfo | None] = info_from_options) -> Any:
    """The wrapper of an async SDK request method of the SDK ``sdk``."""

    def _sdk_async_request(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        installation = _installation.current
        if installation is None:
            return wrapped(*args, **kwargs)
        return _sdk_async_call(installation.tap, sdk, wrapped, args, kwargs, info_of)

    return _sdk_async_request


# -- patch / unpatch ---------------------------------------------------------------------------------


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _wrap(owner: Any, attribute: str, wrapper: Any, label: str, applied: list[tuple[Any, str, Any]]) -> None:
    original = owner.__dict__.get(attribute)
    if original is None:
        logger.warning("%s has no %s; this version is not instrumented", label, attribute)
        return
    try:
        patched = wrap_method(original, wrapper)
    except TypeError as exc:
        logger.warning("%s.%s is %s; this version is not instrumented", label, attribute, exc)
        return
    setattr(owner, attribute, patched)
    applied.append((owner, attribute, original))


def _patch_http(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    name = module.__name__
    _wrap(module.Client, "_send_single_request", _send_wrapper(module, False), f"{name}.Client", applied)
    _wrap(module.AsyncClient, "_send_single_request", _send_wrapper(module, True), f"{name}.AsyncClient", applied)


def _patch_sdk(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    sdk = SDK_PROVIDERS.get(module.__name__) or module.__name__.split(".")[0]  # a test keeps the two in step
    for cls_name, method, is_async in SDK_HOOKS[module.__name__]:
        owner = getattr(module, cls_name, None)
        if owner is not None:
            wrapper = (_sdk_async_hook if is_async else _sdk_sync_hook)(sdk)
            _wrap(owner, method, wrapper, f"{module.__name__}.{cls_name}", applied)


def _patch_aiohttp(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    _wrap(module.ClientSession, "_request", _aiohttp_request, f"{module.__name__}.ClientSession", applied)


def _patch_botocore_endpoint(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    # botocore is ~10 MiB of modules once imported: the hook's few KiB are loaded with it, not per request
    from llmtap._hooks.botocore_endpoint import response_init_wrapper, send_wrapper

    awsrequest = importlib.import_module("botocore.awsrequest")  # imported by botocore.endpoint already
    _wrap(awsrequest.AWSResponse, "__init__", response_init_wrapper, "botocore.awsrequest.AWSResponse", applied)
    _wrap(module.Endpoint, "_send", send_wrapper, f"{module.__name__}.Endpoint", applied)


def _patch_botocore_client(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    _wrap(module.BaseClient, "_make_api_call", _botocore_api_call, f"{module.__name__}.BaseClient", applied)


def _patch_aiobotocore_client(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    _wrap(module.AioBaseClient, "_make_api_call", _aiobotocore_api_call, f"{module.__name__}.AioBaseClient", applied)


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


_bedrock_call = _sdk_sync_hook("aws.bedrock", _bedrock_info)
_bedrock_async_call = _sdk_async_hook("aws.bedrock", _bedrock_info)


def _is_bedrock_runtime(client: Any) -> bool:
    try:
        return bool(client._service_model.service_name == "bedrock-runtime")
    except Exception:
        return False


def _botocore_api_call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``botocore.client.BaseClient._make_api_call``: a ``bedrock-runtime`` client's call is one
    logical call (its attempts, botocore's retries, linked as the SDK hooks link theirs); any other service's
    passes through."""
    if _installation.current is None or not _is_bedrock_runtime(instance):
        return wrapped(*args, **kwargs)
    return _bedrock_call(wrapped, instance, args, kwargs)


def _aiobotocore_api_call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The async twin of :func:`_botocore_api_call` (``aiobotocore.client.AioBaseClient._make_api_call``)."""
    if _installation.current is None or not _is_bedrock_runtime(instance):
        return wrapped(*args, **kwargs)
    return _bedrock_async_call(wrapped, instance, args, kwargs)


def _aiohttp_request(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``aiohttp.ClientSession._request``: ``aiohttp_session.py``'s, imported at the first
    request sent while instrumented rather than when aiohttp is patched (the anthropic SDK imports aiohttp
    whether or not anything sends through it; the module is ~58 KiB of every instrumented process)."""
    global _aiohttp_wrapper
    if _installation.current is None:
        return wrapped(*args, **kwargs)
    wrapper = _aiohttp_wrapper
    if wrapper is None:  # the first request: later ones skip the import statement
        try:
            from llmtap._hooks.aiohttp_session import request_wrapper
        except Exception as exc:  # never the request's problem: it goes out unobserved
            internal_error("other", "the aiohttp hook could not be loaded: %r", exc)
            return wrapped(*args, **kwargs)
        wrapper = _aiohttp_wrapper = request_wrapper
    return wrapper(wrapped, instance, args, kwargs)


_aiohttp_wrapper: Any = None
"""``aiohttp_session.request_wrapper`` once loaded by :func:`_aiohttp_request`."""


def _imported(module: ModuleType) -> None:
    """The post-import hook (once per module name for the process): the installation in effect, if
    any, patches the module it wants."""
    installation = _installation.current
    if installation is not None and installation.patches is not None:
        installation.patches.imported(module)


class Patches:
    """The HTTP client modules (and SDKs, when ``sdk_calls``) one installation patches: those imported
    already by :meth:`apply`, the others when the application imports them (so llmtap imports no SDK the
    application does not use), until :meth:`restore`."""

    def __init__(self, sdk_calls: bool = True) -> None:
        targets = [(name, _patch_http) for name in HTTP_MODULES]
        targets.append((AIOHTTP_MODULE, _patch_aiohttp))
        targets.append((BOTOCORE_ENDPOINT, _patch_botocore_endpoint))
        if sdk_calls:
            targets += [(name, _patch_sdk) for name in SDK_MODULES]
            targets.append((BOTOCORE_CLIENT, _patch_botocore_client))
            targets.append((AIOBOTOCORE_CLIENT, _patch_aiobotocore_client))
        self._wanted = {name: hook for name, hook in targets if _installed(name.split(".")[0])}
        """module name -> how to patch it (installed modules only)"""
        self._done: set[str] = set()
        self._applied: list[tuple[Any, str, Any]] = []
        self._restored = False

    @property
    def packages(self) -> list[str]:
        """The installed packages that are or will be patched."""
        return list(dict.fromkeys(name.split(".")[0] for name in self._wanted))

    def apply(self) -> None:
        """Patch the wanted modules imported already (a failure raises: the caller undoes everything) and
        hook the others' import (patched then by the installation in effect, a failure logged)."""
        for name in self._wanted:
            if name not in _hooked:
                _hooked.add(name)
                when_imported(name, _imported)  # runs now if imported: no installation yet
            self._patch(sys.modules.get(name), strict=True)

    def imported(self, module: ModuleType) -> None:
        """``module`` was imported (or was imported while this installation was being made): patch it if
        wanted and not patched yet; a module of another version we cannot patch is not ours to break."""
        self._patch(module, strict=False)

    def _patch(self, module: ModuleType | None, strict: bool) -> None:
        if module is None or self._restored:
            return
        name = module.__name__
        hook = self._wanted.get(name)
        if hook is None or name in self._done:
            return
        self._done.add(name)
        try:
            hook(module, self._applied)
        except Exception as exc:
            if strict:
                raise  # inside instrument(): it undoes everything and says why (all or nothing)
            logger.warning("could not instrument %s: %r", name, exc)

    def catch_up(self) -> None:
        """Patch the wanted modules another thread imported while the installation was being made (their
        post-import hook found none in effect)."""
        for name in self._wanted:
            self._patch(sys.modules.get(name), strict=False)

    def restore(self) -> None:
        """Restore every patched method (in reverse order); modules imported later stay unpatched."""
        self._restored = True
        applied = self._applied
        while applied:
            owner, attribute, original = applied.pop()
            current = owner.__dict__.get(attribute)
            if getattr(current, "__wrapped__", None) is original:
                setattr(owner, attribute, original)
            else:
                # someone wrapped on top of us: leave their wrapper, make ours a pass-through
                logger.warning("%s.%s was re-wrapped by another library; ours stays inert", owner, attribute)


# -- the explicit transport ------------------------------------------------------------------------


class _SyncTransport:
    _shell: type

    def __init__(self, transport: Any, tap: Tap | None = None) -> None:
        self._transport = transport
        self._tap = tap

    def handle_request(self, request: Any) -> Any:
        tap = self._tap or _installation.active()
        if tap is None:
            return self._transport.handle_request(request)
        return observe_sync(tap, request, functools.partial(self._transport.handle_request, request), self._shell)

    def close(self) -> None:
        self._transport.close()


class _AsyncTransport:
    _shell: type

    def __init__(self, transport: Any, tap: Tap | None = None) -> None:
        self._transport = transport
        self._tap = tap

    async def handle_async_request(self, request: Any) -> Any:
        tap = self._tap or _installation.active()
        send = functools.partial(self._transport.handle_async_request, request)
        if tap is None:
            return await send()
        return await observe_async(tap, request, send, self._async_shell)

    async def aclose(self) -> None:
        await self._transport.aclose()

    _async_shell: type


@functools.cache
def _transport_classes(module: ModuleType) -> tuple[type, type]:
    sync_shell, async_shell = shells_for(module)
    sync_cls = type(
        "ObservedTransport",
        (_SyncTransport, module.BaseTransport),
        {"_shell": sync_shell, "__module__": "llmtap"},
    )
    async_cls = type(
        "AsyncObservedTransport",
        (_AsyncTransport, module.AsyncBaseTransport),
        {"_async_shell": async_shell, "__module__": "llmtap"},
    )
    return sync_cls, async_cls


def wrap_transport(transport: Any, tap: Tap | None = None) -> Any:
    """Wrap an ``httpx`` or ``httpx2`` transport (sync or async) so its LLM traffic is observed.

    The result is a transport of the same package and kind, for ``Client(transport=...)`` or
    ``mounts=``. With ``tap=None`` the tap made active by :func:`llmtap.instrument` is used at
    request time (nothing is observed while none is active). Inside a patched client the attempt is
    observed once, not twice.

    Example::

        tap = llmtap.instrument(patch=False)
        client = anthropic.Anthropic(http_client=httpx2.Client(
            transport=llmtap.wrap_transport(httpx2.HTTPTransport())))

    Raises:
        TypeError: ``transport`` is not an httpx or httpx2 transport.
    """
    for name in HTTP_MODULES:
        module = sys.modules.get(name)  # a transport's package is imported already
        if module is None:
            continue
        sync_cls, async_cls = _transport_classes(module)
        if isinstance(transport, module.AsyncBaseTransport):
            return async_cls(transport, tap)
        if isinstance(transport, module.BaseTransport):
            return sync_cls(transport, tap)
    raise TypeError(f"not an httpx or httpx2 transport: {type(transport).__name__}")
