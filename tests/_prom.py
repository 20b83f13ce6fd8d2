"""What the dashboard, alert and live-Prometheus tests share: paths, the dashboards builder, the
rule file, and the rule for a missing ``prometheus`` / ``promtool`` (skip, or fail under CI)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
ALERTS = DASHBOARDS / "alerts.yaml"


def require(binary: str) -> str:
    """The path of ``binary``; skips the test when missing, or fails it with LLMTAP_REQUIRE_PROMETHEUS=1."""
    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} not found (apt-get install prometheus)"
        if os.environ.get("LLMTAP_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(msg + " and LLMTAP_REQUIRE_PROMETHEUS=1")
        pytest.skip(msg)
    return path


def load_build() -> ModuleType:
    """``dashboards/build.py`` as a module (it is a script, not part of the package)."""
    name = "llmtap_dashboards_build"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DASHBOARDS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"]]
