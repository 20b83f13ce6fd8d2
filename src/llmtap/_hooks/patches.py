"""Hooks: the patch set, what one installation patches (:class:`Patches`) and when.

Each module is patched when it is imported already at ``instrument()`` or, through a post-import hook,
when the application imports it (llmtap imports no SDK the application does not use); ``restore()`` undoes
it. What each patch wraps lives beside its hook:

* ``httpx`` / ``httpx2``: ``Client._send_single_request`` and the async twin (``httpx_transport.py``, where
  and why);
* ``aiohttp``: ``ClientSession._request`` (``aiohttp_session.py``, loaded at the first request sent while
  instrumented, through :func:`_aiohttp_request`);
* botocore: ``Endpoint._send`` (every attempt on the wire) and ``AWSResponse.__init__`` (its response, as soon
  as the headers arrived), ``botocore_endpoint.py``, loaded with botocore; aiobotocore sends through aiohttp
  (observed there, once: its ``AioEndpoint`` has its own ``_send``);
* with ``sdk_calls``, the SDKs' call hooks (``sdk_calls.py``): the method each SDK retries inside, and
  botocore's / aiobotocore's ``_make_api_call`` for a ``bedrock-runtime`` client.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

from llmtap import _installation
from llmtap._hooks._patching import when_imported, wrap_method
from llmtap._hooks.httpx_transport import HTTP_MODULES, send_wrapper
from llmtap._hooks.sdk_calls import (
    SDK_HOOKS,
    SDK_MODULES,
    SDK_PROVIDERS,
    aiobotocore_api_call,
    botocore_api_call,
    sdk_async_hook,
    sdk_sync_hook,
)
from llmtap._log import internal_error, logger

__all__ = ["Patches"]

AIOHTTP_MODULE = "aiohttp"  # observed by ``aiohttp_session.py``, below any httpx client sending through it
BOTOCORE_ENDPOINT = "botocore.endpoint"  # ``Endpoint._send``: every botocore attempt (``botocore_endpoint.py``)
BOTOCORE_CLIENT = "botocore.client"  # ``BaseClient._make_api_call``: a bedrock-runtime call, all its attempts
AIOBOTOCORE_CLIENT = "aiobotocore.client"  # its async ``_make_api_call``; the attempts go through aiohttp's hook

_hooked: set[str] = set()
"""Module names given llmtap's post-import hook. A hook is never taken back, so each is registered once
per process, and the hook asks the installation in effect (if any) what to do: a fact of the process,
not lifecycle state."""


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
    _wrap(module.Client, "_send_single_request", send_wrapper(module, False), f"{name}.Client", applied)
    _wrap(module.AsyncClient, "_send_single_request", send_wrapper(module, True), f"{name}.AsyncClient", applied)


def _patch_sdk(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    sdk = SDK_PROVIDERS.get(module.__name__) or module.__name__.split(".")[0]  # a test keeps the two in step
    for cls_name, method, is_async in SDK_HOOKS[module.__name__]:
        owner = getattr(module, cls_name, None)
        if owner is not None:
            wrapper = (sdk_async_hook if is_async else sdk_sync_hook)(sdk)
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
    _wrap(module.BaseClient, "_make_api_call", botocore_api_call, f"{module.__name__}.BaseClient", applied)


def _patch_aiobotocore_client(module: ModuleType, applied: list[tuple[Any, str, Any]]) -> None:
    _wrap(module.AioBaseClient, "_make_api_call", aiobotocore_api_call, f"{module.__name__}.AioBaseClient", applied)


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
