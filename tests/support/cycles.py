"""Test helper: the reference cycles llmtap leaves behind, found by the garbage collector itself.

An object in a reference cycle outlives its last use until a collection of its generation finds it:
on an error path (an exception keeps its traceback, the traceback its frames, a frame the exception)
that is memory held per request and work for the collector later. :func:`cycles_of_llmtap` collects
with ``gc.DEBUG_SAVEALL`` (the collector keeps what it would free, after running its finalisers and
weakref callbacks as usual) and returns what of it is llmtap's: an instance of a class of llmtap's,
or a frame or function of llmtap's code.

``tests/test_sdk_cases.py`` runs every case of the driver's table inside it, and says per case what must hold:

* Over the SDKs that make no reference cycle of their own (:func:`acyclic`: the anthropic and openai SDKs,
  Bedrock and Vertex included, over httpx2), nothing of llmtap's is garbage: llmtap makes no reference cycle
  on any path, errors, retries, timeouts, closes, cancellations and dropped streams included. A cycle would
  keep an attempt's state (its span, its parts) alive until a collection finds it, the oldest generation's
  for a long stream.
* Where the client or its retry library does keep each response in a cycle (``httpx``'s response and its
  bound stream refer to each other: google-genai over httpx, groq, cohere; tenacity keeps the tracebacks of
  google-genai's retried errors), llmtap's shell sits in that cycle: what it keeps alive there is the ended
  attempt's small record parts, not its span (1.3-2.4 KB a request, against 4.2-5.3 KB with the span's
  attribute dict, lock and event and link lists, as tracemalloc measured the garbage the collector found). The
  ended attempt lets its span and its sinks' states go (:func:`spans_in_the_garbage` is empty), except
  after the actions in :data:`DROPPING`, whose attempts the collector itself ends.

The app in those tests lets go of the exception it caught (``Result.error``): a caught exception kept in a
frame of its own traceback is a cycle of the app's, through every frame the exception passed, llmtap's too.
"""

from __future__ import annotations

import gc
import importlib.metadata
import sys
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan

from tests.support.own import is_own_file

__all__ = [
    "ACYCLIC",
    "CYCLIC_FROM_312",
    "DROPPING",
    "MEASURED_LINES",
    "acyclic",
    "cycles_of_llmtap",
    "is_llmtap",
    "spans_in_the_garbage",
]

ACYCLIC = frozenset({"anthropic", "bedrock", "vertex", "openai-chat", "openai-responses"})
"""The SDKs (``llmtap._drive`` adapters) whose clients make no reference cycle of their own in any case of the
table on Python 3.11."""
CYCLIC_FROM_312 = {
    "anthropic": frozenset({"timeout", "dropped", "dropped_unary"}),
    "bedrock": frozenset({"timeout", "dropped", "dropped_unary"}),
    "vertex": frozenset({"timeout", "dropped", "dropped_unary"}),
    "openai-chat": frozenset({"timeout", "dropped", "dropped_unary", "abandoned"}),
    "openai-responses": frozenset({"timeout", "dropped", "dropped_unary", "abandoned"}),
}
"""The cases of those SDKs that, from Python 3.12 on, leave a reference cycle of the SDK's own with no llmtap
in the process: a timeout's or a dropped stream's traceback keeps the frames of httpx2 / httpcore2 and the
SDK's generators (21 to 25 frames in the garbage for anthropic's sync timeout, dropped and dropped_unary; none
on 3.11), an OpenAI stream left unread keeps its ``httpx2.Response`` in its own cycle. llmtap's shell and
frames are in those cycles because the response or the traceback holds them, not because llmtap made one: the
ended-span check still applies to them. Measured with each case driven with no instrumentation and the
collector's ``DEBUG_SAVEALL``, as :func:`cycles_of_llmtap` does."""
DROPPING = frozenset({"drop", "drop_read"})
"""The actions after which the attempt is ended by the garbage collector (its span is in the garbage then)."""


MEASURED_LINES = {"anthropic": 2, "openai": 3}
"""The SDK lines (major versions, over httpx2) whose cycles :data:`ACYCLIC` and :data:`CYCLIC_FROM_312` were
measured on. The legacy lines ``make compat-legacy`` runs (anthropic 0.x, openai 2.x and 1.x, over httpx) were
not: their cases are held to the ended-span check only."""


def _measured_line(sdk: str) -> bool:
    distribution = "openai" if sdk.startswith("openai") else "anthropic"
    return int(importlib.metadata.version(distribution).split(".")[0]) >= MEASURED_LINES[distribution]


def acyclic(sdk: str, case: str) -> bool:
    """Whether case ``case`` of the driver's table through adapter ``sdk`` makes no reference cycle of the
    SDK's own on this Python and SDK line (so none at all, llmtap's included)."""
    if sdk not in ACYCLIC or not _measured_line(sdk):
        return False
    return sys.version_info < (3, 12) or case not in CYCLIC_FROM_312[sdk]


def spans_in_the_garbage() -> list[object]:
    """The OpenTelemetry SDK spans in ``gc.garbage`` (read inside :func:`cycles_of_llmtap`'s block, after a
    collection); clear the list after use (it keeps them alive)."""
    # a weakref.proxy (botocore's garbage holds some) is no span, and asking a dead one raises
    return [o for o in gc.garbage if not isinstance(o, weakref.ProxyTypes) and isinstance(o, ReadableSpan)]


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
def cycles_of_llmtap(save: bool = True) -> Iterator[list[str]]:
    """While the block runs, and in a collection at its end, what the garbage collector finds unreachable
    is kept aside (``gc.DEBUG_SAVEALL``); the yielded list is then filled with a description of each such
    object that is llmtap's (empty: llmtap left no reference cycle). The kept objects are let go after.
    ``save=False``: the collector is left as it is (frees what it finds) and the list stays empty."""
    found: list[str] = []
    if not save:
        yield found
        return
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
