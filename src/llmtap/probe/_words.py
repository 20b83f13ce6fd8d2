"""Numbers in words, the same way in every finding and every output format."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["counts", "plural"]


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """``plural(1, "delta")`` → ``"1 delta"``, ``plural(3, "delta")`` → ``"3 deltas"``."""
    return f"{n} {singular if n == 1 else plural_form or singular + 's'}"


def counts(tally: Mapping[str, int]) -> str:
    """``{"completed": 18, "timeout": 2}`` → ``"18 completed, 2 timeout"`` (largest first; "none" when empty)."""
    ordered = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {name}" for name, n in ordered) or "none"
