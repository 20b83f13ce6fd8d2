"""genai-prices' model table, read one way: loaded once, a model found by one rule for both of its uses.

The price of an attempt (:mod:`llmtap._core.cost`, ``Settings.cost``) and the context window its input is
measured against (:mod:`llmtap._core.windows`) come from the same entry of the table: the one
:func:`find` returns for the attempt's provider and model. Importing the table costs (genai-prices 0.2.5:
~170 ms and ~6 MiB of RSS), so nothing here imports it at module level; :func:`load` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TABLE_PROVIDERS", "find", "load"]

TABLE_PROVIDERS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "aws.bedrock": "aws",
}
"""llmtap's ``gen_ai.provider.name`` -> genai-prices' provider id (the others are looked up by model only;
Claude on Vertex is in the table's "google" entries, Bedrock's model ids only in its "aws" ones)."""


def load() -> Any:
    """The table's current snapshot (genai-prices' bundled data, or the one its auto-update set).

    Raises:
        ImportError: genai-prices is not installed.
    """
    from genai_prices import data_snapshot

    return data_snapshot.get_snapshot()


def find(table: Any, provider: str, model: str) -> Any | None:
    """The table's entry (a ``ModelInfo``) for ``model`` as ``provider`` serves it, or ``None``."""
    try:
        _, model_info = table.find_provider_model(model, None, TABLE_PROVIDERS.get(provider), None)
    except Exception:  # LookupError when unknown; anything else from the table is treated the same
        return None
    return model_info
