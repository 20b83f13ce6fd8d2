"""Drive the real SDKs with llmtap instrumented, and turn llmtap's records into a :class:`ProbeReport`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import CollectorRegistry

from llmtap import _lifecycle, _tap
from llmtap._record import AttemptRecord, Outcome
from llmtap._settings import Settings
from llmtap._version import __version__
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import RecordingSink

from ._claims import Band, ClaimResult, Formula, check_latency, check_ttft, parse_band, parse_formula
from ._headers import HeaderLog
from ._report import (
    AbortResult,
    ModelLatency,
    ProbeReport,
    RetryStep,
    Sample,
    SimTruth,
    Target,
    ThrottleReport,
    Unseen,
)
from ._stats import LinearFit, fit_line, summarize

__all__ = ["DEFAULT_SIM_SCENARIO", "PROVIDERS", "ProbeOptions", "Progress", "run_probe"]

PROVIDERS = ("anthropic", "openai", "openai-compatible")
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
DEFAULT_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4o-mini"}
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY"}
#: what the embedded simulator does when no key is given: a 50 ms ± 5 ms TTFT plus 20 µs per input
#: token, 4 ms per output token, answers as long as max_tokens allows
DEFAULT_SIM_SCENARIO = "fill,count_input,ttft=0.05,jitter=0.005,prefill=0.00002,gap=0.004"
SIM_MODEL = "sim-model"

#: progress(phase, done, total)
Progress = Callable[[str, int, int], None]

_FILLER = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
           "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
           "whiskey", "xray", "yankee", "zulu")  # fmt: skip
_INSTRUCTION = "Count upward from 1, one number per line, and do not stop until you are cut off."


@dataclass(frozen=True)
class ProbeOptions:
    """What to probe and how much. Claims are parsed here, so a bad one fails before any request.

    ``api_key`` ``None`` reads ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``; with no key and no
    ``base_url`` the embedded simulator is probed (``simulate=None``). The key is never printed,
    logged or put in the report.
    """

    provider: str = "anthropic"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    models: tuple[str, ...] = ()
    #: streaming requests per model in the latency phase
    requests: int = 20
    #: the largest max_tokens asked for; the requests spread from max_tokens/8 up to it
    max_tokens: int = 64
    #: the prompt is padded with 0 .. prompt_words filler words, to vary input tokens
    prompt_words: int = 400
    #: total budget in seconds: no request starts after it and none runs past it
    timeout: float = 120.0
    expect_headers: tuple[str, ...] = ()
    expect_latency: str | None = None
    expect_ttft: str | None = None
    aborts: bool = True
    #: provoke throttling (bounded): simulator, one call told to get 429 twice; real endpoint, a burst
    throttle: bool = False
    throttle_requests: int = 30
    #: None: the simulator when there is no key and no base URL
    simulate: bool | None = None
    sim_scenario: str = DEFAULT_SIM_SCENARIO
    seed: int = 0

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, got {self.provider!r}")
        if self.requests < 1 or self.max_tokens < 1 or self.timeout <= 0 or self.prompt_words < 0:
            raise ValueError("requests and max_tokens must be >= 1, timeout > 0, prompt_words >= 0")
        if self.expect_latency is not None:
            parse_formula(self.expect_latency)
        if self.expect_ttft is not None:
            parse_band(self.expect_ttft)
        Scenario.parse(self.sim_scenario)


def _clean_url(url: str) -> str:
    """The URL without credentials, query or fragment (it goes into the report)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _prompt(words: int) -> str:
    filler = " ".join(_FILLER[i % len(_FILLER)] for i in range(words))
    if not filler:
        return _INSTRUCTION
    return f"{_INSTRUCTION}\nIgnore the following filler words: {filler}"


def _name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.exhausted: str | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def allow(self, phase: str) -> bool:
        if self.left() > 0.05:
            return True
        if self.exhausted is None:
            self.exhausted = f"the time budget ran out before the {phase} phase finished"
        return False

    def request_timeout(self, cap: float = 60.0) -> float:
        return max(0.05, min(cap, self.left()))


class _Driver:
    """One SDK (anthropic or openai) pointed at one endpoint; response headers go to the log."""

    def __init__(self, provider: str, base_url: str, api_key: str, log: HeaderLog) -> None:
        self.provider = provider
        self.base_url = base_url
        self._key = api_key
        self._log = log
        self.extra_headers: dict[str, str] = {}
        if provider == "anthropic":
            import anthropic

            self.sdk: Any = anthropic
            self.sdk_name = f"anthropic {anthropic.__version__}"
        else:
            import openai

            self.sdk = openai
            self.sdk_name = f"openai {openai.__version__}"

    def _hook(self, response: Any) -> None:
        self._log.add(response.status_code, response.headers.multi_items())

    async def _ahook(self, response: Any) -> None:
        self._hook(response)

    def client(self, timeout: Any, max_retries: int = 0) -> Any:
        http = self.sdk.DefaultHttpxClient(event_hooks={"response": [self._hook]})
        cls = self.sdk.Anthropic if self.provider == "anthropic" else self.sdk.OpenAI
        return cls(
            base_url=self.base_url, api_key=self._key, timeout=timeout, max_retries=max_retries, http_client=http
        )

    def async_client(self, timeout: Any, max_retries: int = 0) -> Any:
        http = self.sdk.DefaultAsyncHttpxClient(event_hooks={"response": [self._ahook]})
        cls = self.sdk.AsyncAnthropic if self.provider == "anthropic" else self.sdk.AsyncOpenAI
        return cls(
            base_url=self.base_url, api_key=self._key, timeout=timeout, max_retries=max_retries, http_client=http
        )

    def _params(self, model: str, max_tokens: int, prompt: str, extra: dict[str, str] | None) -> dict[str, Any]:
        headers = {**self.extra_headers, **(extra or {})}
        params: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
        if headers:
            params["extra_headers"] = headers
        if self.provider == "anthropic":
            params["max_tokens"] = max_tokens
        else:
            params["stream_options"] = {"include_usage": True}
            params["max_completion_tokens" if self.provider == "openai" else "max_tokens"] = max_tokens
        return params

    def open(self, client: Any, model: str, max_tokens: int, prompt: str, extra: dict[str, str] | None = None) -> Any:
        """Start a stream (the SDK returns once the headers are in)."""
        kind = client.messages if self.provider == "anthropic" else client.chat.completions
        return kind.create(**self._params(model, max_tokens, prompt, extra))

    async def aopen(self, client: Any, model: str, max_tokens: int, prompt: str) -> Any:
        kind = client.messages if self.provider == "anthropic" else client.chat.completions
        return await kind.create(**self._params(model, max_tokens, prompt, None))

    def is_content(self, event: Any) -> bool:
        if self.provider == "anthropic":
            return getattr(event, "type", None) == "content_block_delta"
        choices: Any = getattr(event, "choices", None)
        return bool(choices) and bool(getattr(choices[0].delta, "content", None))

    def timeout(self, read: float, total: float) -> Any:
        return self.sdk.Timeout(total, read=read)

    def get_metrics_endpoint(self, client: Any) -> str:
        """GET <base>/v1/metrics (the endpoint some articles describe) and say what came back."""
        path = "/v1/metrics" if self.provider == "anthropic" else "/metrics"
        import httpx2

        try:
            response = client.get(path, cast_to=httpx2.Response)
            return f"GET {path} answered {response.status_code}"
        except self.sdk.APIStatusError as exc:
            return f"GET {path} answered {exc.status_code}"
        except Exception as exc:
            return f"GET {path} failed: {_name(exc)}"


class _Run:
    def __init__(
        self,
        options: ProbeOptions,
        driver: _Driver,
        sink: RecordingSink,
        budget: _Budget,
        progress: Progress | None,
        sim: Simulator | None,
    ) -> None:
        self.o = options
        self.d = driver
        self.sink = sink
        self.budget = budget
        self.progress = progress or (lambda phase, done, total: None)
        self.sim = sim
        self.t0: float | None = None
        self.notes: list[str] = []
        #: why the probe cannot go on (the endpoint refused the warm-up request)
        self.fatal: str | None = None

    # ------------------------------------------------------------------ records

    def _new_records(self, before: int, count: int = 1, timeout: float = 5.0) -> list[AttemptRecord]:
        with contextlib.suppress(TimeoutError):
            self.sink.wait(before + count, timeout=timeout)
        return self.sink.records[before:]

    def _served(self, request_id: str | None, timeout: float = 1.0) -> Served | None:
        if self.sim is None or request_id is None:
            return None
        deadline = time.monotonic() + timeout
        while True:
            for served in reversed(self.sim.served):
                if served.request_id == request_id:
                    return served
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    # ------------------------------------------------------------------ latency

    def plan(self) -> list[tuple[int, int]]:
        """(max_tokens, prompt_words) per request: both spread over their range, independently shuffled."""
        n, hi = self.o.requests, self.o.max_tokens
        lo = max(1, hi // 8)
        rng = random.Random(self.o.seed)
        outs = [round(lo + (hi - lo) * i / max(1, n - 1)) for i in range(n)]
        words = [round(self.o.prompt_words * i / max(1, n - 1)) for i in range(n)]
        rng.shuffle(outs)
        rng.shuffle(words)
        return list(zip(outs, words, strict=True))

    def latency(self, model: str) -> list[Sample]:
        samples: list[Sample] = []
        plan = self.plan()
        client = self.d.client(timeout=self.budget.request_timeout())
        try:
            # One warm-up request opens the connection (DNS, TCP, TLS); it is not counted.
            before = len(self.sink.records)
            try:
                for _ in self.d.open(client, model, 1, _prompt(0)):
                    pass
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                if status in (401, 403, 404):
                    self.fatal = (
                        f"the endpoint answered the warm-up request with {status} ({_name(exc)}): "
                        "check the API key, the base URL and the model; nothing else was sent"
                    )
                    self._new_records(before)
                    return samples
                self.notes.append(f"warm-up request ({model}): {_name(exc)}")
            self._new_records(before)
            for i, (max_tokens, words) in enumerate(plan):
                if not self.budget.allow("latency"):
                    break
                self.progress(f"latency {model}", i, len(plan))
                before = len(self.sink.records)
                client_t = self.budget.request_timeout()
                try:
                    stream = self.d.open(client.with_options(timeout=client_t), model, max_tokens, _prompt(words))
                    for _ in stream:
                        pass
                except Exception as exc:
                    self.notes.append(f"latency request {i + 1} ({model}): {_name(exc)}")
                for record in self._new_records(before):
                    samples.append(self._sample(model, max_tokens, words, record))
            self.progress(f"latency {model}", len(plan), len(plan))
        finally:
            client.close()
        return samples

    def _sample(self, model: str, max_tokens: int, words: int, r: AttemptRecord) -> Sample:
        if self.t0 is None:
            self.t0 = r.started_at
        tps = None
        out = r.usage.output_tokens
        done = r.outcome is Outcome.COMPLETED
        if done and r.first_token_at is not None and out and out > 1 and r.ended_at > r.first_token_at:
            tps = (out - 1) / (r.ended_at - r.first_token_at)  # the tokens after the first, over their time
        injected = lag = None
        served = self._served(r.request_id) if self.sim is not None else None
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
            started=r.started_at - self.t0,
            request_id=r.request_id,
            injected_ttft=injected,
            first_token_lag=lag,
        )

    def model_latency(self, model: str, samples: list[Sample]) -> ModelLatency:
        ok = [s for s in samples if s.outcome == Outcome.COMPLETED.value]

        def values(attr: str, rows: list[Sample] = ok) -> list[float]:
            return [v for s in rows if (v := getattr(s, attr)) is not None]

        dur_rows = [s for s in ok if s.output_tokens is not None]
        ttft_rows = [s for s in ok if s.time_to_first_token is not None and s.input_tokens is not None]
        truth = None
        with_truth = [s for s in ok if s.injected_ttft is not None and s.first_token_lag is not None]
        if self.sim is not None and with_truth:
            lag = statistics.median(s.first_token_lag or 0.0 for s in with_truth)
            truth = SimTruth(
                injected_ttft_p50=statistics.median(s.injected_ttft or 0.0 for s in with_truth),
                server_ttft_p50=self._server_ttft_p50(with_truth),
                first_token_lag_p50=lag,
                injected_gap=Scenario.parse(self.o.sim_scenario).gap,
            )
        return ModelLatency(
            model=model,
            requests=len(samples),
            completed=len(ok),
            outcomes=dict(Counter(s.outcome for s in samples)),
            time_to_headers=summarize(values("time_to_headers")),
            time_to_first_chunk=summarize(values("time_to_first_chunk")),
            time_to_first_token=summarize(values("time_to_first_token")),
            duration=summarize(values("duration")),
            tokens_per_second=summarize(values("tokens_per_second")),
            duration_fit=fit_line([float(s.output_tokens or 0) for s in dur_rows], [s.duration for s in dur_rows]),
            ttft_fit=fit_line(
                [float(s.input_tokens or 0) for s in ttft_rows], [s.time_to_first_token or 0.0 for s in ttft_rows]
            ),
            ttft_drift=self._drift(ttft_rows),
            truth=truth,
        )

    @staticmethod
    def _drift(rows: list[Sample]) -> LinearFit | None:
        """TTFT against time since the first request, after removing the input-token effect (the
        prompt lengths are shuffled, but a chance correlation with time would otherwise show up)."""
        by_input = fit_line([float(s.input_tokens or 0) for s in rows], [s.time_to_first_token or 0.0 for s in rows])
        if by_input is None:
            return fit_line([s.started for s in rows], [s.time_to_first_token or 0.0 for s in rows])
        residual = [
            (s.time_to_first_token or 0.0) - by_input.b * (float(s.input_tokens or 0) - by_input.x_mean) for s in rows
        ]
        return fit_line([s.started for s in rows], residual)

    def _server_ttft_p50(self, rows: list[Sample]) -> float:
        """Request received → first token written, from the simulator's own records."""
        values = []
        for s in rows:
            served = self._served(s.request_id, timeout=0)
            if served is not None and served.first_token_sent_at is not None:
                values.append(served.first_token_sent_at - served.received_at)
        return statistics.median(values) if values else 0.0

    # ------------------------------------------------------------------ aborts

    def aborts(self, model: str, min_ttft: float | None) -> list[AbortResult]:
        results: list[AbortResult] = []
        modes = ("close", "cancel", "drop", "timeout")
        for i, mode in enumerate(modes):
            if not self.budget.allow("aborts"):
                break
            self.progress("aborts", i, len(modes))
            results.append(self._abort(mode, model, min_ttft))
        self.progress("aborts", len(modes), len(modes))
        return results

    def _abort(self, mode: str, model: str, min_ttft: float | None) -> AbortResult:
        max_tokens = self.o.max_tokens
        prompt = _prompt(0)
        before = len(self.sink.records)
        seen_token = False
        raised: BaseException | None = None
        t = self.budget.request_timeout()
        if mode == "close":
            how = "read until the first content token, then stream.close()"
            expected = Outcome.CLIENT_CLOSED
            client = self.d.client(timeout=t)
            try:
                stream = self.d.open(client, model, max_tokens, prompt)
                for event in stream:
                    if self.d.is_content(event):
                        seen_token = True
                        break
                stream.close()
            except Exception as exc:
                raised = exc
            finally:
                client.close()
        elif mode == "drop":
            how = "read until the first content token, then drop the stream unclosed (del + gc)"
            expected = Outcome.ABANDONED
            client = self.d.client(timeout=t)
            try:
                stream = self.d.open(client, model, max_tokens, prompt)
                iterator = iter(stream)
                for event in iterator:
                    if self.d.is_content(event):
                        seen_token = True
                        break
                del stream, iterator
                gc.collect()
            except Exception as exc:
                raised = exc
            finally:
                client.close()
        elif mode == "cancel":
            how = "asyncio task reading the stream, cancelled after the first content token"
            expected = Outcome.CANCELLED
            seen, raised = asyncio.run(self._cancel(model, max_tokens, prompt, t))
            seen_token = seen
        else:
            read = max(0.005, (min_ttft if min_ttft is not None else 0.2) / 2)
            why = "half the fastest TTFT seen" if min_ttft is not None else "no TTFT was measured"
            how = f"read timeout of {read * 1000:.0f} ms ({why}), no retries"
            expected = Outcome.TIMEOUT
            client = self.d.client(timeout=self.d.timeout(read, t))
            try:
                stream = self.d.open(client, model, max_tokens, prompt)
                for event in stream:
                    seen_token = seen_token or self.d.is_content(event)
            except Exception as exc:
                raised = exc
            finally:
                client.close()
        gc.collect()
        records = self._new_records(before)
        record = records[0] if records else None
        served = self._served(record.request_id if record else None) if self.sim is not None else None
        exc_name = _name(raised) if raised is not None else None
        if record is None:
            return AbortResult(mode, how, "not recorded", expected.value, exc_name, None, seen_token, False,
                               None, None, None, "llmtap recorded no attempt")  # fmt: skip
        final_usage = bool(record.stop_reasons)
        status = record.status_code
        parts = [f"llmtap outcome {record.outcome.value}"]
        parts.append(f"status {status}" if status is not None else "no HTTP status (no response headers)")
        parts.append(f"client saw {exc_name}" if exc_name else "client saw no exception")
        parts.append("final usage arrived" if final_usage else "no final usage (the stream ended before message end)")
        if status is not None and 200 <= status < 300:
            parts.append("no error status or error body follows an abort: the status was already 200")
        if served is not None:
            parts.append(f"simulator recorded {served.outcome_sent} after {served.deltas_sent} deltas")
        return AbortResult(
            mode=mode,
            how=how,
            outcome=record.outcome.value,
            expected=expected.value,
            client_exception=exc_name,
            status=status,
            first_token_seen=seen_token or record.first_token_at is not None,
            final_usage=final_usage,
            input_tokens=record.usage.input_tokens,
            output_tokens=record.usage.output_tokens,
            server_saw=served.outcome_sent if served is not None else None,
            finding="; ".join(parts),
        )

    async def _cancel(self, model: str, max_tokens: int, prompt: str, t: float) -> tuple[bool, BaseException | None]:
        client = self.d.async_client(timeout=t)
        first = asyncio.Event()
        raised: BaseException | None = None

        async def consume() -> None:
            stream = await self.d.aopen(client, model, max_tokens, prompt)
            async for event in stream:
                if self.d.is_content(event):
                    first.set()

        task = asyncio.create_task(consume())
        try:
            waiter = asyncio.create_task(first.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as exc:
                raised = exc
            except Exception as exc:
                raised = exc
        finally:
            await client.close()
        return first.is_set(), raised

    # ------------------------------------------------------------------ throttling

    def throttle(self, model: str) -> ThrottleReport:
        log = self.d._log
        if self.sim is not None:
            told = Scenario.parse(self.o.sim_scenario).replace(fail=2, fail_status=429, retry_after=0.25)
            client = self.d.client(timeout=self.budget.request_timeout(), max_retries=2)
            before_calls = len(self.sink.calls)
            try:
                self.progress("throttle", 0, 1)
                for _ in self.d.open(client, model, 8, _prompt(0), told.headers()):
                    pass
            except Exception as exc:
                self.notes.append(f"throttle call: {_name(exc)}")
            finally:
                client.close()
            self.progress("throttle", 1, 1)
            with contextlib.suppress(TimeoutError):
                self.sink.wait(0, calls=before_calls + 1)
            calls = self.sink.calls[before_calls:]
            how = "the simulator was told to answer 429 twice with retry-after 0.25 s (SDK max_retries=2)"
            return self._retry_report(calls, len(calls), how, log)
        # A real endpoint: a bounded burst of tiny requests until one call is retried after a 429/529.
        n = self.o.throttle_requests
        before_calls = len(self.sink.calls)
        found = threading.Event()
        done = [0]
        lock = threading.Lock()

        def one(_: int) -> None:
            if found.is_set() or not self.budget.allow("throttle"):
                return
            client = self.d.client(timeout=self.budget.request_timeout(30), max_retries=2)
            try:
                for _event in self.d.open(client, model, 1, "Say OK."):
                    pass
            except Exception:
                pass
            finally:
                client.close()
            with lock:
                done[0] += 1
                self.progress("throttle", done[0], n)
            if any(c.attempts > 1 for c in self.sink.calls[before_calls:]):
                found.set()

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, range(n)))
        calls = self.sink.calls[before_calls:]
        how = f"a burst of up to {n} one-token requests, 8 at a time (SDK max_retries=2)"
        return self._retry_report(calls, len(calls), how, log)

    def _retry_report(self, calls: list[Any], total: int, how: str, log: HeaderLog) -> ThrottleReport:
        retried = [c for c in calls if c.attempts > 1]
        steps: list[RetryStep] = []
        if retried:
            call = retried[0]
            attempts = sorted((r for r in self.sink.records if r.call_id == call.call_id), key=lambda r: r.started_at)
            for i, r in enumerate(attempts):
                waited = attempts[i + 1].started_at - r.ended_at if i + 1 < len(attempts) else None
                steps.append(
                    RetryStep(
                        attempt=i + 1,
                        status=r.status_code,
                        outcome=r.outcome.value,
                        advised=r.retry_after,
                        waited=waited,
                        retry_after_header=log.error_examples.get("retry-after"),
                        retry_after_ms_header=log.error_examples.get("retry-after-ms"),
                    )
                )
        if not steps:
            finding = f"{how}: no call was throttled in {total} calls; nothing to compare"
        else:
            pairs = [(s.advised, s.waited) for s in steps if s.advised is not None and s.waited is not None]
            bits = [f"{how}: {len(retried)} of {total} calls were retried"]
            for advised, waited in pairs:
                bits.append(
                    f"advised {advised * 1000:.0f} ms, the SDK waited {waited * 1000:.0f} ms "
                    f"({(waited - advised) * 1000:+.0f} ms)"
                )
            ra, ra_ms = steps[0].retry_after_header, steps[0].retry_after_ms_header
            if ra is not None:
                bits.append(
                    f"retry-after is {ra!r} (HTTP allows whole seconds only)"
                    + (f"; millisecond precision comes from retry-after-ms {ra_ms!r}" if ra_ms else "")
                )
            finding = "; ".join(bits)
        return ThrottleReport(total, len(retried), tuple(steps), finding)


# ---------------------------------------------------------------------- what a client cannot see


def _unseen(latency: list[ModelLatency], records: list[AttemptRecord], metrics_endpoint: str | None) -> list[Unseen]:
    total = len(records)
    overloaded = sum(
        1
        for r in records
        if r.status_code in (503, 529) or (r.error_type or "").startswith("overloaded") or r.error_type == "529"
    )
    limited = sum(1 for r in records if r.status_code == 429)
    rate = f"{overloaded}/{total} attempts overloaded (503/529/overloaded_error), {limited} rate-limited (429)"
    drift = None
    tps = None
    server = None
    for m in latency:
        if m.ttft_drift is not None and drift is None:
            span = m.ttft_drift.x_max - m.ttft_drift.x_min
            lo, hi = m.ttft_drift.b_ci
            drift = (
                f"TTFT changed by {m.ttft_drift.b * span * 1000:+.1f} ms over the {span:.0f} s of the latency phase "
                f"(95% CI {lo * span * 1000:+.1f} to {hi * span * 1000:+.1f} ms; input-token effect removed; "
                f"{m.model})"
            )
        if m.tokens_per_second is not None and tps is None:
            tps_s = m.tokens_per_second
            tps = f"{tps_s.p50:.0f} output tokens/s median, jitter {tps_s.jitter:.0f} ({m.model})"
    server_times = [r.server_time for r in records if r.server_time is not None]
    headers = [r.time_to_headers for r in records if r.server_time is not None and r.time_to_headers is not None]
    if server_times and headers:
        server = (
            f"server says it worked {statistics.median(server_times) * 1000:.1f} ms (median); time to headers "
            f"{statistics.median(headers) * 1000:.1f} ms: the rest is network and queueing in front of it"
        )
    return [
        Unseen(
            "GPU utilisation, batch size, KV-cache pressure",
            "these live inside the provider's serving stack; no response header or API reports them",
            "overloaded / rate-limited rate, and output tokens per second over time",
            f"{rate}; {tps}" if tps else rate,
        ),
        Unseen(
            "kernel launch latency, per-layer or per-token GPU time",
            "a client sees bytes, not kernels: token timing mixes compute, batching, network and buffering",
            "time to first token and its drift; gaps between chunks",
            drift,
        ),
        Unseen(
            "queueing and processing time inside the provider",
            "only if the server reports it (openai-processing-ms, x-envoy-upstream-service-time)",
            "time to headers minus the reported processing time",
            server,
        ),
        Unseen(
            "a /v1/metrics endpoint with the provider's internal numbers",
            "the public APIs document none; the probe asked for it",
            "llmtap's own client-side metrics (this report's metrics section)",
            metrics_endpoint,
        ),
    ]


def _metric_summary(registry: CollectorRegistry) -> dict[str, float]:
    wanted = {"llmtap_attempts_total", "llmtap_streams_total", "llmtap_retries_total"}
    out: dict[str, float] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name not in wanted or not sample.value:
                continue
            keep = {k: v for k, v in sample.labels.items() if k in ("status_code", "outcome", "reason", "error_type")}
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(keep.items()) if v)
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            out[key] = out.get(key, 0.0) + sample.value
    return dict(sorted(out.items()))


@contextlib.contextmanager
def _instrumented(base_url: str, registry: CollectorRegistry) -> Iterator[RecordingSink]:
    if _tap.active() is not None:
        raise RuntimeError(
            "llmtap is already instrumented in this process; run the probe in its own process (`llmtap probe`)"
        )
    sink = RecordingSink()
    settings = Settings(base_urls=(base_url,), traces=False, otel_metrics=False)
    _lifecycle.activate(settings, registry=registry, extra_sinks=[sink])
    try:
        yield sink
    finally:
        _lifecycle.deactivate()


def run_probe(
    options: ProbeOptions | None = None,
    *,
    progress: Progress | None = None,
    registry: CollectorRegistry | None = None,
) -> ProbeReport:
    """Probe an endpoint (or the embedded simulator) with the real SDK, llmtap instrumented.

    Args:
        options: what to probe; default: the simulator with default settings.
        progress: called as ``progress(phase, done, total)``.
        registry: Prometheus registry for llmtap's metrics during the probe (default: a fresh one).

    Raises:
        ImportError: the provider's SDK is not installed (``pip install 'llmtap[probe]'``).
        RuntimeError: llmtap is already instrumented in this process.
        ValueError: invalid options (checked before any request).
    """
    o = options or ProbeOptions()
    key = o.api_key if o.api_key is not None else os.environ.get(KEY_ENV[o.provider])
    simulate = o.simulate if o.simulate is not None else (not key and o.base_url is None)
    if not simulate and o.provider == "openai-compatible" and o.base_url is None:
        raise ValueError("openai-compatible needs a base URL")
    models = o.models or ((SIM_MODEL,) if simulate else (DEFAULT_MODELS.get(o.provider, ""),))
    if not all(models):
        raise ValueError("give at least one model (--model) for an openai-compatible endpoint")
    started = datetime.now(UTC)
    t_start = time.monotonic()
    budget = _Budget(o.timeout)
    log = HeaderLog(o.expect_headers)
    registry = registry if registry is not None else CollectorRegistry()
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        sim: Simulator | None = None
        if simulate:
            sim = stack.enter_context(Simulator(default=Scenario.parse(o.sim_scenario)))
            root = sim.base_url
            base_url = root if o.provider == "anthropic" else root + "/v1"
            key = "simulator-key"
        else:
            base_url = (o.base_url or DEFAULT_BASE_URLS[o.provider]).rstrip("/")
            if not key:
                key = "no-key"
                notes.append(f"no {KEY_ENV[o.provider]}: requests sent without a real key")
        driver = _Driver(o.provider, base_url, key or "", log)
        sink = stack.enter_context(_instrumented(base_url, registry))
        run = _Run(o, driver, sink, budget, progress, sim)
        all_samples: list[Sample] = []
        latency: list[ModelLatency] = []
        claims: list[ClaimResult] = []
        formula: Formula | None = parse_formula(o.expect_latency) if o.expect_latency else None
        band: Band | None = parse_band(o.expect_ttft) if o.expect_ttft else None
        for model in models:
            if run.fatal:
                break
            samples = run.latency(model)
            all_samples.extend(samples)
            ml = run.model_latency(model, samples)
            latency.append(ml)
            label = f" [{model}]" if len(models) > 1 else ""
            ok = [s for s in samples if s.outcome == Outcome.COMPLETED.value]
            if band is not None:
                result = check_ttft(band, [s.time_to_first_token for s in ok if s.time_to_first_token is not None])
                claims.append(_labelled(result, label))
            if formula is not None:
                inputs = [s.input_tokens for s in ok if s.input_tokens is not None]
                result = check_latency(formula, ml.duration_fit, statistics.median(inputs) if inputs else 0.0)
                claims.append(_labelled(result, label))
        aborts: list[AbortResult] = []
        if run.fatal:
            notes.append(run.fatal)
        elif o.aborts:
            ttfts = [s.time_to_first_token for s in all_samples if s.time_to_first_token is not None]
            aborts = run.aborts(models[0], min(ttfts) if ttfts else None)
        throttle = run.throttle(models[0]) if o.throttle and not run.fatal and budget.allow("throttle") else None
        metrics_endpoint = None
        if not run.fatal and budget.allow("metrics endpoint"):
            client = driver.client(timeout=budget.request_timeout(10))
            try:
                metrics_endpoint = driver.get_metrics_endpoint(client)
            finally:
                client.close()
        header_report = log.report()
        for name in o.expect_headers:
            claims.insert(0, _header_claim(name, log))
        gc.collect()
        records = list(sink.records)
        metrics = _metric_summary(registry)
        notes.extend(run.notes)
    target = Target(
        provider=o.provider,
        base_url=_clean_url(base_url),
        simulated=simulate,
        sim_scenario=o.sim_scenario if simulate else None,
        models=tuple(models),
        sdk=driver.sdk_name,
        llmtap_version=__version__,
        started_at=started.isoformat(timespec="seconds"),
        seconds=time.monotonic() - t_start,
        budget_seconds=o.timeout,
        stopped_early=budget.exhausted,
    )
    return ProbeReport(
        target=target,
        headers=header_report,
        latency=tuple(latency),
        claims=tuple(claims),
        aborts=tuple(aborts),
        throttle=throttle,
        unseen=tuple(_unseen(latency, records, metrics_endpoint)),
        metrics=metrics,
        samples=tuple(all_samples),
        notes=tuple(notes),
        expect_latency=o.expect_latency,
        expect_ttft=o.expect_ttft,
    )


def _labelled(result: ClaimResult, label: str) -> ClaimResult:
    if not label:
        return result
    return ClaimResult(result.kind, result.claim + label, result.holds, result.test, result.finding)


def _header_claim(name: str, log: HeaderLog) -> ClaimResult:
    present = log.names.get(name.lower(), 0)
    test = "presence of the response header on every HTTP response the probe received"
    if present:
        example = log.example(name)
        shown = f" (e.g. {example!r})" if example is not None else " (value withheld)"
        finding = f"{name} was present on {present} of {log.responses} responses{shown}"
        return ClaimResult("header", f"header {name}", True, test, finding)
    statuses = ", ".join(f"{s}x{n}" for s, n in sorted(log.statuses.items()))
    finding = f"{name} is absent: it was on none of the {log.responses} responses (statuses {statuses or 'none'})"
    return ClaimResult("header", f"header {name}", False, test, finding)
