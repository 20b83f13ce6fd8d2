"""The table of scenario actions and expected outcomes: for each case, how the server answers (a
:class:`~llmtap.simulator.Scenario`), what the app does (an action of :mod:`._actions`), and what
llmtap must record (one outcome per attempt) and the app must see (:data:`Raised`).

The SDKs differ in a few known ways; each difference is a quirk of its case, keyed by the adapter's
name or ``name/mode`` (``gemini/async``), with the reason next to it. :func:`cases` gives the cases
that apply to one SDK and mode with their quirks applied. The tests run every case for every SDK,
mode and transport; the demo, probe, soak and benchmarks take the cases they need by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from llmtap._core.record import Outcome
from llmtap.simulator import Scenario

from ._actions import Action
from ._base import Mode
from ._sdks import SDKS

__all__ = ["BOTOCORE", "CASES", "HELD", "Case", "Raised", "case", "cases"]

#: what the app sees: nothing raised, an HTTP error status or in-band error the SDK raises, a
#: transport error, a timeout; ``unchecked``: the SDK's choice, not asserted
Raised = Literal["nothing", "status", "connection", "timeout", "unchecked"]

C, R = Outcome.COMPLETED, Outcome.REJECTED
ANTHROPICS: Final = ("anthropic", "bedrock", "vertex")
OPENAIS: Final = ("openai-chat", "openai-responses")
BOTOCORE: Final = ("boto3", "boto3-invoke", "aiobotocore", "aiobotocore-invoke")
_BEDROCK_503: Final = Scenario(tokens=3, fail=2, fail_status=503, retry_after=0.01)

#: the server holds the stream after 3 deltas until the client has gone (``stall`` is only a cap): an
#: app that leaves early always leaves before the end, however late its thread or loop is scheduled
HELD: Final = Scenario(tokens=40, stall_at=3, stall=60.0, stall_until_closed=True)


@dataclass(frozen=True)
class Case:
    name: str
    action: Action
    scenario: Scenario
    #: llmtap's outcome of each attempt, in order
    outcomes: tuple[Outcome, ...]
    raised: Raised = "nothing"
    #: the client's retries and timeout (seconds)
    max_retries: int = 2
    timeout: float = 10.0
    modes: tuple[Mode, ...] = ("sync", "async")
    #: the adapters it applies to (None: all)
    only: tuple[str, ...] | None = None
    #: the adapters it does not apply to (each with its reason where the case is written)
    skip: tuple[str, ...] = ()
    #: per adapter (``name`` or ``name/mode``): fields that differ for it
    quirks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def applied(self, sdk: str, mode: Mode) -> Case | None:
        """This case for ``sdk`` in ``mode`` with its quirks applied; None when it does not apply."""
        if (self.only is not None and sdk not in self.only) or sdk in self.skip or mode not in self.modes:
            return None
        changes = {**self.quirks.get(sdk, {}), **self.quirks.get(f"{sdk}/{mode}", {})}
        return dataclasses.replace(self, quirks={}, **changes) if changes else self

    def config(self) -> dict[str, Any]:
        """The client settings of :class:`._base.Config` the case needs (retries, timeout)."""
        return {"max_retries": self.max_retries, "timeout": self.timeout}


# fmt: off
CASES: Final[tuple[Case, ...]] = (
    Case("completed", "stream", Scenario(tokens=6), (C,)),
    Case("non_stream", "create", Scenario(tokens=4), (C,)),
    # botocore (and aiobotocore) read bodies undecoded and ask for no encoding (nor does Bedrock send one)
    Case("gzip", "stream", Scenario(tokens=5, gzip=True), (C,), skip=BOTOCORE),
    Case("helper", "helper", Scenario(tokens=4), (C,), only=ANTHROPICS + OPENAIS),
    Case("raw_response", "raw", Scenario(tokens=5), (C,), only=OPENAIS),
    Case("client_closed", "close", HELD, (Outcome.CLIENT_CLOSED,), quirks={
        # the async SDK's aclose() closes only its outer generator and leaves the response to the event
        # loop's finalisation of async generators
        "gemini/async": {"outcomes": (Outcome.ABANDONED,)},
        # the same for cohere's async generator while the server is still sending (once the whole body
        # had arrived, its close did end the attempt: client_closed)
        "cohere/async": {"outcomes": (Outcome.ABANDONED,)},
    }),
    Case("with_exit", "exit", HELD, (Outcome.CLIENT_CLOSED,), only=ANTHROPICS),
    # dropped unread: the server ends the stream on its own (nothing would close a held one); not ollama,
    # whose stream sends its request at its first read (dropped unread, it sent nothing)
    Case("abandoned", "drop", Scenario(tokens=40, gap=0.002), (Outcome.ABANDONED,),
         only=(*ANTHROPICS, *OPENAIS, *BOTOCORE)),
    Case("abandoned_mid", "drop_read", HELD, (Outcome.ABANDONED,),
         only=(*ANTHROPICS, *OPENAIS, "gemini", *BOTOCORE, "ollama")),
    Case("cancelled", "cancel", HELD, (Outcome.CANCELLED,), modes=("async",),
         only=(*ANTHROPICS, *OPENAIS, "gemini", "aiobotocore", "aiobotocore-invoke", "ollama")),
    Case("error_event", "stream", Scenario(tokens=6, error_event_at=2), (Outcome.SERVER_ERROR,), "status", quirks={
        # these SDKs hand the error event to the app as an event, and raise nothing
        "openai-responses": {"raised": "nothing"}, "cohere": {"raised": "nothing"},
    }),
    Case("dropped", "stream", Scenario(tokens=6, drop_at=2), (Outcome.CONNECTION_ERROR,), "connection"),
    Case("dropped_unary", "create", Scenario(tokens=5, drop_at=2), (Outcome.CONNECTION_ERROR,), "connection",
         max_retries=0, quirks={
             # botocore has urllib3 not enforce content-length and parses the half JSON body it read (the app then
             # finds keys missing); llmtap counts the cut body a connection error all the same
             "boto3": {"raised": "unchecked"}, "aiobotocore": {"raised": "unchecked"},
             # LiteLLM raises its InternalServerError for a cut body
             "litellm": {"raised": "status"},
         }),
    Case("incomplete", "stream", Scenario(tokens=6, no_stop=True), (Outcome.INCOMPLETE,), quirks={
        # LiteLLM raises on a stream that ends without its stop reason (an APIConnectionError)
        "litellm": {"raised": "connection"},
    }),
    # retries: not ollama's (its client never retries; the app sees the first failure)
    Case("retried", "stream", Scenario(tokens=3, fail=2, retry_after=0.01), (R, R, C),
         only=(*ANTHROPICS, *OPENAIS, *BOTOCORE),
         quirks={"bedrock": {"scenario": _BEDROCK_503}, **{name: {"scenario": _BEDROCK_503} for name in BOTOCORE},
                 "openai-chat": {"scenario": Scenario(tokens=3, fail=2, fail_status=429, retry_after=0.01)},
                 "openai-responses": {"scenario": Scenario(tokens=3, fail=2, fail_status=429, retry_after=0.01)}}),
    Case("throttled", "stream", Scenario(tokens=3, fail=1, fail_status=429, retry_after=0.01), (R, C),
         only=(*ANTHROPICS, *OPENAIS, "groq", *BOTOCORE)),
    Case("exhausted", "stream", Scenario(tokens=3, fail=9, fail_status=500, retry_after=0.01), (R, R, R), "status",
         only=(*ANTHROPICS, *BOTOCORE)),
    # the app's own bad request or key: not retried, rejected (not a service-side abort)
    Case("bad_request", "stream", Scenario(tokens=5, fail=1, fail_status=400), (R,), "status",
         only=("anthropic", *OPENAIS, *BOTOCORE, "ollama")),
    Case("bad_key", "stream", Scenario(tokens=5, fail=1, fail_status=401), (R,), "status",
         only=("anthropic", *OPENAIS, "ollama")),
    Case("rejected_503", "stream", Scenario(fail=1, fail_status=503), (R,), "status", max_retries=0),
    Case("rejected_429_unary", "create", Scenario(fail=1, fail_status=429), (R,), "status", max_retries=0),
    # an error event in a non-streaming answer: the simulator answers it with the error's status
    Case("error_status", "create", Scenario(tokens=5, error_event_at=2), (R,), "status", max_retries=0,
         only=("gemini", "ollama")),
    # held after 1 delta until the client times out and leaves (not a fixed 1 s stall the server sits out)
    Case("timeout", "stream", HELD.replace(tokens=4, stall_at=1), (Outcome.TIMEOUT,), "timeout",
         max_retries=0, timeout=0.3),
)
# fmt: on

_BY_NAME: Final = {c.name: c for c in CASES}


def case(name: str) -> Case:
    """The case called ``name`` (no quirks applied)."""
    return _BY_NAME[name]


def cases(sdk: str, mode: Mode) -> Iterator[Case]:
    """The cases that apply to ``sdk`` (a key of :data:`._sdks.SDKS`) in ``mode``, quirks applied."""
    if sdk not in SDKS:
        raise KeyError(sdk)
    for c in CASES:
        applied = c.applied(sdk, mode)
        if applied is not None:
            yield applied
