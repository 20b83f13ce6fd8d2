"""Hooks: the httpx / httpx2 client patch's wrapper and the explicit wrapping transport.

**Where the hook sits.** ``Client._send_single_request`` (and the async twin) of ``httpx`` and
``httpx2`` is called exactly once per HTTP attempt, after redirects and auth are resolved and
whatever transport is used (default, custom, mounted, the SDKs' aiohttp adapters), so patching it
sees every attempt exactly once. It is a private method: the patch checks it exists and logs a
warning naming the version when it does not. Users who prefer no patching wrap their transport
with :func:`wrap_transport` instead.

Which modules are patched, and when, is ``patches.py``'s to say.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from llmtap import _installation
from llmtap._core.stream import observe_async, observe_sync, shells_for
from llmtap._core.tap import Tap

__all__ = ["HTTP_MODULES", "send_wrapper", "wrap_transport"]

HTTP_MODULES = ("httpx", "httpx2")
"""The packages whose clients are patched and whose transports :func:`wrap_transport` wraps."""


# -- the httpx / httpx2 client patch --------------------------------------------------------------


def send_wrapper(module: ModuleType, is_async: bool) -> Any:
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
