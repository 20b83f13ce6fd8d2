"""The gap counter: chunk timing and gap statistics of one attempt."""

from __future__ import annotations

import pytest

from llmtap._core.gaps import GapCounter


def test_first_chunk_has_no_gap() -> None:
    gaps = GapCounter((0.1, 1.0), stall_threshold=0.5)
    gaps.tick(2.0)
    assert (gaps.first, gaps.last, gaps.chunks) == (2.0, 2.0, 1)
    assert gaps.counts == [0, 0, 0] and gaps.sum == 0.0 and gaps.max == 0.0 and gaps.stalls == 0


def test_gaps_are_bucketed_summed_and_stalls_counted() -> None:
    gaps = GapCounter((0.1, 1.0), stall_threshold=0.5)
    for now in (0.0, 0.05, 0.15, 0.75, 2.75):  # gaps 0.05, 0.1, 0.6, 2.0
        gaps.tick(now)
    assert gaps.counts == [2, 1, 1]  # <= 0.1 (the bound itself included), <= 1.0, +Inf
    assert gaps.sum == pytest.approx(2.75)
    assert gaps.max == pytest.approx(2.0)
    assert gaps.stalls == 2  # 0.6 and 2.0 exceed 0.5
    assert (gaps.first, gaps.last, gaps.chunks) == (0.0, 2.75, 5)


def test_no_bounds_counts_every_gap_in_the_one_bucket() -> None:
    gaps = GapCounter((), stall_threshold=10.0)
    for now in (0.0, 5.0, 6.0):
        gaps.tick(now)
    assert gaps.counts == [2] and gaps.stalls == 0
