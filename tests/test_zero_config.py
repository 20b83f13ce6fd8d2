"""Zero configuration for SDK traffic: what an official SDK sends is observed on any host; other
clients' requests that look like an LLM API on a host no rule covers are named once in a log line.

Against the simulator on ``127.0.0.1`` with **no** ``base_urls``: the real SDKs, raw httpx2 and raw
aiohttp. Every "nothing observed" or "nothing logged" is paired with its positive control.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest

import llmtap
from llmtap import Outcome
from llmtap._core.endpoints import MAX_HINTS, UnobservedHosts
from llmtap._providers import anthropic as anthropic_provider
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import capture

HINT = "looks like an LLM API"
MESSAGES: Any = [{"role": "user", "content": "hi"}]


def _hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llmtap" and HINT in r.getMessage()]


def test_anthropic_sdk_on_an_unconfigured_host_is_observed(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    sim.clear()
    with capture(llmtap.Settings()) as cap, caplog.at_level(logging.DEBUG, "llmtap"):
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=1)
        with client.messages.stream(
            model="claude-zero", max_tokens=16, messages=MESSAGES, extra_headers=Scenario(tokens=3, fail=1).headers()
        ) as stream:
            assert stream.get_final_text() == "tok0 tok1 tok2 "
        cap.wait(2, calls=1)
    assert [(r.provider, r.outcome, r.request_model) for r in cap.records] == [
        ("anthropic", Outcome.REJECTED, "claude-zero"),  # the 529 the SDK retried ...
        ("anthropic", Outcome.COMPLETED, "claude-zero"),  # ... and its retry, one call
    ]
    assert cap.calls[0].attempts == 2 and cap.records[1].retry_reason == "529"
    assert cap.records[0].server_address == "127.0.0.1"
    assert _hints(caplog) == []  # observed: nothing to hint


def test_openai_sdk_on_an_unconfigured_host_is_observed(sim: Simulator) -> None:
    with capture(llmtap.Settings()) as cap:
        client = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="k")
        client.responses.create(model="gpt-zero", input="hi", extra_headers=Scenario(tokens=2).headers())
        cap.wait(1, calls=1)
    assert [(r.provider, r.operation, r.outcome) for r in cap.records] == [("openai", "chat", Outcome.COMPLETED)]


def test_sdk_calls_off_leaves_the_unconfigured_host_unobserved(sim: Simulator) -> None:
    """Without the SDK hook (``sdk_calls=False``) an SDK is just another client: not observed. The
    control is the same call with the hook (the tests above)."""
    sim.clear()
    with capture(llmtap.Settings(sdk_calls=False)) as cap:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
        client.messages.create(model="claude-off", max_tokens=8, messages=MESSAGES)
        assert len(sim.wait_served(1)) >= 1
    assert cap.records == []


@pytest.mark.parametrize("base", ["http://localhost:{port}", "http://127.0.0.1:{port}/", "http://[::1]:{port}"])
def test_loopback_base_urls_match_each_other(sim: Simulator, base: str) -> None:
    port = sim.base_url.rsplit(":", 1)[1]
    with capture(llmtap.Settings(base_urls=(base.format(port=port),))) as cap, httpx2.Client() as http:
        body = {"model": "claude-raw", "max_tokens": 8, "messages": MESSAGES}
        http.post(sim.base_url + "/v1/messages", json=body, headers=Scenario(tokens=2).headers()).raise_for_status()
        cap.wait(1)
    assert [(r.provider, r.outcome) for r in cap.records] == [("anthropic", Outcome.COMPLETED)]


def test_raw_httpx_on_an_unconfigured_host_is_named_once(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    sim.clear()
    body = {"model": "claude-raw", "max_tokens": 8, "messages": MESSAGES}
    with capture(llmtap.Settings()) as cap, httpx2.Client() as http, caplog.at_level(logging.WARNING, "llmtap"):
        assert http.get(sim.base_url + "/healthz").status_code == 200
        assert _hints(caplog) == []  # the control: a path that is no LLM API's is not named
        for _ in range(3):
            http.post(sim.base_url + "/v1/messages", json=body, headers=Scenario(tokens=2).headers()).read()
        assert len(sim.wait_served(4)) == 4
    assert cap.records == []
    (hint,) = _hints(caplog)  # once, not three times
    assert sim.base_url in hint and "/messages" in hint and "Settings.base_urls" in hint
    assert "LLMTAP_BASE_URLS" in hint and "match_any_host" in hint


def test_raw_aiohttp_on_an_unconfigured_host_is_named_once(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                url = sim.base_url + "/v1beta/models/gemini-x:streamGenerateContent"
                async with session.post(url, data=b"{}", headers=Scenario(tokens=2).headers()) as response:
                    await response.read()

    with capture(llmtap.Settings()) as cap, caplog.at_level(logging.WARNING, "llmtap"):
        asyncio.run(main())
    assert cap.records == []
    (hint,) = _hints(caplog)
    assert sim.base_url in hint and ":streamGenerateContent" in hint


def test_hints_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """Hosts come from the app's traffic: at most MAX_HINTS are named, then one line says so."""
    hosts = UnobservedHosts()
    with caplog.at_level(logging.WARNING, "llmtap"):
        for i in range(MAX_HINTS + 50):
            hosts.note("https", f"gw{i}.example\n", 443, "/v1/messages", anthropic_provider.PROVIDER)
            hosts.note("https", f"gw{i}.example\n", 443, "/v1/messages", anthropic_provider.PROVIDER)
    lines = [r.getMessage() for r in caplog.records if r.name == "llmtap"]
    assert len(lines) == MAX_HINTS + 1
    assert "not observed; the first" in lines[-1]
    assert all("\n" not in line for line in lines)  # control characters never reach the log


def test_every_hooked_sdk_has_a_provider_name() -> None:
    """What an SDK's call sends on an uncovered host is named after the SDK: each hook has its name."""
    from llmtap._hooks.httpx_transport import SDK_HOOKS, SDK_PROVIDERS

    assert set(SDK_PROVIDERS) == set(SDK_HOOKS)


def test_bedrock_client_on_a_private_endpoint_keeps_its_service_name(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AnthropicBedrock`` pointed at a host no rule covers (a VPC endpoint; here the simulator): the
    SDK's call makes it observed, and Bedrock's own API keeps the name ``aws.bedrock``, not the SDK's."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")  # fake: SigV4 signs locally, nobody checks
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "ANTHROPIC_BEDROCK_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with capture(llmtap.Settings()) as cap:
        client = anthropic.AnthropicBedrock(base_url=sim.base_url, aws_region="us-east-1", max_retries=0)
        client.messages.create(
            model="anthropic.claude-zero-v1:0", max_tokens=8, messages=MESSAGES, extra_headers=Scenario().headers()
        )
        cap.wait(1, calls=1)
    assert [(r.provider, r.outcome, r.request_model) for r in cap.records] == [
        ("aws.bedrock", Outcome.COMPLETED, "anthropic.claude-zero-v1:0")
    ]
