"""Summaries, least-squares fits and their confidence intervals, stdlib only.

The Student-t and F quantiles come from the regularized incomplete beta function (a continued
fraction, as in Numerical Recipes §6.4) and bisection; no scipy needed.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "LinearFit",
    "Summary",
    "betainc",
    "f_quantile",
    "f_sf",
    "fit_line",
    "median_ci",
    "percentile",
    "summarize",
    "t_quantile",
]


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def f_sf(f: float, d1: float, d2: float) -> float:
    """P(F > f) for an F(d1, d2) variable."""
    if f <= 0:
        return 1.0
    return betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def _bisect(func: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The x in [lo, hi...] where the increasing ``func`` reaches ``target``."""
    while func(hi) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if func(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``t_quantile(0.975, 10)`` = 2.228)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    return _bisect(lambda t: _t_cdf(t, df), p, 0.0, 10.0)


def f_quantile(p: float, d1: float, d2: float) -> float:
    """The ``p`` quantile of the F(d1, d2) distribution (``f_quantile(0.95, 2, 10)`` = 4.103)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    return _bisect(lambda f: 1.0 - f_sf(f, d1, d2), p, 0.0, 10.0)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (``q`` in 0..100) of a non-empty sequence."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: order statistics ``x(j) .. x(n+1-j)``
    with the largest ``j`` whose binomial(n, 1/2) coverage is at least ``confidence``.

    With fewer than 6 values no such interval reaches 95 %: the full range is returned.
    """
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    best = 0  # 0-based lower index
    for j in range(n // 2):
        # coverage of [x(j), x(n-1-j)] (0-based) = 1 - 2 * P(Bin(n, 1/2) <= j)
        tail = sum(math.comb(n, i) for i in range(j + 1)) / 2.0**n
        if 1.0 - 2.0 * tail >= confidence:
            best = j + 1
        else:
            break
    lo = max(0, best - 1) if best else 0
    return xs[lo], xs[n - 1 - lo]


@dataclass(frozen=True)
class Summary:
    """Distribution of one measurement over N requests (seconds, or tokens/s)."""

    n: int
    mean: float
    stdev: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float
    #: mean absolute difference between consecutive requests (RFC 3550-style jitter)
    jitter: float
    #: 95 % distribution-free confidence interval of the median
    p50_ci: tuple[float, float]


def summarize(values: Sequence[float]) -> Summary | None:
    """A :class:`Summary` in request order, or ``None`` for no values."""
    xs = list(values)
    if not xs:
        return None
    jitter = statistics.fmean(abs(b - a) for a, b in itertools.pairwise(xs)) if len(xs) > 1 else 0.0
    return Summary(
        n=len(xs),
        mean=statistics.fmean(xs),
        stdev=statistics.stdev(xs) if len(xs) > 1 else 0.0,
        min=min(xs),
        p50=percentile(xs, 50),
        p90=percentile(xs, 90),
        p99=percentile(xs, 99),
        max=max(xs),
        jitter=jitter,
        p50_ci=median_ci(xs),
    )


@dataclass(frozen=True)
class LinearFit:
    """Ordinary least squares ``y ≈ a + b·x`` with 95 % Student-t confidence intervals."""

    n: int
    a: float
    b: float
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    #: residual standard deviation (seconds)
    s: float
    r2: float
    x_min: float
    x_max: float
    x_mean: float
    sxx: float

    def predict(self, x: float) -> float:
        return self.a + self.b * x

    def band(self, x: float, confidence: float = 0.95) -> float:
        """Half-width of the Working-Hotelling simultaneous confidence band of the fitted line at ``x``
        (it covers the true line at every ``x`` at once, with probability ``confidence``)."""
        w = math.sqrt(2.0 * f_quantile(confidence, 2, self.n - 2))
        return w * self.s * math.sqrt(1.0 / self.n + (x - self.x_mean) ** 2 / self.sxx)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
    """OLS fit; ``None`` when it is not identifiable (fewer than 3 points or a single x value)."""
    n = len(xs)
    if n != len(ys) or n < 3:
        return None
    xm, ym = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - xm) ** 2 for x in xs)
    if sxx <= 0:
        return None
    sxy = sum((x - xm) * (y - ym) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx
    a = ym - b * xm
    rss = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    syy = sum((y - ym) ** 2 for y in ys)
    s = math.sqrt(rss / (n - 2))
    se_b = s / math.sqrt(sxx)
    se_a = s * math.sqrt(1.0 / n + xm * xm / sxx)
    t = t_quantile(0.975, n - 2)
    return LinearFit(
        n=n,
        a=a,
        b=b,
        a_ci=(a - t * se_a, a + t * se_a),
        b_ci=(b - t * se_b, b + t * se_b),
        s=s,
        r2=1.0 - rss / syy if syy > 0 else 1.0,
        x_min=min(xs),
        x_max=max(xs),
        x_mean=xm,
        sxx=sxx,
    )
