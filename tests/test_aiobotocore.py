"""Bedrock through aiobotocore, for real: its ``bedrock-runtime`` client (botocore's handlers, aiohttp's HTTP)
against the simulator. The attempts are observed by the aiohttp hook, recognised as Bedrock (Converse's and
Claude's invoke formats) with the facts boto3's get; a call's attempts are linked by the hook on its async
``_make_api_call``. Every case of the driver's table runs for it in ``test_sdk_cases.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiobotocore.client
import pytest
from aiobotocore.session import get_session
from botocore.config import Config

import llmtap
from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

MODEL = "us.anthropic.claude-test-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]


@pytest.fixture(autouse=True)
def _no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    yield


def converse_stream(sim: Simulator, scenario: Scenario, attempts: int = 1) -> str:
    """One ConverseStream call of a fresh aiobotocore client, read to its end; its text."""

    async def main() -> str:
        async with get_session().create_client(
            "bedrock-runtime",
            endpoint_url=sim.base_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
        ) as bedrock:
            header = scenario.to_header()

            def add_scenario(request: Any, **kwargs: Any) -> None:
                request.headers["x-llmtap-sim"] = header

            bedrock.meta.events.register("before-sign.bedrock-runtime.*", add_scenario)
            response = await bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)
            text = []
            async for event in response["stream"]:
                text.append(event.get("contentBlockDelta", {}).get("delta", {}).get("text", ""))
            return "".join(text)

    return asyncio.run(main())


def test_completed_stream_matches_server(sim: Simulator, cap: Capture) -> None:
    scenario = Scenario(tokens=5, ttft=0.05, input=30, cache_read=6, cache_write=2, stop_reason="max_tokens")
    assert converse_stream(sim, scenario) == scenario.expected_text()
    cap.wait(1, calls=1)
    (record,) = cap.records
    (served,) = sim.wait_served(1)
    assert record.outcome is Outcome.COMPLETED and record.provider == "aws.bedrock"
    assert record.request_model == MODEL and record.request_id == served.request_id
    assert record.usage.input_tokens == 30 + 6 + 2 and record.usage.output_tokens == 5
    assert (record.usage.cache_read_tokens, record.usage.cache_write_tokens) == (6, 2)
    assert record.stop_reason == "max_tokens" and record.server_time is not None
    assert record.first_token_at is not None and record.call_id is not None
    assert [call.attempts for call in cap.calls] == [1]


def test_retries_are_one_call_counted_once(sim: Simulator, cap: Capture) -> None:
    """Each attempt passes aiohttp's hook once (aiobotocore's endpoint has its own send: botocore's hook never
    sees it): one record per request served, linked into one call."""
    converse_stream(sim, Scenario(tokens=3, fail=2, fail_status=429), attempts=3)
    cap.wait(3, calls=1)
    records = sorted(cap.records, key=lambda r: r.started_at)
    assert len(sim.wait_served(3)) == len(records) == 3
    assert [r.outcome for r in records] == [Outcome.REJECTED, Outcome.REJECTED, Outcome.COMPLETED]
    assert [r.resend_count for r in records] == [0, 1, 2]
    assert [r.retry_reason for r in records] == [None, "429", "429"]
    assert [r.error_type for r in records[:2]] == ["ThrottlingException"] * 2
    (call,) = cap.calls
    assert call.attempts == 3 and call.outcome is Outcome.COMPLETED


def test_without_sdk_calls_amz_sdk_request_numbers_the_attempts(sim: Simulator) -> None:
    sim.clear()
    with capture(llmtap.Settings(base_urls=(sim.base_url,), sdk_calls=False)) as cap:
        converse_stream(sim, Scenario(tokens=3, fail=1, fail_status=503), attempts=2)
        cap.wait(2)
        records = sorted(cap.records, key=lambda r: r.started_at)
    assert [r.resend_count for r in records] == [0, 1]
    assert [r.retry_reason for r in records] == [None, "unknown"]
    assert all(r.call_id is None and r.provider == "aws.bedrock" for r in records)


def test_uninstrument_restores_the_call_hook(sim: Simulator) -> None:
    original = aiobotocore.client.AioBaseClient._make_api_call
    with capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap:
        assert aiobotocore.client.AioBaseClient._make_api_call is not original
        converse_stream(sim, Scenario(tokens=2))
        cap.wait(1, calls=1)
        assert len(cap.records) == 1
    assert aiobotocore.client.AioBaseClient._make_api_call is original
    assert converse_stream(sim, Scenario(tokens=2)) == Scenario(tokens=2).expected_text()
