"""The recorded provider responses in ``../shared/fixtures/recorded`` (``LLMTAP_FIXTURES`` overrides)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(os.environ.get("LLMTAP_FIXTURES", Path(__file__).resolve().parents[3] / "shared/fixtures/recorded"))


def recorded_fixtures(pattern: str) -> list[Path]:
    """The recorded provider responses matching ``pattern``; [] when the folder is absent."""
    if not FIXTURES.is_dir():
        return []
    return sorted(FIXTURES.glob(pattern))


def require_fixtures() -> None:
    """Skip (or fail, under CI's LLMTAP_REQUIRE_FIXTURES=1) when the recorded fixtures are absent."""
    if FIXTURES.is_dir():
        return
    message = f"recorded fixtures not found at {FIXTURES} (set LLMTAP_FIXTURES)"
    if os.environ.get("LLMTAP_REQUIRE_FIXTURES") == "1":
        pytest.fail(message)
    pytest.skip(message)
