"""The pytest fixtures: one simulator for the session, a fresh llmtap capture per test (helpers: tests/support/)."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest

import llmtap
from llmtap.simulator import Simulator
from llmtap.testing import Capture, capture


@pytest.fixture(scope="session", autouse=True)
def _collect_leftovers_quietly() -> Iterator[None]:
    """Torn down last: collect what the tests left in reference cycles before pytest's own final check.

    Some tests abandon SDK streams on purpose (the garbage collector must find them); the client
    connection such a stream held is the app's to close, and in a whole-suite run one of them can stay
    unclosed until the interpreter's last collection, where its ``ResourceWarning`` is turned into an
    error that no test owns. Collected here, with that warning only (llmtap opens no client sockets),
    once what ``_freeze_what_is_alive`` froze is back in the collector's view."""
    yield
    gc.unfreeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(autouse=True)
def _freeze_what_is_alive() -> None:
    """Before each test: what is alive now (the SDKs the tests imported and what they built lazily, pytest's
    own objects, the fixtures') is frozen out of the collector's view, after a collection (no garbage is
    frozen).

    A full ``gc.collect()`` (``llmtap._drive`` runs one after every call, so that a dropped stream is found)
    then walks only what the test made, not every module's objects again: ~0.3-0.5 s a collection under
    load without it, hundreds of them. Garbage the test makes is collected as before; an older object that
    becomes cyclic garbage waits for the collection at the end of the session. ``gc_pressure``'s
    ``unfreeze()`` (the soak) is undone at the next test. This collection may close a client connection an
    earlier test's abandoned stream held: its ``ResourceWarning`` is ignored, as at the end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def cap(sim: Simulator) -> Iterator[Capture]:
    """A fresh capture; the shared simulator's records start here too (``clear()`` also drops the records of
    requests an earlier test left in flight, so what a test counts is exactly what it started)."""
    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), stall_threshold_seconds=0.15)
    with capture(settings) as captured:
        yield captured
