"""The two patching tools the hooks need, written here rather than loaded from wrapt (whose package
imports 15 modules, ~0.33 MiB of every instrumented process: benchmarks/README.md, "Memory").

- :func:`wrap_method`: a plain function that stands in for a method of a class and calls
  ``wrapper(wrapped, instance, args, kwargs)`` (wrapt's wrapper convention, which the hooks keep);
  ``__wrapped__`` is the original, so restoring and "someone wrapped on top of us" work as before.
  Every method llmtap patches is a plain function in its class's ``__dict__``; anything else is
  refused (the caller logs it and leaves that version uninstrumented).
- :func:`when_imported`: call a function with a module once it has been imported (now, if it has
  been), through a finder on ``sys.meta_path`` that wraps the real loader of the few module names
  asked for. Each name fires once per process; the module keeps its real ``__loader__`` and
  ``__spec__.loader`` (``importlib.resources``, ``inspect.getsource`` see no difference).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import FunctionType, MethodType, ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

from llmtap._log import logger

__all__ = ["when_imported", "wrap_method"]

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


def wrap_method(original: Any, wrapper: Wrapper) -> Any:
    """A function to put in a class's ``__dict__`` in place of the plain function ``original``: a call
    ``obj.method(*args, **kwargs)`` becomes ``wrapper(bound original, obj, args, kwargs)`` (a coroutine
    function stays one, for those who ask ``inspect.iscoroutinefunction``).

    Raises:
        TypeError: ``original`` is not a plain function (a staticmethod, a classmethod, a builtin).
    """
    if not isinstance(original, FunctionType):
        raise TypeError(f"not a plain function: {type(original).__name__}")
    patched: Any
    if inspect.iscoroutinefunction(original):

        async def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await wrapper(MethodType(original, self), self, args, kwargs)

    else:

        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            return wrapper(MethodType(original, self), self, args, kwargs)

    return functools.update_wrapper(patched, original)  # __wrapped__, __name__, __qualname__, __doc__...


_pending: dict[str, Callable[[ModuleType], None]] = {}
"""Module name -> the function to call with it once imported (fired once, then removed)."""
_lock = threading.Lock()
_finding: set[str] = set()
"""Pending names being found now: a finder further down ``sys.meta_path`` that asks the whole path again
(``importlib.util.find_spec``, as wrapt's does) finds them without us."""


def when_imported(name: str, hook: Callable[[ModuleType], None]) -> None:
    """Call ``hook(module)`` once ``name`` is imported: now if it is (in ``sys.modules``), else right after
    its code has run. One hook per name (a second registration of a pending name replaces the first)."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    with _lock:
        _pending[name] = hook
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        hook = _pending.pop(name, None)
    if hook is None:
        return
    try:
        hook(module)
    except Exception as exc:  # never into the application's import
        logger.warning("could not instrument %s on import: %r", name, exc)


class _Finder:
    """Finds nothing itself: for a pending name, the spec the rest of ``sys.meta_path`` finds, with its
    loader wrapped so the hook runs after the module's code."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _pending or fullname in _finding:  # not ours, or a finder below asking again
            return None
        _finding.add(fullname)  # under the import system's lock of this module name
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec: ModuleSpec | None = find(fullname, path, target)
                if spec is None:
                    continue
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast("Loader", _Loader(spec.loader, spec))  # importlib.abc: not loaded for this
                return spec
            return None
        finally:
            _finding.discard(fullname)


class _Loader:
    """The real loader's ``create_module``/``exec_module``, then the pending hook of the module's name."""

    def __init__(self, loader: Any, spec: ModuleSpec) -> None:
        self._loader = loader
        self._spec = spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._spec.loader = self._loader  # the module's own loader, as if we had never been there
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        self._loader.exec_module(module)
        # the module as the import system will return it (a module may replace itself in sys.modules)
        _fire(module.__name__, sys.modules.get(module.__name__, module))

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, is_package...
        return getattr(self._loader, name)


_FINDER = _Finder()
