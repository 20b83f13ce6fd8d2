"""The suite's own layout rules (tests/README.md): no test module imports another test module (what two of
them share lives in ``tests/support/``), and every support module is listed in ``tests/support/__init__.py``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str, filename: str = "<source>") -> list[str]:
    """The test modules (``test_*``) that ``source`` imports, in any spelling (absolute, relative, ``from
    tests import test_x``), inside functions too."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [name for name in names if any(part.startswith("test_") for part in name.split("."))]
    return found


def test_no_test_module_imports_another() -> None:
    checked = sorted(TESTS.rglob("*.py"))
    assert len([f for f in checked if f.name.startswith("test_")]) > 50  # the glob found the suite
    offenders = {
        str(f.relative_to(TESTS)): found
        for f in checked
        if (found := imported_test_modules(f.read_text(encoding="utf-8"), str(f)))
    }
    assert offenders == {}, f"test modules imported (move what they share to tests/support/): {offenders}"


def test_the_import_check_finds_every_spelling() -> None:
    """Positive control: each way of importing a test module is found; support modules and names that only
    contain ``test_`` are not."""
    for source in (
        "from tests.test_tracing import Spans",
        "import tests.test_tracing",
        "from . import test_providers as first_output",
        "from .test_metrics import record",
        "from tests import test_sdk_cases",
        "import test_metrics",
        "def f():\n    from tests.test_metrics import call\n",
    ):
        assert imported_test_modules(source), source
    assert imported_test_modules("from tests.support.records import record\nimport pytest\nimport latest_x") == []


def test_every_support_module_is_listed() -> None:
    """``tests/support/__init__.py`` names each module it holds, one a concern."""
    listing = (TESTS / "support" / "__init__.py").read_text(encoding="utf-8")
    modules = sorted(f.stem for f in (TESTS / "support").glob("*.py") if f.stem != "__init__")
    assert len(modules) > 5  # the glob found them
    assert [m for m in modules if f"``{m}``" not in listing] == []
