"""Moved to ``tests/support/replay.py``:
this name stays only for test_observer.py, test_first_output.py, test_wire_values.py (edited by other branches
today); delete it once they import ``tests.support.replay``."""

from __future__ import annotations

from tests.support.replay import CONFIG, START, make_observer, splits

__all__ = ["CONFIG", "START", "make_observer", "splits"]
