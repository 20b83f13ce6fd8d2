"""The typed report :func:`run_probe` returns. Every number comes from llmtap's own attempt records."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmtap._core.record import Outcome

from ._stats import LinearFit, Summary

__all__ = [
    "SCHEMA_VERSION",
    "AbortResult",
    "ClaimResult",
    "ExitStatus",
    "HeaderInfo",
    "HeaderReport",
    "ModelLatency",
    "ProbeReport",
    "RetryStep",
    "Sample",
    "SimTruth",
    "Target",
    "ThrottleReport",
    "Unseen",
    "completed",
]


#: the version of :meth:`ProbeReport.to_dict`'s layout (``schema_version`` in ``--json``): raised when a
#: field is removed or renamed or changes meaning; new fields do not raise it
SCHEMA_VERSION = 1


class ExitStatus(enum.IntEnum):
    """``llmtap probe``'s exit status, for CI checks (:attr:`ProbeReport.exit_status`)."""

    #: every claim holds (or none was given)
    OK = 0
    #: a claim does not hold
    CLAIM_FAILS = 1
    #: a bad command line (the command reports it in one line)
    USAGE = 2
    #: a claim could not be tested (too few usable measurements), and none failed
    UNTESTED = 3
    #: nothing to measure: no request got an HTTP response (the cause is reported, e.g. connection
    #: refused, DNS), or the endpoint refused the first request (401/403/404: key, URL or model)
    CANNOT_PROBE = 4


@dataclass(frozen=True)
class ClaimResult:
    """One claim and what the measurements say about it."""

    #: "header" | "ttft" | "latency"
    kind: str
    claim: str
    #: True: consistent with the measurements; False: contradicted; None: not enough data to say
    holds: bool | None
    #: the test used, in one sentence
    test: str
    #: what was measured, in plain words
    finding: str


@dataclass(frozen=True)
class Target:
    provider: str
    #: the base URL probed (credentials in it are never kept)
    base_url: str
    #: True when the embedded simulator was probed (no API key given)
    simulated: bool
    #: the behaviour injected into the simulator (``x-llmtap-sim`` syntax), when simulated
    sim_scenario: str | None
    models: tuple[str, ...]
    sdk: str
    llmtap_version: str
    started_at: str
    seconds: float
    budget_seconds: float
    #: why the probe stopped before finishing every phase (the budget ran out), or None
    stopped_early: str | None


@dataclass(frozen=True)
class HeaderInfo:
    name: str
    meaning: str
    #: responses that carried it
    present: int
    #: an example value (None when withheld: account identifiers)
    example: str | None


@dataclass(frozen=True)
class HeaderReport:
    #: HTTP responses seen (every attempt of every phase)
    responses: int
    headers: tuple[HeaderInfo, ...]
    #: names of the other response headers seen (values not kept)
    other_names: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One latency-phase streaming request, as llmtap recorded it (seconds from sending the request)."""

    model: str
    max_tokens: int
    prompt_words: int
    outcome: str
    status: int | None
    error_type: str | None
    time_to_headers: float | None
    time_to_first_chunk: float | None
    time_to_first_token: float | None
    duration: float
    input_tokens: int | None
    output_tokens: int | None
    #: decode rate: (output tokens - 1) / (end - first content token)
    tokens_per_second: float | None
    #: seconds since the probe's first request started
    started: float
    request_id: str | None
    #: simulator only: the TTFT the simulator was told to inject for this request (after its preamble)
    injected_ttft: float | None = None
    #: simulator only: llmtap's first-token time minus the moment the simulator wrote that token
    first_token_lag: float | None = None


@dataclass(frozen=True)
class SimTruth:
    """Simulator only: what was injected, next to what the probe measured."""

    injected_ttft_p50: float
    #: request received → first token written, on the server's clock (same process)
    server_ttft_p50: float
    #: client first-token time minus the server's write time (loopback + SDK + llmtap)
    first_token_lag_p50: float
    injected_gap: float


@dataclass(frozen=True)
class ModelLatency:
    model: str
    requests: int
    completed: int
    outcomes: dict[str, int]
    time_to_headers: Summary | None
    time_to_first_chunk: Summary | None
    time_to_first_token: Summary | None
    duration: Summary | None
    tokens_per_second: Summary | None
    #: duration ≈ a + b x output_tokens
    duration_fit: LinearFit | None
    #: TTFT ≈ a + b x input_tokens
    ttft_fit: LinearFit | None
    #: TTFT ≈ a + b x seconds since the first request (drift)
    ttft_drift: LinearFit | None
    truth: SimTruth | None = None


@dataclass(frozen=True)
class AbortResult:
    #: "close" | "cancel" | "drop" | "timeout"
    mode: str
    how: str
    #: llmtap's outcome class (``llmtap.Outcome`` value) for the attempt
    outcome: str
    expected: str
    #: what the client code saw raised (None: nothing)
    client_exception: str | None
    status: int | None
    first_token_seen: bool
    #: the provider's final usage (with the stop reason) arrived
    final_usage: bool
    input_tokens: int | None
    output_tokens: int | None
    #: simulator only: what the server recorded for the request
    server_saw: str | None
    finding: str

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.expected

    @property
    def ended_first(self) -> bool:
        """The answer was complete before the abort could happen (too short to abort): untested, not wrong."""
        return self.outcome == "completed" and self.expected != "completed"


@dataclass(frozen=True)
class RetryStep:
    attempt: int
    status: int | None
    outcome: str
    #: the server-advised wait llmtap parsed (retry-after-ms, else retry-after), seconds
    advised: float | None
    #: the SDK's actual pause before the next attempt (next start - this end), seconds
    waited: float | None
    retry_after_header: str | None
    retry_after_ms_header: str | None


@dataclass(frozen=True)
class ThrottleReport:
    calls: int
    throttled_calls: int
    steps: tuple[RetryStep, ...]
    finding: str


@dataclass(frozen=True)
class Unseen:
    what: str
    why: str
    stand_in: str
    #: the stand-in's measured value, when there is one
    measured: str | None


@dataclass(frozen=True)
class ProbeReport:
    """Everything :func:`llmtap.probe.run_probe` measured. ``to_json()`` for machines."""

    target: Target
    headers: HeaderReport
    latency: tuple[ModelLatency, ...]
    claims: tuple[ClaimResult, ...]
    aborts: tuple[AbortResult, ...]
    throttle: ThrottleReport | None
    unseen: tuple[Unseen, ...]
    #: the probe's own traffic as llmtap's Prometheus metrics counted it (sample name{labels} → value)
    metrics: dict[str, float]
    samples: tuple[Sample, ...]
    notes: tuple[str, ...] = ()
    #: the claims as given (``--expect-latency``, ``--expect-ttft``)
    expect_latency: str | None = None
    expect_ttft: str | None = None
    #: why nothing could be measured (e.g. ``cannot reach https://x: connection refused``), or None
    cannot_probe: str | None = None

    @property
    def exit_status(self) -> ExitStatus:
        """Nothing measured (4) before a claim that does not hold (1) before one left untested (3)."""
        if self.cannot_probe is not None:
            return ExitStatus.CANNOT_PROBE
        verdicts = {c.holds for c in self.claims}
        if False in verdicts:
            return ExitStatus.CLAIM_FAILS
        if None in verdicts:
            return ExitStatus.UNTESTED
        return ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: ``schema_version`` and ``exit_status`` first, then the fields."""
        data = dataclasses.asdict(self)
        for abort, raw in zip(self.aborts, data["aborts"], strict=True):
            raw["as_expected"] = abort.as_expected
            raw["ended_first"] = abort.ended_first
        result: dict[str, Any] = _finite(
            {"schema_version": SCHEMA_VERSION, "exit_status": int(self.exit_status), **data}
        )
        return result

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def completed(samples: Iterable[Sample], model: str) -> list[Sample]:
    """``model``'s samples whose stream completed: what the latency fits, the plots and the claims read."""
    return [s for s in samples if s.model == model and s.outcome == Outcome.COMPLETED.value]
