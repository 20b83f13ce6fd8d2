"""Moved to ``tests/support/prom.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.prom``."""

from __future__ import annotations

from tests.support.prom import ALERTS, DASHBOARDS, ROOT, SLO_RULES, load_build, require, rule_groups, rules

__all__ = ["ALERTS", "DASHBOARDS", "ROOT", "SLO_RULES", "load_build", "require", "rule_groups", "rules"]
