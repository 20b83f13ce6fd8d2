"""The soak's own instruments work: the watchdog turns a hang into a failure naming the stuck thread,
and InsideGc tells code run by the collector from code run on an ordinary stack."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from tests.support.gcwatch import InsideGc, Watchdog


def _stuck_forever(release: threading.Event) -> None:
    release.wait()  # the stuck thread's frame, which the failure must show


def test_the_watchdog_fails_a_stall_with_every_thread_stack() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=_stuck_forever, args=(release,), name="stuck-worker", daemon=True)
    stuck.start()
    try:
        with Watchdog(lambda: 0, stall=1.0, what="toy") as watchdog, pytest.raises(AssertionError) as failure:
            watchdog.wait_for(lambda: False)  # never true, and nothing progresses: a hang
    finally:
        release.set()
    message = str(failure.value)
    assert message.startswith("toy: no progress for 1 s")
    assert "--- thread stuck-worker" in message
    assert "_stuck_forever" in message


def test_the_watchdog_lets_a_progressing_run_finish() -> None:
    done = threading.Event()
    steps = [0]

    def work() -> None:
        for _ in range(50):
            steps[0] += 1
        done.set()

    with Watchdog(lambda: steps[0], stall=60.0, what="toy") as watchdog:
        threading.Thread(target=work, daemon=True).start()
        watchdog.wait_for(done.is_set)
        assert watchdog.stalled is None
    assert steps[0] == 50


def test_inside_gc_tells_a_finaliser_from_an_ordinary_stack() -> None:
    seen: list[bool] = []

    class Node:
        pass

    with InsideGc().installed() as inside:
        seen.append(inside.now())  # ordinary stack
        node = Node()
        node.self = node  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        weakref.finalize(node, lambda: seen.append(inside.now()))
        del node
        gc.collect()
        seen.append(inside.now())
    assert seen == [False, True, False]
