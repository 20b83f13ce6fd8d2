"""The abort phase: one stream per way a client can end it early, and what that really produces on
both sides (llmtap's outcome, the client's exception, the status, final usage, the server's view).

Each way is one row of :data:`MODES`: how it is done, the outcome llmtap should record, and the
function that does it.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmtap._core.record import Outcome

from ._driver import SdkDriver, exception_name, prompt
from ._report import AbortResult
from ._session import Session
from ._words import plural

__all__ = ["MODES", "AbortMode", "run"]


@dataclass
class _Try:
    """One abort attempt as the client saw it."""

    #: the SDK client's timeout (a number, or the SDK's Timeout for the read-timeout mode)
    timeout: Any
    token_seen: bool = False


def _to_first_token(driver: SdkDriver, events: Any, attempt: _Try) -> None:
    for event in events:
        if driver.is_content(event):
            attempt.token_seen = True
            return


def _close(s: Session, model: str, attempt: _Try) -> None:
    with s.driver.client(timeout=attempt.timeout) as client:
        stream = s.driver.open(client, model, s.options.max_tokens, prompt(0))
        _to_first_token(s.driver, stream, attempt)
        stream.close()


def _drop(s: Session, model: str, attempt: _Try) -> None:
    with s.driver.client(timeout=attempt.timeout) as client:
        stream = s.driver.open(client, model, s.options.max_tokens, prompt(0))
        iterator = iter(stream)
        _to_first_token(s.driver, iterator, attempt)
        del stream, iterator
        gc.collect()


def _read_until_timeout(s: Session, model: str, attempt: _Try) -> None:
    with s.driver.client(timeout=attempt.timeout) as client:
        for event in s.driver.open(client, model, s.options.max_tokens, prompt(0)):
            attempt.token_seen = attempt.token_seen or s.driver.is_content(event)


def _cancel(s: Session, model: str, attempt: _Try) -> None:
    asyncio.run(_cancel_task(s, model, attempt))


async def _cancel_task(s: Session, model: str, attempt: _Try) -> None:
    """A task reads the stream; it is cancelled once the first content token arrived (or it ended).
    Whatever the task raised (CancelledError above all) is raised here."""
    first = asyncio.Event()

    async def consume() -> None:
        stream = await s.driver.aopen(client, model, s.options.max_tokens, prompt(0))
        async for event in stream:
            if s.driver.is_content(event):
                first.set()

    client = s.driver.async_client(timeout=attempt.timeout)
    try:
        task = asyncio.create_task(consume())
        waiter = asyncio.create_task(first.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        task.cancel()
        attempt.token_seen = first.is_set()
        await task
    finally:
        await client.close()


@dataclass(frozen=True)
class AbortMode:
    name: str
    #: the outcome llmtap should record
    expected: Outcome
    #: does it: opens a stream of the model and ends it early
    act: Callable[[Session, str, _Try], None]
    #: how it is done, in words (``{read_ms}`` and ``{why}`` are the read timeout and its reason)
    how: str
    #: the mode sets a read timeout (the other modes use the budget's request timeout)
    read_timeout: bool = False


# fmt: off
MODES: tuple[AbortMode, ...] = (
    AbortMode("close",   Outcome.CLIENT_CLOSED, _close,
              "read until the first content token, then stream.close()"),
    AbortMode("cancel",  Outcome.CANCELLED,     _cancel,
              "asyncio task reading the stream, cancelled after the first content token"),
    AbortMode("drop",    Outcome.ABANDONED,     _drop,
              "read until the first content token, then drop the stream unclosed (del + gc)"),
    AbortMode("timeout", Outcome.TIMEOUT,       _read_until_timeout,
              "read timeout of {read_ms:.0f} ms ({why}), no retries", read_timeout=True),
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
        attempt = _Try(s.driver.timeout(read, total) if mode.read_timeout else total)
        results.append(_one(s, mode, model, attempt, mode.how.format(read_ms=read * 1000, why=why)))
    s.progress("aborts", len(MODES), len(MODES))
    return results


def _one(s: Session, mode: AbortMode, model: str, attempt: _Try, how: str) -> AbortResult:
    before = len(s.capture.records)
    raised: BaseException | None = None
    try:
        mode.act(s, model, attempt)
    except (Exception, asyncio.CancelledError) as exc:
        raised = exc
    gc.collect()
    records = s.records_since(before)
    exc_name = exception_name(raised) if raised is not None else None
    if not records:
        return AbortResult(mode.name, how, "not recorded", mode.expected.value, exc_name, None, attempt.token_seen,
                           False, None, None, None, "llmtap recorded no attempt")  # fmt: skip
    record = records[0]
    served = s.served(record.request_id)
    final_usage = bool(record.stop_reasons)
    status = record.status_code
    parts = [f"llmtap outcome {record.outcome.value}"]
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
        first_token_seen=attempt.token_seen or record.first_token_at is not None,
        final_usage=final_usage,
        input_tokens=record.usage.input_tokens,
        output_tokens=record.usage.output_tokens,
        server_saw=served.outcome_sent if served is not None else None,
        finding="; ".join(parts),
    )
