"""Moved to ``tests/support/deploy.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.deploy``."""

from __future__ import annotations

from tests.support.deploy import Scrape, free_port, histogram_count, instances, posts, spans, wait_http, wait_until

__all__ = ["Scrape", "free_port", "histogram_count", "instances", "posts", "spans", "wait_http", "wait_until"]
