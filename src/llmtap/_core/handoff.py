"""Endings that arrive where llmtap must not work: handed off, then ended on an ordinary stack.

The garbage collector runs finalisers (``weakref.finalize``, a generator's ``GeneratorExit``) on
whatever thread happened to allocate, possibly while that thread holds a lock: prometheus-client's
``labels()`` lock, an OpenTelemetry SDK lock, one of llmtap's own. Ending an attempt takes such locks
(bounds, exporters, the logical call, the log limiter), so ending it there can wait forever for a lock
the same thread holds. So an ending that may come from a finaliser only :func:`defer`\\ s: it puts its
arguments on a :class:`queue.SimpleQueue`, whose ``put`` takes no lock a finaliser could re-enter
(CPython moved ``concurrent.futures`` to it for this reason, bpo-32576), and returns.

The queue is drained on ordinary stacks, never inside the collector:

- by a daemon thread woken by each hand-off (started with the first tap, again by the first attempt
  in a forked child);
- by :func:`drain`, which the next attempt's begin (:func:`tend`), ``uninstrument()`` and
  ``testing.capture()`` call, and which the metric exporters are handed (``drain=``) and call before each
  Prometheus scrape and OpenTelemetry collection, so an abandoned stream is counted by the next one at the latest.

An item is what ends it (a callable, the tap's end) and that callable's arguments: this module knows no tap.

An item is only ever taken off the queue under :data:`_lock`, by whoever then ends it before letting
go of the lock: when :func:`drain` returns, everything handed off before the call has ended.
A forked child starts with an empty queue and a new lock: the parent's attempts are the parent's.
"""

from __future__ import annotations

import os
import threading

# The C queue module that queue.SimpleQueue and queue.Empty are (the same objects): queue.py itself, with
# its Queue classes, is ~40 KiB of every instrumented process that imports nothing else of it.
from _queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, TypeVar

from llmtap._log import internal_error

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["defer", "drain", "start", "tend"]

_A = TypeVar("_A")
_E = TypeVar("_E")

_Item = tuple["Callable[[Any, Any, float, BaseException | None], None]", object, object, float, "BaseException | None"]

_items: SimpleQueue[_Item] = SimpleQueue()
_wakeups: SimpleQueue[None] = SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def defer(
    end: Callable[[_A, _E, float, BaseException | None], None],
    attempt: _A,
    ending: _E,
    at: float,
    exc: BaseException | None,
) -> None:
    """Hand an ending off (safe inside the garbage collector, a finaliser or a signal handler): ``end`` is
    called with the other arguments by the next :func:`drain`."""
    _items.put((end, attempt, ending, at, exc))
    _wakeups.put(None)


def tend() -> None:
    """Called as each attempt begins (an ordinary stack): start the thread if this process has none
    (a forked child), and end what waits. Two global reads when there is nothing to do."""
    if _thread is None:
        start()
    if not _items.empty():
        drain()


def drain() -> None:
    """End every attempt handed off so far, here (an ordinary stack); returns when all have ended."""
    with _lock:
        while True:
            try:
                end, attempt, ending, at, exc = _items.get_nowait()
            except Empty:
                return
            try:
                end(attempt, ending, at, exc)
            except Exception as own:  # never into the caller: a scrape, the next request, uninstrument()
                internal_error("stream", "internal error in a dropped stream's end (request unaffected): %r", own)


def start() -> None:
    """Start the draining thread if this process has none (called from ordinary stacks only)."""
    global _thread
    if _thread is not None:
        return
    with _lock:
        if _thread is None:
            thread = threading.Thread(target=_run, name="llmtap-handoff", daemon=True)
            thread.start()
            _thread = thread


def _run() -> None:
    wakeups = _wakeups  # this process's queue (a forked child gets new ones and a new thread)
    while True:
        wakeups.get()
        drain()


def _after_fork_in_child() -> None:
    """The parent's queue, lock (perhaps held by its thread at the fork) and thread stay behind."""
    global _items, _wakeups, _lock, _thread
    _items = SimpleQueue()
    _wakeups = SimpleQueue()
    _lock = threading.Lock()
    _thread = None


os.register_at_fork(after_in_child=_after_fork_in_child)
