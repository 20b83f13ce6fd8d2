"""What an attempt cost in USD, from the tokens it reported and a maintained price table.

Opt-in (``Settings.cost``). Prices come from ``genai-prices`` (Pydantic's MIT price table, also behind
Logfire's costs; ``pip install 'llmtap[cost]'``), or from ``Settings.prices`` for negotiated prices
and self-hosted models, which win over the table. A model neither knows is *unpriced*: counted as
such, never guessed.

Each token type is priced as the provider prices it: uncached input, cache reads and cache writes at
their own rates, output (reasoning included, as providers bill it). The table's per-type rates and
tiers (a long-context rate above some input size) are applied with its own ``calc_unit_price``, so the
types add up to the table's total (tested over the table). ``cache_savings`` is what the cache reads
would have cost as plain input, minus what they cost.

A price is looked up once per (provider, model) and kept (models are bounded labels); pricing an
attempt is then a few multiplications, on the attempt's end.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from llmtap._core import modeltable
from llmtap._core.record import Cost, Usage
from llmtap._log import log_once
from llmtap._settings import ModelPrice

__all__ = ["COST_TYPES", "Pricer", "price_table_version"]

COST_TYPES = ("input", "output", "cache_read", "cache_write")
"""Values of the ``gen_ai.token.type`` attribute on ``llmtap.cost.usd``; ``input`` is uncached input."""

_PER = 1_000_000  # prices are per million tokens
_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")


def price_table_version() -> str | None:
    """``genai-prices``'s version, ``None`` when it is not installed."""
    try:
        from importlib.metadata import version

        return version("genai-prices")
    except Exception:
        return None


class Pricer:
    """Prices attempts: ``Settings.prices`` first, then the table (when installed).

    Raises:
        ImportError: neither ``genai-prices`` is installed nor ``prices`` given (naming the extra).
    """

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self._overrides = dict(prices)
        self._table: Any = None
        try:
            import genai_prices.types as table_types

            self._table = modeltable.load()
            self._unit_price = table_types.calc_unit_price
        except ImportError as exc:
            if not self._overrides:
                raise ImportError(
                    "llmtap: Settings.cost needs a price table: pip install 'llmtap[cost]' (genai-prices), "
                    "or give Settings.prices for your models"
                ) from exc
        self._found: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    @property
    def table(self) -> Any:
        """genai-prices' snapshot (``None`` without genai-prices: ``Settings.prices`` only)."""
        return self._table

    def price(self, provider: str, model: str | None, usage: Usage) -> Cost | None:
        """What ``usage`` cost on ``model`` (``None``: the model has no price)."""
        if not model:
            return None
        prices = self._prices(provider, model)
        return None if prices is None else self._cost(prices, usage)

    def _cost(self, prices: Any, usage: Usage) -> Cost:
        inp = usage.input_tokens or 0
        cache_read = usage.cache_read_tokens or 0
        cache_write = usage.cache_write_tokens or 0
        counts = (max(0, inp - cache_read - cache_write), usage.output_tokens or 0, cache_read, cache_write)
        if isinstance(prices, ModelPrice):
            rates = (
                prices.input,
                prices.output,
                prices.input if prices.cache_read is None else prices.cache_read,
                prices.input if prices.cache_write is None else prices.cache_write,
            )
            costs = [count * rate / _PER for count, rate in zip(counts, rates, strict=True)]
            full_rate = prices.input
        else:
            costs = [self._table_cost(prices, key, count, inp) for key, count in zip(_KEYS, counts, strict=True)]
            full_rate = self._table_cost(prices, "input_mtok", _PER, inp)
        return Cost(costs[0], costs[1], costs[2], costs[3], max(0.0, cache_read * full_rate / _PER - costs[2]))

    def _table_cost(self, prices: Any, key: str, count: int, total_input: int) -> float:
        """``count`` tokens at the table's ``key`` rate and tier; a missing cache rate is the input rate."""
        rate = getattr(prices, key, None)
        if rate is None and key in ("cache_read_mtok", "cache_write_mtok"):
            rate = prices.input_mtok
        if rate is None or not count:
            return 0.0
        return float(self._unit_price(rate, count, total_input, _PER))

    def _prices(self, provider: str, model: str) -> ModelPrice | Any | None:
        key = (provider, model)
        try:
            return self._found[key]
        except KeyError:
            pass
        found = self._overrides.get(model)
        if found is None and self._table is not None:
            found = self._lookup(provider, model)
        with self._lock:
            self._found[key] = found
        if found is None:
            log_once(
                f"unpriced-{provider}-{model}",
                "no price for %s model %r: its cost is counted as unpriced",
                provider,
                model,
            )
        return found

    def _lookup(self, provider: str, model: str) -> Any | None:
        """The table's current prices for the model, or ``None``."""
        model_info = modeltable.find(self._table, provider, model)
        return None if model_info is None else self._lookup_model(model_info)

    def _lookup_model(self, model_info: Any) -> Any | None:
        try:
            return model_info.get_prices(datetime.now(tz=UTC))
        except Exception:
            return None
