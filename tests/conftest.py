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
    error that no test owns. Collected here, with that warning only (llmtap opens no client sockets)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


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
