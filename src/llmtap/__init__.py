"""llmtap: client-side telemetry for LLM API traffic, measured from the bytes on the wire.

Quick use::

    import llmtap
    llmtap.instrument()          # httpx + httpx2 clients, so the anthropic/openai SDKs too

Every HTTP attempt to a known LLM API becomes one :class:`AttemptRecord`, exported as Prometheus
metrics and an OpenTelemetry span, whatever way its stream ends (see :class:`Outcome`).
"""

import typing as _typing

from llmtap._core.attributes import attributes
from llmtap._core.headers import RawRateLimits
from llmtap._core.record import AttemptRecord, AttemptStart, CallRecord, Cost, Outcome, RateLimit, Usage
from llmtap._core.tap import Tap
from llmtap._hooks.httpx_transport import wrap_transport
from llmtap._lifecycle import instrument, uninstrument
from llmtap._settings import ModelPrice, Settings
from llmtap._version import __version__

if _typing.TYPE_CHECKING:
    from llmtap._instrumentor import LlmtapInstrumentor

__all__ = [
    "AttemptRecord",
    "AttemptStart",
    "CallRecord",
    "Cost",
    "LlmtapInstrumentor",
    "ModelPrice",
    "Outcome",
    "RateLimit",
    "RawRateLimits",
    "Settings",
    "Tap",
    "Usage",
    "__version__",
    "attributes",
    "instrument",
    "uninstrument",
    "wrap_transport",
]


def __getattr__(name: str) -> _typing.Any:
    # The OpenTelemetry instrumentor pulls in OpenTelemetry's instrumentation machinery (about 1.6 MiB of
    # modules); only opentelemetry-instrument / llmtap run and explicit users of it pay for that.
    if name == "LlmtapInstrumentor":
        try:
            from llmtap._instrumentor import LlmtapInstrumentor
        except ImportError as exc:  # opentelemetry-instrumentation is an extra
            raise ImportError(
                f"llmtap.LlmtapInstrumentor needs opentelemetry-instrumentation: pip install 'llmtap[otel]' ({exc})"
            ) from exc
        return LlmtapInstrumentor
    raise AttributeError(f"module 'llmtap' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "LlmtapInstrumentor"})
