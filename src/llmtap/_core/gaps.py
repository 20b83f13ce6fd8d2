"""Chunk timing of one attempt: first and last arrival, and the gaps between chunks (pre-bucketed
counts, sum, maximum, stalls).

A gap is the time between two consecutive body chunks. Most gaps of a fast stream fall in the first
bucket, so that one is tested before any search; the others cost one C-level ``bisect``.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["GapCounter"]


class GapCounter:
    """Counts chunks and the gaps between them: :meth:`tick` once per chunk, with its arrival time.

    ``counts[i]`` is the number of gaps ``<= bounds[i]`` (and above the bound before it); the last
    count is the ``+Inf`` bucket, as a Prometheus histogram counts them.
    """

    __slots__ = ("_bounds", "_first_bound", "_stall", "chunks", "counts", "first", "last", "max", "stalls", "sum")

    def __init__(self, bounds: tuple[float, ...], stall_threshold: float) -> None:
        self._bounds = bounds
        self._first_bound = bounds[0] if bounds else float("inf")
        self._stall = stall_threshold
        self.counts = [0] * (len(bounds) + 1)
        self.chunks = 0
        self.first: float | None = None
        """When the first chunk arrived."""
        self.last = 0.0
        """When the last chunk arrived."""
        self.sum = 0.0
        self.max = 0.0
        self.stalls = 0
        """Gaps longer than the stall threshold."""

    def tick(self, now: float) -> None:
        """One chunk arrived at ``now``: the gap since the previous one (if any) is counted."""
        if self.chunks:
            gap = now - self.last
            self.sum += gap
            if gap <= self._first_bound:  # most gaps of a fast stream: no search needed
                self.counts[0] += 1
            else:
                self.counts[bisect_left(self._bounds, gap)] += 1
            if gap > self.max:
                self.max = gap
            if gap > self._stall:
                self.stalls += 1
        else:
            self.first = now
        self.chunks += 1
        self.last = now
