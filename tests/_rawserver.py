"""Moved to ``tests/support/rawserver.py``:
this name stays only for test_aiohttp.py, test_faults.py (edited by other branches
today); delete it once they import ``tests.support.rawserver``."""

from __future__ import annotations

from tests.support.rawserver import RawServer, Reply, fixture_reply, http_response

__all__ = ["RawServer", "Reply", "fixture_reply", "http_response"]
