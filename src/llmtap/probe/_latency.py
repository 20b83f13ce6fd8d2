"""The latency phase: one warm-up request, then streaming requests whose output and prompt lengths
both vary (so that ``duration ≈ a + b * output_tokens`` and ``TTFT ≈ a + b * input_tokens`` can be
fitted), each read to the end; every number comes from llmtap's attempt record."""

from __future__ import annotations

import random
import statistics
from collections import Counter

from llmtap._core.record import AttemptRecord, Outcome
from llmtap._drive import Sdk
from llmtap.simulator import Scenario

from ._driver import connect_cause, exception_name, prompt
from ._options import clean_url
from ._report import ModelLatency, Sample, SimTruth
from ._session import Session
from ._stats import LinearFit, fit_line, summarize
from ._words import plural

__all__ = ["CannotProbe", "measure", "model_latency", "plan"]

#: the warm-up answered with these: the key, the URL or the model is wrong, and no further request can help
_REFUSED = (401, 403, 404)


class CannotProbe(Exception):
    """The endpoint is unreachable, or refused the warm-up request: no further request can help."""


def plan(requests: int, max_tokens: int, prompt_words: int, seed: int) -> list[tuple[int, int]]:
    """(max_tokens, prompt_words) per request: both spread over their range, independently shuffled."""
    n, hi = requests, max_tokens
    lo = max(1, hi // 8)
    rng = random.Random(seed)
    outs = [round(lo + (hi - lo) * i / max(1, n - 1)) for i in range(n)]
    words = [round(prompt_words * i / max(1, n - 1)) for i in range(n)]
    rng.shuffle(outs)
    rng.shuffle(words)
    return list(zip(outs, words, strict=True))


def measure(s: Session, model: str) -> tuple[ModelLatency, list[Sample]]:
    """The warm-up, then the planned requests while the budget allows.

    Raises:
        CannotProbe: the warm-up got no HTTP response, or a 401/403/404 (the message says which).
    """
    o = s.options
    steps = plan(o.requests, o.max_tokens, o.prompt_words, o.seed)
    samples: list[Sample] = []
    sdk = s.driver.sdk(timeout=s.budget.request_timeout())
    try:
        _warm_up(s, sdk, model)
        for i, (max_tokens, words) in enumerate(steps):
            if not s.budget.allow("latency"):
                break
            s.progress(f"latency {model}", i, len(steps))
            before = len(s.capture.records)
            timed = sdk.with_options(timeout=s.budget.request_timeout())
            error = s.driver.stream(timed, model, max_tokens, prompt(words)).error
            if error is not None:
                s.notes.append(f"latency request {i + 1} ({model}): {exception_name(error)}")
            samples.extend(_sample(s, model, max_tokens, words, r) for r in s.records_since(before))
        s.progress(f"latency {model}", len(steps), len(steps))
    finally:
        sdk.close()
    return model_latency(s, model, samples), samples


def _warm_up(s: Session, sdk: Sdk, model: str) -> None:
    """One request (not counted) opens the connection: DNS, TCP, TLS. The SDK may retry it twice."""
    calls, responses = len(s.capture.calls), s.headers.responses
    exc = s.driver.stream(sdk.with_options(max_retries=2), model, 1, prompt(0)).error
    if exc is not None:
        call = s.calls_since(calls)
        status = getattr(exc, "status_code", None)
        if s.headers.responses == responses:
            tries = plural(call[0].attempts, "attempt") if call else "the warm-up request"
            why = f"{connect_cause(exc)} (no HTTP response to {tries}; nothing else was sent)"
            raise CannotProbe(f"cannot reach {clean_url(s.driver.base_url)}: {why}") from exc
        if status in _REFUSED:
            said = _server_said(exc) if status == 404 else None  # a 404 often lists what the server serves
            raise CannotProbe(
                f"the endpoint answered the warm-up request with {status} ({exception_name(exc)}"
                + (f": {said!r}" if said else "")
                + "): check the API key, the base URL and the model; nothing else was sent"
            ) from exc
        s.notes.append(f"warm-up request ({model}): {exception_name(exc)}")
    else:
        s.calls_since(calls)


def _server_said(exc: BaseException, limit: int = 240) -> str | None:
    """The error message in the body of an SDK's status error (``{"error": {"message": ...}}``), shortened;
    ``None`` without one. Only a 404's is shown: a 401's may echo part of the key."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if isinstance(message, str) and message.strip():
            text = " ".join(message.split())
            return text if len(text) <= limit else text[: limit - 1] + "…"
    return None


def _sample(s: Session, model: str, max_tokens: int, words: int, r: AttemptRecord) -> Sample:
    if s.t0 is None:
        s.t0 = r.started_at
    tps = None
    out = r.usage.output_tokens
    done = r.outcome is Outcome.COMPLETED
    if done and r.first_token_at is not None and out and out > 1 and r.ended_at > r.first_token_at:
        tps = (out - 1) / (r.ended_at - r.first_token_at)  # the tokens after the first, over their time
    injected = lag = None
    served = s.served(r.request_id)
    if served is not None:
        injected = served.scenario.headers_delay + served.scenario.ttft
        if served.first_token_sent_at is not None and r.first_token_at is not None:
            lag = r.first_token_at - served.first_token_sent_at
    return Sample(
        model=model,
        max_tokens=max_tokens,
        prompt_words=words,
        outcome=r.outcome.value,
        status=r.status_code,
        error_type=r.error_type,
        time_to_headers=r.time_to_headers,
        time_to_first_chunk=r.time_to_first_chunk,
        time_to_first_token=r.time_to_first_token,
        duration=r.duration,
        input_tokens=r.usage.input_tokens,
        output_tokens=out,
        tokens_per_second=tps,
        started=r.started_at - s.t0,
        request_id=r.request_id,
        injected_ttft=injected,
        first_token_lag=lag,
    )


def model_latency(s: Session, model: str, samples: list[Sample]) -> ModelLatency:
    """Summaries, fits and (on the simulator) the injected truth of one model's samples."""
    ok = [x for x in samples if x.outcome == Outcome.COMPLETED.value]

    def values(attr: str) -> list[float]:
        return [v for x in ok if (v := getattr(x, attr)) is not None]

    dur_rows = [x for x in ok if x.output_tokens is not None]
    ttft_rows = [x for x in ok if x.time_to_first_token is not None and x.input_tokens is not None]
    return ModelLatency(
        model=model,
        requests=len(samples),
        completed=len(ok),
        outcomes=dict(Counter(x.outcome for x in samples)),
        time_to_headers=summarize(values("time_to_headers")),
        time_to_first_chunk=summarize(values("time_to_first_chunk")),
        time_to_first_token=summarize(values("time_to_first_token")),
        duration=summarize(values("duration")),
        tokens_per_second=summarize(values("tokens_per_second")),
        duration_fit=fit_line([float(x.output_tokens or 0) for x in dur_rows], [x.duration for x in dur_rows]),
        ttft_fit=fit_line(
            [float(x.input_tokens or 0) for x in ttft_rows], [x.time_to_first_token or 0.0 for x in ttft_rows]
        ),
        ttft_drift=_drift(ttft_rows),
        truth=_truth(s, ok),
    )


def _drift(rows: list[Sample]) -> LinearFit | None:
    """TTFT against time since the first request, after removing the input-token effect (the
    prompt lengths are shuffled, but a chance correlation with time would otherwise show up)."""
    by_input = fit_line([float(x.input_tokens or 0) for x in rows], [x.time_to_first_token or 0.0 for x in rows])
    if by_input is None:
        return fit_line([x.started for x in rows], [x.time_to_first_token or 0.0 for x in rows])
    residual = [
        (x.time_to_first_token or 0.0) - by_input.b * (float(x.input_tokens or 0) - by_input.x_mean) for x in rows
    ]
    return fit_line([x.started for x in rows], residual)


def _truth(s: Session, ok: list[Sample]) -> SimTruth | None:
    """Simulator only: what it was told to inject and when it wrote each first token, by its own records."""
    with_truth = [x for x in ok if x.injected_ttft is not None and x.first_token_lag is not None]
    if s.sim is None or not with_truth:
        return None
    server_ttfts = []
    for x in with_truth:
        served = s.served(x.request_id, timeout=0)
        if served is not None and served.first_token_sent_at is not None:
            server_ttfts.append(served.first_token_sent_at - served.received_at)
    return SimTruth(
        injected_ttft_p50=statistics.median(x.injected_ttft or 0.0 for x in with_truth),
        server_ttft_p50=statistics.median(server_ttfts) if server_ttfts else 0.0,
        first_token_lag_p50=statistics.median(x.first_token_lag or 0.0 for x in with_truth),
        injected_gap=Scenario.parse(s.options.sim_scenario).gap,
    )
