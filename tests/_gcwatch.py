"""Moved to ``tests/support/gcwatch.py``:
this name stays only for test_abandoned_in_gc.py, test_soak.py (edited by other branches
today); delete it once they import ``tests.support.gcwatch``."""

from __future__ import annotations

from tests.support.gcwatch import InsideGc, Watchdog, gc_pressure

__all__ = ["InsideGc", "Watchdog", "gc_pressure"]
