"""Test helpers for the garbage-collector hazard: who runs inside the collector, and a stall watchdog.

llmtap must run nothing of its own inside the garbage collector (a finaliser or a generator closed by
the collector runs on whatever thread allocated last, possibly while that thread holds a lock the
ending needs). :class:`InsideGc` tells a sink whether it is being called from inside a collection;
:class:`Watchdog` turns a hang into a failure with every thread's stack.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord

__all__ = ["InsideGc", "LockedSink", "Watchdog", "collect_holding", "gc_pressure", "thread_stacks"]


class InsideGc:
    """While installed, :meth:`now` is True on a thread that is running a garbage collection
    (its finalisers and weakref callbacks included)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _phase(self, phase: str, info: dict[str, Any]) -> None:
        self._local.active = phase == "start"

    def now(self) -> bool:
        return bool(getattr(self._local, "active", False))

    @contextmanager
    def installed(self) -> Iterator[InsideGc]:
        gc.callbacks.append(self._phase)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._phase)


@contextmanager
def gc_pressure(threshold: tuple[int, ...]) -> Iterator[None]:
    """Aggressive collection: ``threshold`` for ``gc.set_threshold``, and everything alive now frozen out
    of the collector's view, so full collections (the ones that find garbage older than a request)
    are not postponed by the size of the imported modules' heap."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*threshold)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def thread_stacks() -> str:
    """Every thread's Python stack, named."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"--- thread {names.get(ident, '?')} ({ident}) ---\n{stack}")
    return "\n".join(parts)


class Watchdog:
    """Fails a run that stops making progress.

    A daemon thread reads ``progress()`` every second; if its value has not changed for ``stall``
    seconds it dumps every thread's stack (``faulthandler`` to stderr, and into :attr:`stalled`, the
    message the waiting thread raises). The waiting thread must wait through :meth:`wait_for`, never
    by blocking on the work itself. If that thread is stuck too (so cannot raise), after ``grace``
    more seconds the process exits with status 70 rather than hang the suite.
    """

    def __init__(self, progress: Callable[[], Hashable], stall: float, what: str, grace: float = 30.0) -> None:
        self._progress = progress
        self._stall = stall
        self._what = what
        self._grace = grace
        self.stalled: str | None = None
        self._acknowledged = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._acknowledged.set()

    def _watch(self) -> None:
        last = self._progress()
        since = time.monotonic()
        while not self._stop.wait(1.0):
            now = self._progress()
            if now != last:
                last, since = now, time.monotonic()
                continue
            if time.monotonic() - since < self._stall:
                continue
            stacks = thread_stacks()
            self.stalled = (
                f"{self._what}: no progress for {self._stall:.0f} s (stuck at {last!r}): a hang. "
                f"Every thread's stack:\n{stacks}"
            )
            print(f"\n{self._what}: STALL, no progress for {self._stall:.0f} s; all threads:", file=sys.stderr)
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
            if not self._acknowledged.wait(self._grace):
                print(f"{self._what}: the waiting thread is stuck too; exiting (status 70)", file=sys.stderr)
                sys.stderr.flush()
                os._exit(70)
            return

    def wait_for(self, predicate: Callable[[], bool], poll: float = 0.2) -> None:
        """Return when ``predicate()`` is true; raise ``AssertionError`` (with every stack) on a stall."""
        while not predicate():
            if self.stalled is not None:
                self._acknowledged.set()
                raise AssertionError(self.stalled)
            time.sleep(poll)


class LockedSink:
    """A sink as an app might write one: a plain (non-reentrant) lock, allocation under it."""

    name = "locked"

    def __init__(self, inside: InsideGc) -> None:
        self.lock = threading.Lock()
        self.records: list[AttemptRecord] = []
        self.calls: list[CallRecord] = []
        self.inside_gc = 0
        self._inside = inside

    def start(self, attempt: AttemptStart) -> object:
        return None

    def end(self, record: AttemptRecord, state: object) -> None:
        inside = self._inside.now()
        with self.lock:
            self.records.append(record)
            self.inside_gc += inside

    def call_end(self, record: CallRecord) -> None:
        with self.lock:
            self.calls.append(record)

    def close(self) -> None:
        pass


def collect_holding(lock: Any) -> tuple[threading.Thread, list[BaseException]]:
    """``gc.collect()`` on a new thread while it holds ``lock`` (if any)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            if lock is None:
                gc.collect()
                return
            lock.acquire()
            try:
                gc.collect()
            finally:
                with contextlib.suppress(RuntimeError):  # released from outside to recover from a hang
                    lock.release()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="collector", daemon=True)
    thread.start()
    return thread, errors
