"""llmtap's own logging and failure counts.

- :func:`log_once`: a problem with the *input* (a malformed header, an oversized event) is logged
  the first time it is seen in the process, never per request; the attempt counts it in its
  ``parse_errors``.
- :func:`internal_error`: llmtap *itself* failed (a sink raised, a parser bug, the clock). Every
  occurrence is counted by where it happened (:data:`INTERNAL_WHERE`) and logged at most once per
  :data:`LOG_INTERVAL` seconds per ``where``, with the number not logged since the last line.
- :func:`label_overflow`: a label value was replaced by the overflow value (see ``_core/bounds.py``).

The counts are plain ints under a lock, read only when metrics are collected
(``llmtap_internal_errors_total{where}``, ``llmtap_label_overflows_total{label}``), so the request
path pays one lock per failure and nothing otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

__all__ = [
    "INTERNAL_WHERE",
    "LOG_INTERVAL",
    "internal_error",
    "internal_errors",
    "label_overflow",
    "label_overflows",
    "log_once",
    "logger",
    "quiet",
    "without_prefix",
]

logger = logging.getLogger("llmtap")
"""llmtap's one logger. Its messages do not repeat its name (``WARNING:llmtap:ignoring …`` under
``logging.basicConfig``); where nothing would show the name, it is added (:class:`_Named`)."""

INTERNAL_WHERE: tuple[str, ...] = ("sink", "parser", "stream", "call", "sdk_hook", "other")
"""Where an internal failure happened: an exporter (``sink``), a provider parser or the observer
(``parser``), the stream shells and clock (``stream``), logical-call book-keeping (``call``), the
SDK method hook (``sdk_hook``), anything else (``other``)."""

LOG_INTERVAL = 60.0
"""Seconds between two log lines about the same kind of internal failure."""

_seen: set[str] = set()
_lock = threading.Lock()
_internal: dict[str, int] = dict.fromkeys(INTERNAL_WHERE, 0)
_overflows: dict[str, int] = {}
_last_logged: dict[str, tuple[float, int]] = {}  # where -> (monotonic time logged, occurrences since)


class _Named(logging.Filter):
    """An app that configured no logging gets Python's last-resort handler, which prints a record's message
    alone: then the message says whose it is (``llmtap: …``). A message naming a command (``llmtap run: …``)
    already does."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.msg.startswith("llmtap") and not logger.hasHandlers():
            record.msg = "llmtap: " + record.msg
        return True


logger.addFilter(_Named())


def log_once(key: str, msg: str, *args: object, level: int = logging.WARNING) -> None:
    """Log ``msg`` the first time ``key`` is seen in this process; later calls cost a set lookup."""
    if key in _seen:
        return
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    logger.log(level, msg, *args)


def internal_error(where: str, msg: str, *args: object) -> None:
    """Count one internal failure at ``where`` and log it: at most one line per ``where`` every
    :data:`LOG_INTERVAL` seconds, saying how many were not logged since.

    Never raises (it runs in ``except`` blocks on the request path).
    """
    try:
        now = time.monotonic()
        with _lock:
            bucket = where if where in _internal else "other"
            _internal[bucket] += 1
            last = _last_logged.get(bucket)
            if last is not None and now - last[0] < LOG_INTERVAL:
                _last_logged[bucket] = (last[0], last[1] + 1)
                return
            suppressed = last[1] if last is not None else 0
            _last_logged[bucket] = (now, 0)
        if suppressed:
            logger.warning(msg + " (%d more like it since the last report)", *args, suppressed)
        else:
            logger.warning(msg, *args)
    except Exception:  # a broken log handler is not the request's problem
        pass


def label_overflow(label: str) -> None:
    """Count one label value replaced by the overflow value."""
    with _lock:
        _overflows[label] = _overflows.get(label, 0) + 1


def internal_errors() -> dict[str, int]:
    """Internal failures so far in this process, by :data:`INTERNAL_WHERE` (a copy)."""
    with _lock:
        return dict(_internal)


def label_overflows() -> dict[str, int]:
    """Label values replaced by the overflow value so far, by label name (a copy)."""
    with _lock:
        return dict(_overflows)


def reset() -> None:
    """Forget what was logged (for tests); counts are never reset: they are monotonic counters."""
    with _lock:
        _seen.clear()
        _last_logged.clear()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Drop llmtap's log records inside the block (a check whose findings another process reports)."""

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class without_prefix(logging.Formatter):  # a formatter class, named for what it does
    """A formatter for the command line: ``LEVEL name: message``, where a message that already names an
    llmtap command (``llmtap run: …``) is not given the logger's name again."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # logging's name
        if (record.name == "llmtap" or record.name.startswith("llmtap.")) and record.message.startswith("llmtap"):
            return f"{record.levelname} {record.message}"
        return super().formatMessage(record)
