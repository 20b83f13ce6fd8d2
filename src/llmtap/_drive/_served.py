"""Test helpers of the driver: names unique to one call, and the simulator's records of that call."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from llmtap.simulator import Served, Simulator

__all__ = ["fresh_model", "served_for"]

_serial: Final = itertools.count()


def fresh_model(base: str) -> str:
    """``base-N``, a model name no other call of this process uses: the simulator's records of earlier
    calls (a stalled handler may still log) are never mistaken for this call's."""
    return f"{base}-{next(_serial)}"


def served_for(sim: Simulator, model: str, count: int, timeout: float = 5.0) -> list[Served]:
    """The simulator's records of the requests for ``model``, once at least ``count`` have finished (or
    what there is after ``timeout`` seconds), in the order received."""
    deadline = time.monotonic() + timeout
    while True:
        mine = [s for s in sim.wait_served(0) if s.model == model]
        if len(mine) >= count or time.monotonic() > deadline:
            return mine
        time.sleep(0.005)
