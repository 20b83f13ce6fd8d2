"""Which line of an SDK the tests run against: the current one (on httpx2) or the legacy one many apps still
pin (anthropic 0.x, openai 1.x / 2.x, on legacy httpx), which ``make compat`` runs the SDK tests on.

What differs there is the SDK's, never llmtap's reading of the wire: the exception classes it raises, the
options it has (the anthropic SDK's own tracing came with its httpx2 line), and whether leaving a ``for`` loop
closes the response at once (httpx2 does, httpx leaves it to the garbage collector).
"""

from __future__ import annotations

import inspect

import anthropic
import httpx

__all__ = ["ANTHROPIC_HAS_TRACING", "ANTHROPIC_ON_HTTPX", "TIMEOUTS"]

ANTHROPIC_ON_HTTPX = int(anthropic.__version__.split(".")[0]) < 1
"""The anthropic SDK of the legacy line (0.x), whose client is a legacy ``httpx`` one."""

ANTHROPIC_HAS_TRACING = "open_telemetry" in inspect.signature(anthropic.Anthropic.__init__).parameters
"""The anthropic SDK traces its own calls (``open_telemetry=``)."""

TIMEOUTS: tuple[type[BaseException], ...] = (anthropic.APITimeoutError, httpx.TimeoutException)
"""A read timeout as an SDK of either line raises it (with httpx2's class, added where httpx2 is installed)."""
try:
    import httpx2

    TIMEOUTS = (*TIMEOUTS, httpx2.TimeoutException)
except ImportError:  # the legacy line's venv may have no httpx2
    pass
