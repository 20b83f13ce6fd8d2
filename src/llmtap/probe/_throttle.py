"""The throttle phase (``--throttle``): get one call retried after a 429/529, then set the server's
advised wait (``retry-after-ms``, else ``retry-after``) beside the pause the SDK really took.

On the simulator one call is told to get 429 twice; on a real endpoint a bounded burst of one-token
requests runs until one call is retried (or the burst ends)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from llmtap._core.record import CallRecord
from llmtap.simulator import Scenario

from ._driver import exception_name, prompt
from ._report import RetryStep, ThrottleReport
from ._session import Session
from ._words import plural

__all__ = ["run"]

#: the SDK's retries in this phase
_RETRIES = 2
_BURST_THREADS = 8


def run(s: Session, model: str) -> ThrottleReport:
    return _told(s, model) if s.sim is not None else _burst(s, model)


def _told(s: Session, model: str) -> ThrottleReport:
    told = Scenario.parse(s.options.sim_scenario).replace(fail=2, fail_status=429, retry_after=0.25)
    before = len(s.capture.calls)
    s.progress("throttle", 0, 1)
    sdk = s.driver.sdk(timeout=s.budget.request_timeout(), max_retries=_RETRIES)
    try:
        error = s.driver.stream(sdk, model, 8, prompt(0), told.headers()).error
    finally:
        sdk.close()
    if error is not None:
        s.notes.append(f"throttle call: {exception_name(error)}")
    s.progress("throttle", 1, 1)
    how = f"the simulator was told to answer 429 twice with retry-after 0.25 s (SDK max_retries={_RETRIES})"
    return _report(s, s.calls_since(before), how)


def _burst(s: Session, model: str) -> ThrottleReport:
    n = s.options.throttle_requests
    before = len(s.capture.calls)
    found = threading.Event()
    done = 0
    lock = threading.Lock()

    def one(_: int) -> None:
        nonlocal done
        if found.is_set() or not s.budget.allow("throttle"):
            return
        sdk = s.driver.sdk(timeout=s.budget.request_timeout(30), max_retries=_RETRIES)
        try:
            s.driver.stream(sdk, model, 1, "Say OK.")  # failures are what this phase provokes: llmtap's records
        finally:  # say what they were
            sdk.close()
        with lock:
            done += 1
            s.progress("throttle", done, n)
        if any(c.attempts > 1 for c in s.capture.calls[before:]):
            found.set()

    with ThreadPoolExecutor(max_workers=_BURST_THREADS) as pool:
        list(pool.map(one, range(n)))
    how = f"a burst of up to {n} one-token requests, {_BURST_THREADS} at a time (SDK max_retries={_RETRIES})"
    return _report(s, s.capture.calls[before:], how)


def _report(s: Session, calls: list[CallRecord], how: str) -> ThrottleReport:
    retried = [c for c in calls if c.attempts > 1]
    steps = _steps(s, retried[0]) if retried else []
    if not steps:
        finding = f"{how}: no call was throttled in {plural(len(calls), 'call')}; nothing to compare"
        return ThrottleReport(len(calls), len(retried), (), finding)
    bits = [f"{how}: {len(retried)} of {plural(len(calls), 'call')} {'was' if len(retried) == 1 else 'were'} retried"]
    for step in steps:
        if step.advised is not None and step.waited is not None:
            bits.append(
                f"advised {step.advised * 1000:.0f} ms, the SDK waited {step.waited * 1000:.0f} ms "
                f"({(step.waited - step.advised) * 1000:+.0f} ms)"
            )
    ra, ra_ms = steps[0].retry_after_header, steps[0].retry_after_ms_header
    if ra is not None:
        bits.append(
            f"retry-after is {ra!r} (HTTP allows whole seconds only)"
            + (f"; millisecond precision comes from retry-after-ms {ra_ms!r}" if ra_ms else "")
        )
    return ThrottleReport(len(calls), len(retried), tuple(steps), "; ".join(bits))


def _steps(s: Session, call: CallRecord) -> list[RetryStep]:
    """The call's attempts in order, each with the wait advised and the pause taken before the next."""
    attempts = sorted((r for r in s.capture.records if r.call_id == call.call_id), key=lambda r: r.started_at)
    examples = s.headers.error_examples
    return [
        RetryStep(
            attempt=i + 1,
            status=r.status_code,
            outcome=r.outcome.value,
            advised=r.retry_after,
            waited=attempts[i + 1].started_at - r.ended_at if i + 1 < len(attempts) else None,
            retry_after_header=examples.get("retry-after"),
            retry_after_ms_header=examples.get("retry-after-ms"),
        )
        for i, r in enumerate(attempts)
    ]
