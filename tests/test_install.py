"""What a new user installs: ``make demo`` only the demo extra, ``make test`` the toolchain, and every extra
the README and the getting-started page name exists."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _installs(target: str, tmp_path: Path) -> list[str]:
    """The ``pip install`` lines ``make TARGET`` would run for a fresh virtualenv (dry run)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    out = subprocess.run(
        [make, "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if "pip install" in line and "--upgrade pip" not in line]


def test_make_demo_installs_only_the_demo_extra(tmp_path: Path) -> None:
    (line,) = _installs("demo", tmp_path)
    assert line.endswith("-e '.[demo]'"), line


def test_make_test_installs_the_toolchain(tmp_path: Path) -> None:
    (line,) = _installs("test", tmp_path)
    assert line.endswith("-e '.[dev]'"), line


def test_quick_start_is_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in quick.strip().splitlines()] == ["make demo", "make test"]


def test_every_extra_the_readme_names_exists() -> None:
    provided = set(importlib.metadata.metadata("llmtap").get_all("Provides-Extra") or [])
    named = set(re.findall(r"llmtap\[([a-z0-9-]+)\]", README))
    assert {"otel", "run", "probe", "demo"} <= named  # positive control: the README's Install section was read
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    install = guide.split("## Install", 1)[1].split("\n## ", 1)[0]
    table = set(re.findall(r"^\| `([a-z0-9-]+)` \|", install, re.M))
    assert {"otel", "run", "probe", "demo", "dev"} <= table  # positive control: the extras table was read
    named |= table | set(re.findall(r"llmtap\[([a-z0-9-]+)\]", guide))
    assert named <= provided, named - provided
