"""Test helper: the reference cycles llmtap leaves behind, found by the garbage collector itself.

An object in a reference cycle outlives its last use until a collection of its generation finds it:
on an error path (an exception keeps its traceback, the traceback its frames, a frame the exception)
that is memory held per request and work for the collector later. :func:`cycles_of_llmtap` collects
with ``gc.DEBUG_SAVEALL`` (the collector keeps what it would free, after running its finalisers and
weakref callbacks as usual) and returns what of it is llmtap's: an instance of a class of llmtap's,
or a frame or function of llmtap's code.
"""

from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.own import is_own_file

__all__ = ["cycles_of_llmtap", "is_llmtap"]


def is_llmtap(obj: object) -> bool:
    """An instance of a class defined in llmtap, or a frame, function or code object of llmtap's (a file
    under the package's directory: :func:`~tests.support.own.is_own_file`)."""
    if isinstance(obj, weakref.ProxyTypes):  # botocore's garbage holds weak proxies, some of them dead
        return False
    if isinstance(obj, types.FrameType):
        obj = obj.f_code
    elif isinstance(obj, types.FunctionType):
        obj = obj.__code__
    if isinstance(obj, types.CodeType):
        return is_own_file(obj.co_filename)
    module = getattr(type(obj), "__module__", None)
    return isinstance(module, str) and (module == "llmtap" or module.startswith("llmtap."))


@contextmanager
def cycles_of_llmtap() -> Iterator[list[str]]:
    """While the block runs, and in a collection at its end, what the garbage collector finds unreachable
    is kept aside (``gc.DEBUG_SAVEALL``); the yielded list is then filled with a description of each such
    object that is llmtap's (empty: llmtap left no reference cycle). The kept objects are let go after."""
    found: list[str] = []
    gc.collect()
    gc.garbage.clear()
    debug = gc.get_debug()
    gc.set_debug(debug | gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
    finally:
        gc.set_debug(debug)
        kept = list(gc.garbage)
        gc.garbage.clear()
    for obj in kept:
        if is_llmtap(obj):
            where = obj.f_code if isinstance(obj, types.FrameType) else obj
            found.append(f"{type(obj).__qualname__}: {where!r}"[:200])
    del kept
    gc.collect()
