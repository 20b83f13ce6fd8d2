"""Each model's context window, in tokens: what an attempt's input is measured against.

``Settings.context_windows`` first (self-hosted and fine-tuned models, or a window the table has wrong),
then the ``context_window`` of the genai-prices entry that :func:`llmtap._core.modeltable.find` finds for
the model (the entry that prices it with ``Settings.cost``). A model neither knows has no window: its
attempts are counted as unknown (``llmtap_context_window_unknown_total``), never guessed.

The table is read whenever the process has it, and llmtap never imports it for windows alone: it would add
~170 ms and ~6 MiB of RSS to ``instrument()`` (genai-prices 0.2.5; docs/guides/context-window.md has the
command), more than three times llmtap's own share. So the table is ``Settings.cost``'s (loaded for the prices
anyway and handed over), or the one the application imported itself (found in ``sys.modules``, then free);
otherwise only the overrides count.

A window is looked up once per (provider, model) and kept (models are bounded labels).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any

from llmtap._core import modeltable
from llmtap._log import log_once

__all__ = ["ContextWindows"]

_MISSING = object()
_TABLE_MODULE = "genai_prices.data"
"""genai-prices' data module: once imported, the table's snapshot costs nothing more."""


class ContextWindows:
    """Context windows by model: ``overrides`` first, then the table.

    Args:
        overrides: ``Settings.context_windows``, tokens by model name.
        table: genai-prices' snapshot when the caller has it (``Settings.cost``'s price table); ``None``: the
            table the application imports, if it does.
    """

    def __init__(self, overrides: Mapping[str, int], table: Any = None) -> None:
        self._overrides = dict(overrides)
        self._table = table
        self._found: dict[tuple[str, str], int | None] = {}
        self._lock = threading.Lock()

    @property
    def table(self) -> Any:
        """The genai-prices snapshot read, ``None`` while the process has none."""
        return self._table

    def window(self, provider: str, model: str | None) -> int | None:
        """``model``'s context window in tokens (``None``: unknown)."""
        if not model:
            return None
        key = (provider, model)
        found = self._found.get(key, _MISSING)
        # an unknown one is looked up again once the application has imported the table
        if found is not _MISSING and (found is not None or self._table is not None or _TABLE_MODULE not in sys.modules):
            return found  # type: ignore[return-value]
        window = self._overrides.get(model)
        if window is None:
            table = self._table if self._table is not None else self._imported_table()
            window = None if table is None else _window_of(modeltable.find(table, provider, model))
        with self._lock:
            self._found[key] = window
        if window is None:
            log_once(
                f"no-window-{provider}-{model}",
                "no context window for %s model %r: its attempts are counted in "
                "llmtap_context_window_unknown_total (give it in Settings.context_windows%s)",
                provider,
                model,
                "" if self._table is not None else ", or turn on Settings.cost to read genai-prices' table too",
                level=logging.INFO,  # on by default: a model of its own is no fault to warn about
            )
        return window

    def _imported_table(self) -> Any:
        """The table, when the application has imported genai-prices' data (no import here)."""
        if _TABLE_MODULE not in sys.modules:
            return None
        try:
            self._table = modeltable.load()
        except Exception:
            return None
        return self._table


def _window_of(model_info: Any) -> int | None:
    """The entry's ``context_window`` when it is a positive number of tokens."""
    window = getattr(model_info, "context_window", None)
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
