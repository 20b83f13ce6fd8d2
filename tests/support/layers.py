"""One request through two hooked layers (an httpx client over an aiohttp transport): the outer hook observes
it, the inner one passes it through because the shells' "already observing" flag is set. The controls of the
"counted once" tests take that flag away to show the inner hook does see the request."""

from __future__ import annotations

import pytest

from llmtap._core import stream as _stream

__all__ = ["every_layer_observes"]


class _NeverObserving:
    """Stands in for the shells' "already observing" flag: always says no, so every hooked layer observes."""

    def get(self) -> bool:
        return False

    def set(self, value: bool) -> object:
        return None

    def reset(self, token: object) -> None:
        return None


def every_layer_observes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test ends, each hooked layer a request passes observes it (the control of counting once)."""
    monkeypatch.setattr(_stream, "OBSERVING", _NeverObserving())
