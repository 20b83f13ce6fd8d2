"""A meter provider that is exporting when its process forks (gunicorn ``--preload`` under ``llmtap run``).

``llmtap run`` builds the OpenTelemetry providers in the process that forks the workers. In a forked
child the SDK restarts the periodic reader's thread and renews the provider's own locks, but not the
two locks that thread holds while it works: the measurement consumer's (held for a whole collection:
callbacks, then every aggregation) and the reader's export lock (held while the exporter sends). A
fork that lands while the parent's reader collects or exports leaves them held, in the child, by a
thread the child does not have:

- export lock: the child's reader collects and then waits for that lock for ever; not one metric of
  that worker is ever exported (its spans are: the span processor has no such lock);
- mid-collection: the storage and aggregation locks may be held too, and the child's first
  ``record()`` of an instrument waits on them for ever, inside the user's request.

OpenTelemetry's documentation lists pre-fork servers' metrics as a known problem. The parent's
reader exports every ``OTEL_METRIC_EXPORT_INTERVAL``, for as long as the collector takes to answer,
so the slower the collector (a loaded machine), the likelier a fork lands inside an export.

So before a fork llmtap takes those locks itself, waiting at most :data:`WAIT` seconds for a
collection or export in flight to end, and lets them go after the fork in both processes: the child
starts with nothing half done. A lock not taken in time (an exporter stuck on a collector that does
not answer) is replaced in the child with a new one, as the SDK does for its own locks; for the export
lock that is always safe (it only keeps two exports of one process apart, and the child has no export
in flight). Only the SDK's own ``MeterProvider`` and readers are touched, each attribute read with a
default, so another SDK version at worst gets the SDK's own behaviour back.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

__all__ = ["WAIT", "guard"]

WAIT = 1.0
"""Seconds a fork waits, in all, for the parent's collection or export in flight to end."""

_providers: weakref.WeakSet[Any] = weakref.WeakSet()
_forking = threading.Lock()  # one fork at a time through the hooks below (two threads may fork at once)
# (owner, attribute name, acquired) for each lock taken or tried before the fork in progress
_taken: list[tuple[Any, str, bool]] = []


def guard(meter_provider: Any) -> None:
    """Keep ``meter_provider``'s collections and exports out of forks (an SDK ``MeterProvider``; any
    other provider is left alone). Idempotent; called where llmtap first records into a provider."""
    if getattr(meter_provider, "_measurement_consumer", None) is not None:  # the SDK's (weak-referenceable)
        _providers.add(meter_provider)


def _locks() -> list[tuple[Any, str]]:
    """Each reader's export lock, then the consumer's collection lock (the reader thread takes the
    collection lock and lets it go before it takes the export lock, never both: no order to deadlock on)."""
    out: list[tuple[Any, str]] = []
    for provider in list(_providers):
        for reader in getattr(provider, "_metric_readers", ()):
            if _is_lock(getattr(reader, "_export_lock", None)):
                out.append((reader, "_export_lock"))
        consumer = getattr(provider, "_measurement_consumer", None)
        if _is_lock(getattr(consumer, "_lock", None)):
            out.append((consumer, "_lock"))
    return out


def _is_lock(lock: object) -> bool:
    return isinstance(lock, type(threading.Lock()))


def _before() -> None:
    _forking.acquire()
    deadline = time.monotonic() + WAIT
    for owner, name in _locks():
        lock = getattr(owner, name)
        acquired = lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        _taken.append((owner, name, acquired))


def _after_in_parent() -> None:
    for owner, name, acquired in reversed(_taken):
        if acquired:
            getattr(owner, name).release()
    _taken.clear()
    _forking.release()


def _after_in_child() -> None:
    for owner, name, acquired in reversed(_taken):
        if acquired:
            getattr(owner, name).release()
        else:  # held by a thread of the parent's: the child has no such thread
            setattr(owner, name, threading.Lock())
    _taken.clear()
    _forking.release()


os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)
