"""The real ``openai`` SDK, sync and async, against the simulator: Chat Completions and Responses,
``create(stream=True)``, the ``.stream()`` helpers and ``with_raw_response``, every outcome class."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

import httpx2
import openai
import pytest

from llmtap import Outcome
from llmtap._core.record import FAILED
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture

MODES = ["sync", "async"]
MESSAGES: Any = [{"role": "user", "content": "hi"}]


def _params(api: str, scenario: Scenario, usage: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"model": "gpt-test", "extra_headers": scenario.headers()}
    if api == "chat":
        params["messages"] = MESSAGES
        if usage:
            params["stream_options"] = {"include_usage": True}
    else:
        params["input"] = "hi"
    return params


def drive(
    sim: Simulator, mode: str, api: str, action: str, scenario: Scenario, usage: bool = True, **client_kwargs: Any
) -> BaseException | None:
    """One SDK call; returns the exception the app saw, if any."""
    client_kwargs.setdefault("max_retries", 2)
    params = _params(api, scenario, usage)

    def sync_body() -> None:
        client = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="sk-secret", **client_kwargs)
        resource: Any = client.chat.completions if api == "chat" else client.responses
        try:
            if action == "create":
                resource.create(**{k: v for k, v in params.items() if k != "stream_options"})
            elif action == "raw":
                raw = resource.with_raw_response.create(stream=True, **params)
                for _ in raw.parse():
                    pass
            elif action == "full":
                for _ in resource.create(stream=True, **params):
                    pass
            elif action == "helper":
                with resource.stream(**params) as stream:
                    for _ in stream:
                        pass
            elif action == "break":
                stream = resource.create(stream=True, **params)
                for i, _ in enumerate(stream):
                    if i == 2:
                        break
                stream.close()
            elif action == "abandon":
                stream = resource.create(stream=True, **params)
                del stream
                gc.collect()
            else:
                raise AssertionError(action)
        finally:
            client.close()

    async def async_body() -> None:
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="sk-secret", **client_kwargs)
        resource: Any = client.chat.completions if api == "chat" else client.responses
        try:
            if action == "create":
                await resource.create(**{k: v for k, v in params.items() if k != "stream_options"})
            elif action == "raw":
                raw = await resource.with_raw_response.create(stream=True, **params)
                async for _ in raw.parse():
                    pass
            elif action == "full":
                async for _ in await resource.create(stream=True, **params):
                    pass
            elif action == "helper":
                async with resource.stream(**params) as stream:
                    async for _ in stream:
                        pass
            elif action == "break":
                stream = await resource.create(stream=True, **params)
                i = 0
                async for _ in stream:
                    i += 1
                    if i == 3:
                        break
                await stream.close()
            elif action == "abandon":
                stream = await resource.create(stream=True, **params)
                del stream
                gc.collect()
            elif action == "cancel":
                started = asyncio.Event()

                async def consume() -> None:
                    async for _ in await resource.create(stream=True, **params):
                        started.set()

                task = asyncio.create_task(consume())
                await started.wait()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            else:
                raise AssertionError(action)
        finally:
            await client.close()

    try:
        if mode == "sync":
            sync_body()
        else:
            asyncio.run(async_body())
    except Exception as exc:
        return exc
    finally:
        gc.collect()
    return None


CASES: list[tuple[str, str, Scenario, list[Outcome], bool | None]] = [
    # name, action, scenario, outcomes, app sees an error
    ("completed", "full", Scenario(tokens=5), [Outcome.COMPLETED], False),
    ("helper", "helper", Scenario(tokens=5), [Outcome.COMPLETED], False),
    ("raw_response", "raw", Scenario(tokens=5), [Outcome.COMPLETED], False),
    ("non_stream", "create", Scenario(tokens=5), [Outcome.COMPLETED], False),
    ("client_closed", "break", Scenario(tokens=40, gap=0.002), [Outcome.CLIENT_CLOSED], False),
    ("abandoned", "abandon", Scenario(tokens=40, gap=0.002), [Outcome.ABANDONED], False),
    # the SDK raises for a Chat error chunk but hands a Responses `error` event to the app: not asserted
    ("error_event", "full", Scenario(tokens=5, error_event_at=2), [Outcome.SERVER_ERROR], None),
    ("dropped", "full", Scenario(tokens=5, drop_at=2), [Outcome.CONNECTION_ERROR], True),
    ("incomplete", "full", Scenario(tokens=5, no_stop=True), [Outcome.INCOMPLETE], None),
    (
        "retried",
        "full",
        Scenario(tokens=3, fail=2, fail_status=429, retry_after=0.01),
        [Outcome.REJECTED, Outcome.REJECTED, Outcome.COMPLETED],
        False,
    ),
    ("gzip", "full", Scenario(tokens=5, gzip=True), [Outcome.COMPLETED], False),
    # the app's own bad request or key: not retried, rejected (not a service-side abort)
    ("bad_request", "full", Scenario(tokens=5, fail=1, fail_status=400), [Outcome.REJECTED], True),
    ("bad_key", "full", Scenario(tokens=5, fail=1, fail_status=401), [Outcome.REJECTED], True),
]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "action", "scenario", "expected", "fails"), CASES, ids=[c[0] for c in CASES])
def test_outcome(
    sim: Simulator,
    cap: Capture,
    api: str,
    mode: str,
    name: str,
    action: str,
    scenario: Scenario,
    expected: list[Outcome],
    fails: bool | None,
) -> None:
    error = drive(sim, mode, api, action, scenario)
    if fails is not None:
        assert (error is not None) == fails, repr(error)
    cap.wait(len(expected), calls=1)
    ids = {r.request_id for r in cap.records}
    served = [s for s in sim.wait_served(len(expected)) if s.request_id in ids]
    assert [r.outcome for r in cap.records] == expected
    assert len(cap.calls) == 1 and cap.calls[0].attempts == len(expected)
    for record, seen in zip(cap.records, served, strict=True):
        assert record.provider == "openai"
        assert record.status_code == seen.status
        assert record.resend_count == seen.retry_count
        assert record.request_model == "gpt-test"
    assert cap.sample("llmtap_attempts_total") == len(expected)
    assert cap.sample("llmtap_streams_in_flight") == 0
    assert cap.sample("llmtap_retries_total") == len(expected) - 1
    spans = sorted(cap.spans(), key=lambda s: s.start_time or 0)
    assert [s.attributes["llmtap.outcome"] if s.attributes else None for s in spans] == [o.value for o in expected]
    assert [s.status.status_code.name == "ERROR" for s in spans] == [o in FAILED for o in expected]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_cancelled(sim: Simulator, cap: Capture, api: str) -> None:
    drive(sim, "async", api, "cancel", Scenario(tokens=40, gap=0.01))
    cap.wait(1, calls=1)
    assert [r.outcome for r in cap.records] == [Outcome.CANCELLED]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", MODES)
def test_timeout(sim: Simulator, cap: Capture, api: str, mode: str) -> None:
    error = drive(sim, mode, api, "full", Scenario(tokens=4, stall_at=1, stall=1.0), timeout=0.3, max_retries=0)
    assert isinstance(error, openai.APITimeoutError | httpx2.TimeoutException), repr(error)
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.TIMEOUT]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", MODES)
def test_first_token_not_role_chunk_and_usage(sim: Simulator, cap: Capture, api: str, mode: str) -> None:
    scenario = Scenario(
        tokens=6, ttft=0.05, gap=0.005, input=300, cache_read=120, reasoning=9, stop_reason="max_tokens"
    )
    assert drive(sim, mode, api, "full", scenario) is None
    cap.wait(1)
    (record,) = cap.records
    # a stalled handler of an earlier test may still log to `served`: match by request id
    (served,) = [s for s in sim.wait_served(1) if s.request_id == record.request_id]
    assert record.outcome is Outcome.COMPLETED
    assert record.first_chunk_at is not None and record.first_token_at is not None
    assert record.first_token_at - record.first_chunk_at >= 0.04  # the role / created chunk is not a token
    assert served.first_token_sent_at is not None
    # causal, and at the first token, not at the end (the 1 ms accuracy: test_ttft_accuracy.py)
    assert served.first_token_sent_at <= record.first_token_at < served.ended_at
    assert record.usage.input_tokens == 300 + 120  # OpenAI counts cached tokens inside the input
    assert record.usage.cache_read_tokens == 120
    assert record.usage.output_tokens == 6 + 9
    assert record.usage.reasoning_tokens == 9
    assert record.stop_reason == ("length" if api == "chat" else "max_output_tokens")
    assert record.request_id == served.request_id
    assert {rl.resource for rl in record.rate_limits} == {"requests", "tokens"}
    assert all(rl.reset_seconds is not None for rl in record.rate_limits)
    assert record.server_time is not None


def test_chat_without_include_usage_reports_none(sim: Simulator, cap: Capture) -> None:
    assert drive(sim, "sync", "chat", "full", Scenario(tokens=3), usage=False) is None
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED
    assert record.usage.input_tokens is None and record.usage.output_tokens is None  # never invented
    assert cap.sample("llmtap_tokens_total") == 0
