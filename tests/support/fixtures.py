"""The recorded provider responses in ``../shared/fixtures/recorded`` (``LLMTAPTEST_FIXTURES`` overrides)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(os.environ.get("LLMTAPTEST_FIXTURES", Path(__file__).resolve().parents[3] / "shared/fixtures/recorded"))


def recorded_fixtures(pattern: str) -> list[Path]:
    """The recorded provider responses matching ``pattern``; [] when the folder is absent."""
    if not FIXTURES.is_dir():
        return []
    return sorted(FIXTURES.glob(pattern))


def require_fixtures() -> None:
    """Skip (or fail, under CI's LLMTAPTEST_REQUIRE_FIXTURES=1) when the recorded fixtures are absent."""
    if FIXTURES.is_dir():
        return
    message = f"recorded fixtures not found at {FIXTURES} (set LLMTAPTEST_FIXTURES)"
    if os.environ.get("LLMTAPTEST_REQUIRE_FIXTURES") == "1":
        pytest.fail(message)
    pytest.skip(message)
