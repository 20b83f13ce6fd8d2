"""The gap counter: chunk timing and gap statistics of one attempt."""

from __future__ import annotations

import bisect
import itertools
import random

import pytest

from llmtap._core.gaps import GapCounter


def test_first_chunk_has_no_gap() -> None:
    gaps = GapCounter((0.1, 1.0), stall_threshold=0.5)
    gaps.tick(2.0)
    assert (gaps.first, gaps.last, gaps.chunks) == (2.0, 2.0, 1)
    assert gaps.bucket_counts() == (0, 0, 0) and gaps.sum == 0.0 and gaps.max == 0.0 and gaps.stalls == 0


def test_gaps_are_bucketed_summed_and_stalls_counted() -> None:
    gaps = GapCounter((0.1, 1.0), stall_threshold=0.5)
    for now in (0.0, 0.05, 0.15, 0.75, 2.75):  # gaps 0.05, 0.1, 0.6, 2.0
        gaps.tick(now)
    assert gaps.bucket_counts() == (2, 1, 1)  # <= 0.1 (the bound itself included), <= 1.0, +Inf
    assert gaps.sum == pytest.approx(2.75)
    assert gaps.max == pytest.approx(2.0)
    assert gaps.stalls == 2  # 0.6 and 2.0 exceed 0.5
    assert (gaps.first, gaps.last, gaps.chunks) == (0.0, 2.75, 5)


def test_no_bounds_counts_every_gap_in_the_one_bucket() -> None:
    gaps = GapCounter((), stall_threshold=10.0)
    for now in (0.0, 5.0, 6.0):
        gaps.tick(now)
    assert gaps.bucket_counts() == (2,) and gaps.stalls == 0


@pytest.mark.parametrize("seed", range(20))
def test_the_same_as_counting_every_gap(seed: int) -> None:
    """Against the plain way: every gap bucketed, summed, compared with the maximum and the threshold."""
    rng = random.Random(seed)
    bounds = (0.01, 0.05, 0.1, 1.0)
    stall = rng.choice((0.005, 0.07, 0.5, 5.0))
    times = [0.0]
    for _ in range(rng.randint(0, 300)):
        times.append(times[-1] + rng.choice((0.0, 0.001, 0.01, 0.02, 0.06, 0.3, 2.0)) * rng.random())
    gaps = GapCounter(bounds, stall)
    for now in times:
        gaps.tick(now)
    plain = [b - a for a, b in itertools.pairwise(times)]
    expected = [0] * (len(bounds) + 1)
    for gap in plain:
        expected[bisect.bisect_left(bounds, gap)] += 1
    assert gaps.bucket_counts() == tuple(expected)
    assert gaps.max == max(plain, default=0.0)
    assert gaps.stalls == sum(gap > stall for gap in plain)
    assert gaps.sum == pytest.approx(sum(plain))
    assert gaps.chunks == len(times)
    assert gaps.summary() == (gaps.chunks, gaps.max, gaps.stalls, gaps.bucket_counts(), gaps.sum)


@pytest.mark.parametrize("ticks", [(), (1.0,), (1.0, 1.0), (1.0, 1.05), (1.0, 3.0)])
def test_the_summary_is_the_record_fields(ticks: tuple[float, ...]) -> None:
    """What the record builder takes in one call, with the one-chunk shortcut among them."""
    gaps = GapCounter((0.1, 1.0), stall_threshold=0.5)
    for now in ticks:
        gaps.tick(now)
    assert gaps.summary() == (gaps.chunks, gaps.max, gaps.stalls, gaps.bucket_counts(), gaps.sum)
