"""The patching tools that stand in for wrapt (``_hooks/_patching.py``): method wrappers and post-import hooks."""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llmtap._hooks import _patching
from llmtap._hooks._patching import when_imported, wrap_method


class Target:
    def send(self, value: int, *, twice: bool = False) -> int:
        """Send it."""
        return value * (2 if twice else 1)

    async def asend(self, value: int) -> int:
        return value + 1

    @staticmethod
    def static(value: int) -> int:
        return value


def test_wrap_method_calls_the_wrapper_with_the_bound_original() -> None:
    seen: list[tuple[Any, Any, Any, Any]] = []

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append((wrapped, instance, args, kwargs))
        return wrapped(*args, **kwargs) + 100

    original = Target.__dict__["send"]
    patched = wrap_method(original, wrapper)
    assert patched.__wrapped__ is original
    assert (patched.__name__, patched.__qualname__, patched.__doc__) == ("send", "Target.send", "Send it.")
    obj = Target()
    assert patched(obj, 3, twice=True) == 106
    wrapped, instance, args, kwargs = seen[0]
    assert (wrapped.__self__, wrapped.__func__, instance, args, kwargs) == (obj, original, obj, (3,), {"twice": True})


def test_wrap_method_keeps_a_coroutine_function_one() -> None:
    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)  # a coroutine, awaited by the stand-in

    patched = wrap_method(Target.__dict__["asend"], wrapper)
    assert inspect.iscoroutinefunction(patched)
    assert not inspect.iscoroutinefunction(wrap_method(Target.__dict__["send"], wrapper))  # control
    assert asyncio.run(patched(Target(), 1)) == 2


def test_wrap_method_refuses_what_is_not_a_plain_function() -> None:
    with pytest.raises(TypeError, match="not a plain function: staticmethod"):
        wrap_method(Target.__dict__["static"], lambda *a: None)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh importable module name (removed from sys.modules and the pending hooks afterwards)."""
    name = f"llmtap_patching_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    _patching._pending.pop(name, None)


def test_a_hook_runs_once_after_the_module_is_imported(package: str) -> None:
    calls: list[ModuleType] = []
    when_imported(package, calls.append)
    assert calls == []  # not imported yet
    module = __import__(package)
    assert calls == [module] and module.VALUE == 42
    # the module keeps the real loader: nothing of ours stays on it
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert module.__spec__ is not None and type(module.__spec__.loader).__name__ == "SourceFileLoader"
    assert inspect.getsource(module) == "VALUE = 42\n"
    del sys.modules[package]
    __import__(package)
    assert len(calls) == 1  # once per process


def test_a_hook_runs_now_when_the_module_is_imported_already(package: str) -> None:
    module = __import__(package)
    calls: list[ModuleType] = []
    when_imported(package, calls.append)
    assert calls == [module]
    assert package not in _patching._pending


def test_a_failing_hook_never_fails_the_import(package: str, caplog: pytest.LogCaptureFixture) -> None:
    def hook(module: ModuleType) -> None:
        raise RuntimeError("boom")

    when_imported(package, hook)
    with caplog.at_level(logging.WARNING, logger="llmtap"):
        module = __import__(package)
    assert module.VALUE == 42
    assert f"could not instrument {package} on import: RuntimeError('boom')" in caplog.text


def test_a_finder_that_asks_the_whole_path_again_gets_the_module_once(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another library's post-import finder (wrapt's) calls importlib.util.find_spec from its own find_spec:
    the module is found, loaded once, and the hook runs once."""
    import importlib.util

    class Asking:
        asked = 0

        def find_spec(self, fullname: str, path: object, target: object = None) -> object:
            if fullname != package or self.asked:
                return None
            self.asked += 1
            return importlib.util.find_spec(fullname)  # the whole path, ours included

    asking = Asking()
    calls: list[ModuleType] = []
    when_imported(package, calls.append)
    monkeypatch.setattr(sys, "meta_path", [_patching._FINDER, asking, *sys.meta_path])
    module = __import__(package)
    assert asking.asked == 1 and calls == [module] and module.VALUE == 42
