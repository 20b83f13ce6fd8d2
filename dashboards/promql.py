"""PromQL over an llmtap histogram, written once for both kinds Prometheus stores.

A histogram reaches Prometheus either classic (``x_bucket`` by ``le``, ``x_count``, ``x_sum``: llmtap's
``/metrics``, explicit-bucket OTLP) or native (one series ``x``: OTLP exponential histograms through a
Collector, Mimir or Prometheus' OTLP receiver, with native histograms on). Each function here asks its question
both ways and joins the answers with ``or``, so the dashboards and rules answer from whichever kind exists: per
series, so a fleet half-way between the two counts every worker, and a series stored both ways (Prometheus'
``scrape_classic_histograms``) counts once, from its classic side (``or`` keeps the left of equal label sets).

Where the two differ: the classic side counts under a bucket boundary exactly; the native side estimates (it
interpolates inside the exponential bucket that holds the bound; ``docs/guides/fleet.md`` gives the error
measured). Quantiles are estimates on both sides.

``window`` is a range (``5m``, ``$__rate_interval``); ``matchers`` label matchers (``job="a"``, empty ones
skipped); ``fn`` the range function (``rate`` or ``increase``). The results are unparenthesised ``a or b``:
wrap them before ``*`` or ``/``.

Standard library only, loaded by ``dashboards/slo.py`` (and through it by ``dashboards/build.py``).
"""

from __future__ import annotations

__all__ = ["count", "matchers", "quantile", "total", "under"]


def matchers(*parts: str) -> str:
    """A label selector of the non-empty ``parts`` (``{a="1", b=~"2"}``), or nothing."""
    inner = ", ".join(p for p in parts if p)
    return "{" + inner + "}" if inner else ""


def count(name: str, window: str, *selector: str, fn: str = "rate") -> str:
    """Observations per series: ``fn`` of the histogram's count."""
    s = matchers(*selector)
    return f"{fn}({name}_count{s}[{window}]) or histogram_count({fn}({name}{s}[{window}]))"


def total(name: str, window: str, *selector: str, fn: str = "rate") -> str:
    """The observed values' sum per series: ``fn`` of the histogram's sum."""
    s = matchers(*selector)
    return f"{fn}({name}_sum{s}[{window}]) or histogram_sum({fn}({name}{s}[{window}]))"


def under(name: str, bound: str, window: str, *selector: str, fn: str = "rate") -> str:
    """Observations at or under ``bound`` per series (spelt as the ``le`` label spells it: a bucket boundary of
    the classic side, exact there; the native side's is an estimate). The classic side drops ``le`` so that both
    sides carry the same labels."""
    le = 'le="' + bound + '"'
    classic = f"sum without (le) ({fn}({name}_bucket{matchers(*selector, le)}[{window}]))"
    native = f"{fn}({name}{matchers(*selector)}[{window}])"
    return f"{classic} or histogram_fraction(-Inf, {bound}, {native}) * histogram_count({native})"


def quantile(q: float, name: str, by: str, window: str, *selector: str) -> str:
    """The ``q`` quantile per ``by`` group (``by`` empty: one over everything selected)."""
    s = matchers(*selector)
    classic_by = f"le, {by}" if by else "le"
    native_sum = f"sum by ({by})" if by else "sum"
    return (
        f"histogram_quantile({q}, sum by ({classic_by}) (rate({name}_bucket{s}[{window}])))"
        f" or histogram_quantile({q}, {native_sum} (rate({name}{s}[{window}])))"
    )
