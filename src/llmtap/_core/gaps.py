"""Chunk timing of one attempt: first and last arrival, and the gaps between chunks (pre-bucketed
counts, sum, maximum, stalls).

A gap is the time between two consecutive body chunks. This runs once per chunk, so it does the least
it can: a gap at or below everything notable so far (the first bucket's bound, the stall threshold and
the longest gap yet) costs one subtraction and one comparison; the first bucket's count and the sum
are derived when read (``chunks - 1`` minus the other counts; ``last - first``). :func:`spread` turns such
counts back into values, for an exporter that can only record one value at a time.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["GapCounter", "spread"]

_INF = float("inf")


@functools.cache
def _zeros(n: int) -> tuple[int, ...]:
    return (0,) * n


class GapCounter:
    """Counts chunks and the gaps between them: :meth:`tick` once per chunk, with its arrival time.

    :meth:`bucket_counts` gives the number of gaps ``<= bounds[i]`` (and above the bound before it), the
    last count being the ``+Inf`` bucket, as a Prometheus histogram counts them.
    """

    __slots__ = (
        "_bounds",
        "_cap",
        "_counts",
        "_first_bound",
        "_low",
        "_stall",
        "chunks",
        "first",
        "last",
        "max",
        "stalls",
    )

    def __init__(self, bounds: tuple[float, ...], stall_threshold: float) -> None:
        self._bounds = bounds
        self._first_bound = first = bounds[0] if bounds else _INF
        self._stall = stall_threshold
        self._cap = first if first < stall_threshold else stall_threshold
        self._low = 0.0
        """Gaps above this need more than counting: min(longest gap yet, first bound, stall threshold)."""
        self._counts: list[int] | None = None
        """Per bucket (the first one derived when read); made by the first gap above the first bound."""
        self.chunks = 0
        self.first: float | None = None
        """When the first chunk arrived."""
        self.last = 0.0
        """When the last chunk arrived."""
        self.max = 0.0
        """The longest gap."""
        self.stalls = 0
        """Gaps longer than the stall threshold."""

    def tick(self, now: float) -> None:
        """One chunk arrived at ``now``: the gap since the previous one (if any) is counted."""
        if self.chunks:
            gap = now - self.last
            if gap > self._low:
                if gap > self._first_bound:
                    counts = self._counts
                    if counts is None:
                        counts = self._counts = [0] * (len(self._bounds) + 1)
                    counts[bisect_left(self._bounds, gap)] += 1
                if gap > self._stall:
                    self.stalls += 1
                if gap > self.max:
                    self.max = gap
                    self._low = gap if gap < self._cap else self._cap
        else:
            self.first = now
        self.chunks += 1
        self.last = now

    @property
    def sum(self) -> float:
        """The sum of the gaps: the time from the first chunk to the last."""
        return 0.0 if self.first is None else self.last - self.first

    def bucket_counts(self) -> tuple[int, ...]:
        counts = self._counts
        gaps = self.chunks - 1 if self.chunks else 0
        if counts is None:  # no gap above the first bound (a body in one chunk: every non-streaming one, nearly)
            return (gaps, *_zeros(len(self._bounds)))
        return (gaps - sum(counts), *counts[1:])

    def summary(self) -> tuple[int, float, int, tuple[int, ...], float]:
        """Chunks, longest gap, stalls, :meth:`bucket_counts` and :attr:`sum`: the record's fields, in its
        order, in one call (the record is built once per attempt)."""
        chunks = self.chunks
        if self._counts is None and chunks < 2:  # a body in one chunk (every non-streaming one, nearly)
            return chunks, self.max, self.stalls, _zeros(len(self._bounds) + 1), 0.0
        first = self.first
        return chunks, self.max, self.stalls, self.bucket_counts(), 0.0 if first is None else self.last - first


def spread(counts: Sequence[int], total: float, bounds: Sequence[float], largest: float) -> list[tuple[float, int]]:
    """Values that, recorded one by one, give a histogram exactly these bucket ``counts``, this sum
    and this maximum: ``(value, how many times)`` pairs.

    ``counts[i]`` counts observations ``v`` with ``bounds[i-1] < v <= bounds[i]`` (the last one: above
    ``bounds[-1]``), ``total`` is their sum and ``largest`` their maximum, as the core aggregates the
    gaps of one attempt. The maximum is recorded as is; every other observation is placed inside its
    bucket at the same fraction of the bucket's width (capped at ``largest``), the fraction chosen
    so the values add up to ``total``. Such values exist because the real observations are some.
    """
    top = max((i for i, c in enumerate(counts) if c), default=-1)
    if top < 0:
        return []
    pairs: list[tuple[float, int]] = [(largest, 1)]
    rest = total - largest
    items: list[tuple[float, float, int]] = []
    for i, count in enumerate(counts):
        n = count - 1 if i == top else count
        if n <= 0:
            continue
        low = 0.0 if i == 0 else math.nextafter(bounds[i - 1], math.inf)
        high = min(bounds[i] if i < len(bounds) else math.inf, largest)
        items.append((low, max(low, high), n))
    room = sum(n * (high - low) for low, high, n in items)
    slack = rest - sum(n * low for low, _, n in items)
    fraction = 0.0 if room <= 0 else min(1.0, max(0.0, slack / room))
    pairs += [(min(high, low + fraction * (high - low)), n) for low, high, n in items]
    return pairs
