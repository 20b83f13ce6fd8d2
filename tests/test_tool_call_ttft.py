"""One time-to-first-token rule through the real SDKs: for a streamed tool call it is the arrival of
the event naming the tool (Anthropic's ``tool_use`` block start, Chat's ``tool_calls[].function.name``,
the Responses API's ``response.output_item.added``, Cohere's ``tool-call-start``, ollama's chunk with
``message.tool_calls``), not its first arguments piece (ollama: a chunk without output), which the simulator
sends ``GAP`` seconds later. Before the rule was one, the
Responses API's TTFT was the first ``function_call_arguments.delta``: one gap too late."""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import cohere
import httpx
import ollama
import openai
import pytest

from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture

GAP = 0.5  # wide: the check below must tell "the name" from "one gap later" on a loaded machine
_serial = itertools.count()
TOOL = {"name": "lookup", "description": "look up", "parameters": {"type": "object", "properties": {}}}


def _anthropic(sim: Simulator, model: str, scenario: Scenario) -> list[Any]:
    client = anthropic.Anthropic(api_key="x", base_url=sim.base_url, max_retries=0)
    with client:
        stream = client.messages.create(
            model=model,
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"name": "lookup", "input_schema": {"type": "object"}}],
            stream=True,
            extra_headers=scenario.headers(),
        )
        return [event.type for event in stream]


def _chat(sim: Simulator, model: str, scenario: Scenario) -> list[Any]:
    client: Any = openai.OpenAI(api_key="x", base_url=sim.base_url + "/v1", max_retries=0)
    with client:
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": TOOL}],
            stream=True,
            extra_headers=scenario.headers(),
        )
        return [chunk.choices[0].delta.tool_calls for chunk in stream if chunk.choices]


def _responses(sim: Simulator, model: str, scenario: Scenario) -> list[Any]:
    client: Any = openai.OpenAI(api_key="x", base_url=sim.base_url + "/v1", max_retries=0)
    with client:
        stream = client.responses.create(
            model=model,
            input="hi",
            tools=[{"type": "function", **TOOL, "strict": False}],
            stream=True,
            extra_headers=scenario.headers(),
        )
        return [event.type for event in stream]


def _cohere(sim: Simulator, model: str, scenario: Scenario) -> list[Any]:
    with httpx.Client() as http:
        client: Any = cohere.ClientV2(api_key="x", base_url=sim.base_url, httpx_client=http)
        stream = client.chat_stream(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            request_options={"additional_headers": scenario.headers(), "max_retries": 0},
        )
        return [event.type for event in stream]


def _ollama(sim: Simulator, model: str, scenario: Scenario) -> list[Any]:
    with ollama.Client(host=sim.base_url, headers=scenario.headers()) as client:
        stream = client.chat(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": TOOL}],
            stream=True,
        )
        calls = [part.message.tool_calls for part in stream if part.message.tool_calls]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls[0]] == [("lookup", {"q": "tok1 tok2 "})]
    return calls


SDKS = {"anthropic": _anthropic, "chat": _chat, "responses": _responses, "cohere": _cohere, "ollama": _ollama}
STOP = {
    "anthropic": "tool_use", "chat": "tool_calls", "responses": "tool_calls", "cohere": "TOOL_CALL",
    "ollama": "stop",  # ollama's done_reason after a tool call
}  # fmt: skip


@pytest.mark.parametrize("sdk", list(SDKS))
def test_tool_name_is_the_first_token(sim: Simulator, cap: Capture, sdk: str) -> None:
    model = f"tool-{sdk}-{next(_serial)}"
    scenario = Scenario(tool_call=True, tokens=3, ttft=0.05, gap=GAP, stop_reason="tool_use", input=30)
    events = SDKS[sdk](sim, model, scenario)
    assert events  # the SDK parsed the tool call stream
    cap.wait(1, calls=1)
    (served,) = [s for s in sim.wait_served(1) if s.model == model]
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED and record.parse_errors == 0
    assert record.stop_reasons == (STOP[sdk],)
    assert served.first_token_sent_at is not None and record.first_token_at is not None
    # causal, and before the first arguments piece (sent GAP later) could have arrived
    assert 0 <= record.first_token_at - served.first_token_sent_at < GAP / 2
