"""Less memory per finished span: an ended span's empty event and link lists, without their deques.

Why llmtap reaches under the SDK's API here: the OpenTelemetry SDK (1.45) gives every span two
``BoundedList`` s, for events and links, each a ``deque`` and a lock: ~1.9 KB of the ~3.4 KB an attempt span
holds (``python benchmarks/profile_sdk.py span-memory``), although llmtap's spans carry neither events nor,
except on a retry, links. The application's ``BatchSpanProcessor`` keeps every finished span until its next
export, up to 512 by default between two exports (2,048 when the exporter falls behind), so those empty
lists are most of the memory llmtap's spans cost a busy process.

So just before llmtap ends one of its spans, :func:`slim` swaps each list that is still empty for an
:class:`empty list <_lazy_type>` of the same class family that holds nothing and allocates its deque and
lock only if something is appended after all (an application adding an event to the current span on
another thread, between this swap and the end). The swap happens under the span's own lock, the lock
the SDK appends under, and only while the span has not ended; readers see the same values (no events, no
links, none dropped) through the same types (``isinstance(x, BoundedList)`` holds).

Where nothing is swapped, so the SDK's own objects stay: a span that is not the SDK's (a proxy, a
non-recording span, another SDK), a list that is not empty or dropped something, more than
:data:`_MAX_TYPES` distinct list limits, or an SDK laid out otherwise than :func:`_learn` checks on the
first span of each type (said at DEBUG). If a swap fails anyway, it is counted once as an internal error
("sink") and never tried again.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from typing import Any

from llmtap._log import internal_error, logger

__all__ = ["slim"]

_MAX_TYPES = 8
"""Span classes learnt, and (list class, limit) pairs an empty-list class is made for: a process has one or two
of each; past that, spans of a new class, or lists of a new limit, are left alone (nothing learnt per span)."""

_layouts: dict[type, Any] = {}
"""The span class -> its ``BoundedList`` class, or None where spans of that class are left alone."""
_lazy: dict[tuple[type, int | None], type[Any]] = {}
"""(``BoundedList`` class, its limit) -> the empty-list class for it."""
_broken = False


def slim(span: Any) -> None:
    """Swap the still-empty event and link lists of ``span`` (one of llmtap's, about to end) for empty lists
    that allocate nothing until appended to; a no-op on anything else."""
    if _broken:
        return
    span_type = type(span)
    bounded: Any = _layouts[span_type] if span_type in _layouts else _learn(span)
    if bounded is None:
        return
    try:
        with span._lock:
            if span._end_time is not None:
                return
            empty = _empty_for(bounded, span._events)
            if empty is not None:
                span._events = empty
            empty = _empty_for(bounded, span._links)
            if empty is not None:
                span._links = empty
    except Exception as exc:
        _disable(exc)


def _empty_for(bounded: Any, current: Any) -> Any:
    """An empty list to stand for ``current`` (a list of the span's), or None where ``current`` stays: it holds
    or dropped something, or it is not the SDK's."""
    if type(current) is not bounded or current._dq or current.dropped:
        return None
    key = (bounded, current._dq.maxlen)
    lazy = _lazy.get(key)
    if lazy is None:
        if len(_lazy) >= _MAX_TYPES:
            return None
        lazy = _lazy[key] = _lazy_type(bounded, key[1])
    return object.__new__(lazy)


def _lazy_type(bounded: type, maxlen: int | None) -> type[Any]:
    """A ``bounded`` (the SDK's ``BoundedList``) limited to ``maxlen`` that is empty, holds no deque or lock of
    its own until the first append, and needs no ``__init__`` (``object.__new__(cls)``: a ~50-byte object)."""

    class EmptyBoundedList(bounded):  # type: ignore[misc]
        dropped = 0  # the class's until an append past the limit counts one on the instance
        _dq: Any = ()  # read-only views (len, [i], iteration) see an empty sequence
        # Nothing to guard while empty. Not a shared lock: a fork while another thread held it would leave
        # every empty list of the child locked, and the child's span export with them.
        _lock: Any = contextlib.nullcontext()
        _maxlen = maxlen

        def _own(self) -> None:
            """The deque and lock of the instance's own, before its first append (the SDK appends under the
            span's lock: one thread at a time gets here)."""
            if "_dq" not in self.__dict__:
                self._lock = threading.Lock()
                self._dq = deque(maxlen=self._maxlen)

        def append(self, item: Any) -> None:
            self._own()
            super().append(item)

        def extend(self, seq: Any) -> None:
            self._own()
            super().extend(seq)

        def __deepcopy__(self, memo: dict[int, Any]) -> Any:
            if "_dq" not in self.__dict__:
                copied = type(self).__new__(type(self))
                memo[id(self)] = copied
                return copied
            return super().__deepcopy__(memo)

        def __repr__(self) -> str:
            return f"{bounded.__name__}({list(self._dq)}, maxlen={self._maxlen})"

    EmptyBoundedList.__qualname__ = EmptyBoundedList.__name__ = f"Empty{bounded.__name__}"
    return EmptyBoundedList


def _learn(span: Any) -> type | None:
    """The ``BoundedList`` class of spans of ``span``'s class, if they are laid out as this module reads them and
    a ``ReadableSpan`` of their SDK reads an empty list of it as no events, no links and none dropped."""
    span_type = type(span)
    bounded: type | None = None
    if len(_layouts) >= _MAX_TYPES:
        return None
    try:
        if span_type.__module__.startswith("opentelemetry.sdk.trace"):
            events = span.__dict__.get("_events")
            candidate = type(events)
            if (
                candidate.__module__.startswith("opentelemetry.sdk.")
                and candidate.__name__ == "BoundedList"
                and type(span.__dict__.get("_links")) is candidate
                and isinstance(events._dq, deque)
                and hasattr(span, "_lock")
                and "_end_time" in span.__dict__
                and _reads_empty(span_type, candidate)
            ):
                bounded = candidate
    except Exception as exc:  # a layout this module does not know
        logger.debug("llmtap: spans of %s keep their own event lists (%r)", span_type.__qualname__, exc)
        bounded = None
    else:
        if bounded is None:
            logger.debug("llmtap: spans of %s keep their own event lists", span_type.__qualname__)
    _layouts[span_type] = bounded
    return bounded


def _reads_empty(span_type: type, bounded: type) -> bool:
    """A ``ReadableSpan`` of the span's module given empty lists of the lazy class reads them as the SDK's
    own; and the lazy list, appended to past its limit, drops and counts as the SDK's does."""
    import sys

    readable = getattr(sys.modules[span_type.__module__], "ReadableSpan", None)
    if readable is None:
        return False
    lazy = _lazy_type(bounded, 1)
    probe = readable(name="llmtap.probe", events=object.__new__(lazy), links=object.__new__(lazy))
    if not (probe.events == () and probe.links == () and probe.dropped_events == 0 and probe.dropped_links == 0):
        return False
    appended = object.__new__(lazy)
    appended.append("a")
    appended.append("b")
    return list(appended) == ["b"] and appended.dropped == 1 and not object.__new__(lazy)


def _disable(exc: BaseException) -> None:
    global _broken
    _broken = True
    internal_error("sink", "llmtap: slimming finished spans failed, spans keep their own lists: %r", exc)
