"""An observed stream the app abandons in a reference cycle is found by the garbage collector, on
whatever thread happens to allocate, possibly while that thread holds a lock llmtap's ending takes
(prometheus-client's ``labels()`` allocates a child while holding its metric's lock; a sink has its
own). Nothing of llmtap's ending may run inside the collector: ``gc.collect()`` holding any such lock
must return, and the attempt must still be counted, exactly once, at the next scrape.

Each case runs the collection on a thread with a join timeout (``LLMTAPTEST_GC_STALL`` seconds, default
60: a deadlock is forever, so the timeout only has to be generous), and on a hang reports that
thread's stack, then releases the lock from outside so the process (and its collector) recovers.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

import llmtap
from llmtap import Outcome
from llmtap._core import handoff
from llmtap._core.tap import Tap
from llmtap._drive import Config, Sdk, adapter, run
from llmtap._exporters import build
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import sample
from tests.support.gcwatch import InsideGc, LockedSink, collect_holding

STALL = float(os.environ.get("LLMTAPTEST_GC_STALL", "60"))
# held after 3 deltas until the client has gone (2 s at most): the stream cannot end before it is
# abandoned, and the simulator is done with it once the client's connections are closed
SCENARIO = Scenario(tokens=20, stall_at=3, stall=2.0, stall_until_closed=True)


def _abandon(client: Sdk, early: int) -> weakref.ref[Any]:
    """The app asks for a stream, reads ``early`` content pieces of it and drops it (and its iterator) in a
    reference cycle: only the cyclic collector finds it."""
    result = run(client, "hold", "claude-gc", headers=SCENARIO.headers(), early=early)
    assert result.error is None, repr(result.error)
    holder: list[Any] = list(result.value)
    holder.append(holder)
    return weakref.ref(holder[0])


#: unread: nothing closes the response, so only llmtap's finaliser can end the attempt; partly read: the
#: collector also finalises the SDK's generator, whose ``finally`` closes the response (so llmtap's close())
SHAPES: dict[str, int] = {"unread": 0, "partly_read": 1}
# locks on the ending path a collecting thread may hold (None: it holds none). tests/test_handoff.py
# holds each of llmtap's and its libraries' locks with a raw httpx response; these are the SDK's
# shapes (the partly-read one is closed by the SDK generator's ``finally``) and an app's sink lock.
LOCKS: dict[str, Callable[[Tap, LockedSink], Any] | None] = {
    "no_lock": None,
    "sink_lock": lambda tap, sink: sink.lock,
    "prometheus_fold_lock": lambda tap, sink: next(s for s in tap.sinks if s.name == "prometheus")._store._lock,  # type: ignore[attr-defined]
}


@pytest.fixture
def inside() -> Iterator[InsideGc]:
    with InsideGc().installed() as watch:
        yield watch


@pytest.mark.parametrize("lock_name", list(LOCKS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_abandoned_stream_is_ended_outside_the_collector(
    sim: Simulator, inside: InsideGc, shape: str, lock_name: str
) -> None:
    registry = CollectorRegistry()
    sink = LockedSink(inside)
    settings = llmtap.Settings(base_urls=(sim.base_url,), otel_metrics=False)
    exporters = build(settings, registry=registry, tracer_provider=TracerProvider(), drain=handoff.drain)
    tap = Tap(settings, (*exporters.sinks, sink), spans=exporters.spans)
    http = httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport(), tap))
    client = adapter("anthropic", Config(sim.base_url, api_key="k", options={"http_client": http}))
    getter = LOCKS[lock_name]
    lock = None if getter is None else getter(tap, sink)
    try:
        gc.disable()  # no automatic collection between the abandonment and ours
        try:
            stream = _abandon(client, SHAPES[shape])
            # positive control: the stream is garbage that only the cyclic collector can find
            assert stream() is not None
            assert sink.records == []
            thread, errors = collect_holding(lock)
            thread.join(STALL)
            if thread.is_alive():
                frame = sys._current_frames().get(thread.ident or 0)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else "?"
                if lock is not None:
                    lock.release()  # recover: the stuck thread was waiting for the lock it holds
                thread.join(STALL)
                pytest.fail(
                    f"gc.collect() holding {lock_name} did not return in {STALL:.0f} s: llmtap ended the "
                    f"abandoned attempt inside the garbage collector and waited for that lock. "
                    f"The collecting thread's stack:\n{stack}"
                )
        finally:
            gc.enable()
        assert errors == []
        assert stream() is None  # the collection found it
        # one scrape, which is also when queued endings are counted, at the latest
        outcomes = sample(registry, "llmtap_streams_total", outcome=Outcome.ABANDONED.value)
        assert sink.inside_gc == 0, "llmtap called a sink from inside the garbage collector"
        assert [r.outcome for r in sink.records] == [Outcome.ABANDONED]
        assert outcomes == 1
        assert sample(registry, "llmtap_attempts_total") == 1
        assert sample(registry, "llmtap_streams_in_flight") == 0
        assert len(sink.calls) == 1
    finally:
        client.close()
        http.close()  # the connections of an unread stream: the simulator stops holding it
        tap.close()
