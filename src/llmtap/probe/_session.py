"""What every phase of one probe run shares: the SDK driver, llmtap's records, the time budget, the
header log, the simulator (when it is the target) and the notes for the report."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmtap._core.record import AttemptRecord, CallRecord
from llmtap.simulator import Served, Simulator
from llmtap.testing import Capture

from ._driver import SdkDriver
from ._headers import HeaderLog
from ._options import ProbeOptions

__all__ = ["Budget", "Progress", "Session"]

#: progress(phase, done, total)
Progress = Callable[[str, int, int], None]


class Budget:
    """The probe's total time: no request starts after it runs out and none runs past it."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        #: which phase the budget ran out in, in words (None: it did not)
        self.exhausted: str | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def allow(self, phase: str) -> bool:
        if self.left() > 0.05:
            return True
        if self.exhausted is None:
            self.exhausted = f"the time budget ran out before the {phase} phase finished"
        return False

    def request_timeout(self, cap: float = 60.0) -> float:
        return max(0.05, min(cap, self.left()))


def _silent(phase: str, done: int, total: int) -> None:
    pass


@dataclass
class Session:
    """One probe run as every phase sees it; the phases add to ``notes`` and read the rest."""

    options: ProbeOptions
    driver: SdkDriver
    capture: Capture
    budget: Budget
    headers: HeaderLog
    #: the embedded simulator, when it is the target (its own records are the ground truth)
    sim: Simulator | None = None
    progress: Progress = _silent
    notes: list[str] = field(default_factory=list)
    #: when the first measured request started (the origin of ``Sample.started``)
    t0: float | None = None

    def records_since(self, before: int, count: int = 1, timeout: float = 5.0) -> list[AttemptRecord]:
        """The attempts recorded after the first ``before``, waiting (up to ``timeout``) for ``count``."""
        with contextlib.suppress(TimeoutError):
            self.capture.wait(before + count, timeout=timeout)
        return self.capture.records[before:]

    def calls_since(self, before: int, count: int = 1, timeout: float = 5.0) -> list[CallRecord]:
        """The calls recorded after the first ``before``, waiting (up to ``timeout``) for ``count``."""
        with contextlib.suppress(TimeoutError):
            self.capture.wait(0, calls=before + count, timeout=timeout)
        return self.capture.calls[before:]

    def served(self, request_id: str | None, timeout: float = 1.0) -> Served | None:
        """The simulator's own record of the request (None: not the simulator, or not found in time)."""
        if self.sim is None or request_id is None:
            return None
        deadline = time.monotonic() + timeout
        while True:
            for served in reversed(self.sim.served):
                if served.request_id == request_id:
                    return served
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
