"""The abort phase: one stream per way a client can end it early, and what that really produces on
both sides (llmtap's outcome, the client's exception, the status, final usage, the server's view).

Each way is one row of :data:`MODES`: how it is done, the outcome llmtap should record, and the
driver's action (:mod:`llmtap._drive`) that does it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from llmtap._core.record import Outcome
from llmtap._drive import Action, Case, Mode, case

from ._driver import exception_name, prompt
from ._report import AbortResult
from ._session import Session
from ._words import plural

__all__ = ["ENDED_FIRST", "MODES", "SHORT_ANSWERS", "AbortMode", "run"]


ENDED_FIRST = "the answer ended before the abort could happen"
SHORT_ANSWERS = (
    "some aborts were not tested: the answers ended before the abort could happen; ask for longer ones "
    "(--max-tokens), and start `llmtap simulate` with --scenario fill,count_input,ttft=0.05,gap=0.004 "
    "(without fill it ignores max_tokens and answers 5 tokens in ~2 ms)"
)
"""The probe's note when an answer was too short to abort (``llmtap simulate``'s default answer is)."""


@dataclass(frozen=True)
class AbortMode:
    """One way to end a stream early: a case of the driver's table (:data:`llmtap._drive.CASES`), whose
    action and mode the probe does, on its own endpoint, and whose outcome llmtap should record."""

    name: str
    case: Case
    #: how it is done, in words (``{read_ms}`` and ``{why}`` are the read timeout and its reason)
    how: str
    #: the mode sets a read timeout (the other modes use the budget's request timeout)
    read_timeout: bool = False

    @property
    def expected(self) -> Outcome:
        return self.case.outcomes[-1]

    @property
    def action(self) -> Action:
        return self.case.action

    @property
    def mode(self) -> Mode:
        return self.case.modes[0]


# fmt: off
MODES: tuple[AbortMode, ...] = (
    AbortMode("close",   case("client_closed"), "read until the first content token, then stream.close()"),
    AbortMode("cancel",  case("cancelled"),
              "asyncio task reading the stream, cancelled after the first content token"),
    AbortMode("drop",    case("abandoned_mid"),
              "read until the first content token, then drop the stream unclosed (del + gc)"),
    AbortMode("timeout", case("timeout"),       "read timeout of {read_ms:.0f} ms ({why}), no retries",
              read_timeout=True),
)
# fmt: on


def run(s: Session, model: str, min_ttft: float | None) -> list[AbortResult]:
    """Every mode once, in table order, while the budget allows. The read timeout is half the fastest
    TTFT seen (so the stream times out before its first token), 100 ms when none was measured."""
    read = max(0.005, (min_ttft if min_ttft is not None else 0.2) / 2)
    why = "half the fastest TTFT seen" if min_ttft is not None else "no TTFT was measured"
    results: list[AbortResult] = []
    for i, mode in enumerate(MODES):
        if not s.budget.allow("aborts"):
            break
        s.progress("aborts", i, len(MODES))
        total = s.budget.request_timeout()
        timeout = s.driver.timeout(read, total) if mode.read_timeout else total
        results.append(_one(s, mode, model, timeout, mode.how.format(read_ms=read * 1000, why=why)))
    s.progress("aborts", len(MODES), len(MODES))
    if any(r.ended_first for r in results):
        s.notes.append(SHORT_ANSWERS)
    return results


def _one(s: Session, mode: AbortMode, model: str, timeout: Any, how: str) -> AbortResult:
    before = len(s.capture.records)
    # the embedded simulator plays the case's own server side (a read timeout then meets a held stream,
    # not a race between the client thread and a 50 ms first token); an endpoint answers as it does
    headers = mode.case.scenario.headers() if s.sim is not None and mode.read_timeout else None
    result = s.driver.call(mode.action, model, s.options.max_tokens, prompt(0), timeout=timeout, mode=mode.mode,
                           headers=headers)  # fmt: skip
    records = s.records_since(before)
    raised = asyncio.CancelledError() if result.cancelled else result.error
    exc_name = exception_name(raised) if raised is not None else None
    token_seen = result.first_token
    if not records:
        return AbortResult(mode.name, how, "not recorded", mode.expected.value, exc_name, None, token_seen,
                           False, None, None, None, "llmtap recorded no attempt")  # fmt: skip
    record = records[0]
    served = s.served(record.request_id)
    final_usage = bool(record.stop_reasons)
    status = record.status_code
    parts = [f"llmtap outcome {record.outcome.value}"]
    if record.outcome is Outcome.COMPLETED and mode.expected is not Outcome.COMPLETED:
        parts.insert(0, ENDED_FIRST)
    parts.append(f"status {status}" if status is not None else "no HTTP status (no response headers)")
    parts.append(f"client saw {exc_name}" if exc_name else "client saw no exception")
    parts.append("final usage arrived" if final_usage else "no final usage (the stream ended before message end)")
    if status is not None and 200 <= status < 300:
        parts.append("no error status or error body follows an abort: the status was already 200")
    if served is not None:
        parts.append(f"simulator recorded {served.outcome_sent} after {plural(served.deltas_sent, 'delta')}")
    return AbortResult(
        mode=mode.name,
        how=how,
        outcome=record.outcome.value,
        expected=mode.expected.value,
        client_exception=exc_name,
        status=status,
        first_token_seen=token_seen or record.first_token_at is not None,
        final_usage=final_usage,
        input_tokens=record.usage.input_tokens,
        output_tokens=record.usage.output_tokens,
        server_saw=served.outcome_sent if served is not None else None,
        finding="; ".join(parts),
    )
