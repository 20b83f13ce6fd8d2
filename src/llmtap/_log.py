"""llmtap's own logging: every distinct problem is logged once per process, never per request."""

from __future__ import annotations

import logging
import threading

__all__ = ["log_once", "logger"]

logger = logging.getLogger("llmtap")
_seen: set[str] = set()
_lock = threading.Lock()


def log_once(key: str, msg: str, *args: object, level: int = logging.WARNING) -> None:
    """Log ``msg`` the first time ``key`` is seen in this process; later calls cost a set lookup."""
    if key in _seen:
        return
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    logger.log(level, msg, *args)


def reset() -> None:
    """Forget what was logged (for tests)."""
    with _lock:
        _seen.clear()
