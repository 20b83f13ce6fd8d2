"""Moved to ``tests/support/gcwatch.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.gcwatch``."""

from __future__ import annotations

from tests.support.gcwatch import InsideGc, Watchdog, gc_pressure

__all__ = ["InsideGc", "Watchdog", "gc_pressure"]
