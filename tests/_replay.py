"""Moved to ``tests/support/replay.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.replay``."""

from __future__ import annotations

from tests.support.replay import CONFIG, START, make_observer, splits

__all__ = ["CONFIG", "START", "make_observer", "splits"]
