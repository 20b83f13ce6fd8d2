"""Moved to ``tests/support/rawserver.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.rawserver``."""

from __future__ import annotations

from tests.support.rawserver import RawServer, Reply, fixture_reply, http_response

__all__ = ["RawServer", "Reply", "fixture_reply", "http_response"]
