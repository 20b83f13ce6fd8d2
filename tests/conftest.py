"""Shared fixtures: one simulator for the session, a fresh llmtap capture per test."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import llmtap
from llmtap.simulator import Simulator
from llmtap.testing import Capture, capture

FIXTURES = Path(os.environ.get("LLMTAP_FIXTURES", Path(__file__).resolve().parents[2] / "shared/fixtures/recorded"))


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
    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), stall_threshold_seconds=0.15)
    with capture(settings) as captured:
        yield captured


def recorded_fixtures(pattern: str) -> list[Path]:
    """The recorded provider responses matching ``pattern``; [] when the folder is absent."""
    if not FIXTURES.is_dir():
        return []
    return sorted(FIXTURES.glob(pattern))


def require_fixtures() -> None:
    """Skip (or fail, under CI's LLMTAP_REQUIRE_FIXTURES=1) when the recorded fixtures are absent."""
    if FIXTURES.is_dir():
        return
    message = f"recorded fixtures not found at {FIXTURES} (set LLMTAP_FIXTURES)"
    if os.environ.get("LLMTAP_REQUIRE_FIXTURES") == "1":
        pytest.fail(message)
    pytest.skip(message)
