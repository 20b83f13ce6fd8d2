"""The real ``openai`` SDK, sync and async, against the simulator: what is particular to Chat Completions
and Responses (the first token is not the role chunk, usage with cache and reasoning, no usage unless
asked for). Every outcome class, through ``create(stream=True)``, the ``.stream()`` helpers and
``with_raw_response`` too, is in ``test_sdk_cases.py``; both drive the SDK through ``llmtap._drive``."""

from __future__ import annotations

import pytest

from llmtap import Outcome, _drive
from llmtap._drive import Action, Mode, Result
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture

MODES = ["sync", "async"]


def drive(sim: Simulator, mode: Mode, api: str, action: Action, scenario: Scenario, usage: bool = True) -> Result:
    """One call of the ``openai`` SDK (``gpt-test``, 2 retries); ``usage=False``: a Chat stream without
    ``stream_options.include_usage``."""
    params = {} if usage else {"stream_options": None}
    return _drive.drive(f"openai-{api}", sim.base_url, action, mode=mode, model="gpt-test", max_retries=2,
                        headers=scenario.headers(), params=params)  # fmt: skip


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", MODES)
def test_first_token_not_role_chunk_and_usage(sim: Simulator, cap: Capture, api: str, mode: Mode) -> None:
    scenario = Scenario(tokens=6, ttft=0.05, gap=0.05, input=300, cache_read=120, reasoning=9, stop_reason="max_tokens")
    assert drive(sim, mode, api, "stream", scenario).error is None
    cap.wait(1)
    (record,) = cap.records
    # a stalled handler of an earlier test may still log to `served`: match by request id
    (served,) = [s for s in sim.wait_served(1) if s.request_id == record.request_id]
    assert record.outcome is Outcome.COMPLETED
    assert record.first_chunk_at is not None and record.first_token_at is not None
    assert record.first_token_at - record.first_chunk_at >= 0.04  # the role / created chunk is not a token
    assert served.first_token_sent_at is not None
    # causal, and at the first token, not at the end (the 1 ms accuracy: test_ttft_accuracy.py); the 0.25 s
    # between the first token and the end leave room for a loaded machine's scheduling
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
    assert drive(sim, "sync", "chat", "stream", Scenario(tokens=3), usage=False).error is None
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED
    assert record.usage.input_tokens is None and record.usage.output_tokens is None  # never invented
    assert cap.sample("llmtap_tokens_total") == 0
