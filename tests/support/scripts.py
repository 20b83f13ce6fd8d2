"""The repository's scripts (dashboards/build.py, benchmarks/scale.py, examples' apps) loaded as modules."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.paths import ROOT


def load_script(relative: str, name: str) -> ModuleType:
    """``ROOT / relative`` imported once as module ``name`` (kept in ``sys.modules``: dataclasses look it up)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
