"""``llmtap._core.endpoints``: which traffic is observed and under which provider name.

* One case per compatible-server flavour. Path and naming need no wire, so the real SDKs send through
  ``httpx2.MockTransport`` there; the bytes-on-the-wire behaviour of the same parsers is covered against the
  simulator elsewhere.
* Zero configuration (last): what an official SDK sends is observed on any host; other clients' requests
  that look like an LLM API on a host no rule covers are named once in a log line. Against the simulator on
  ``127.0.0.1`` with **no** ``base_urls``: the real SDKs, raw httpx2 and raw aiohttp. Every "nothing
  observed" or "nothing logged" is paired with its positive control.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest

import llmtap
from llmtap import Outcome
from llmtap._core.endpoints import MAX_HINTS, EndpointMatcher, UnobservedHosts
from llmtap._providers import anthropic as anthropic_provider
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import capture

CHAT_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "served-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


@pytest.mark.parametrize(
    ("flavour", "bases", "names", "host", "port", "path", "expected"),
    [
        ("openai", (), {}, "api.openai.com", 443, "/v1/chat/completions", ("openai", "OpenAIChat")),
        ("openai_responses", (), {}, "api.openai.com", 443, "/v1/responses", ("openai", "OpenAIResponses")),
        ("openai_embeddings", (), {}, "api.openai.com", 443, "/v1/embeddings", None),
        ("anthropic", (), {}, "api.anthropic.com", 443, "/v1/messages", ("anthropic", "AnthropicMessages")),
        ("anthropic_count_tokens", (), {}, "api.anthropic.com", 443, "/v1/messages/count_tokens", None),
        (
            "azure_deployment",
            (),
            {},
            "myres.openai.azure.com",
            443,
            "/openai/deployments/gpt-4o/chat/completions",
            ("azure.ai.openai", "OpenAIChat"),
        ),
        (
            "azure_v1",
            (),
            {},
            "myres.openai.azure.com",
            443,
            "/openai/v1/responses",
            ("azure.ai.openai", "OpenAIResponses"),
        ),
        ("openrouter", (), {}, "openrouter.ai", 443, "/api/v1/chat/completions", ("openai", "OpenAIChat")),
        ("deepseek", (), {}, "api.deepseek.com", 443, "/chat/completions", ("deepseek", "OpenAIChat")),
        (
            "gemini",
            (),
            {},
            "generativelanguage.googleapis.com",
            443,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            ("gcp.gemini", "Gemini"),
        ),
        (
            "vertex",
            (),
            {},
            "us-central1-aiplatform.googleapis.com",
            443,
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
            ("gcp.vertex_ai", "Gemini"),
        ),
        (
            "vllm",
            ("http://vllm.internal:8000/v1",),
            {},
            "vllm.internal",
            8000,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        (
            "vllm_named",
            ("http://vllm.internal:8000/v1",),
            {"http://vllm.internal:8000/v1": "vllm"},
            "vllm.internal",
            8000,
            "/v1/chat/completions",
            ("vllm", "OpenAIChat"),
        ),
        (
            "ollama",
            ("http://localhost:11434/v1",),
            {},
            "localhost",
            11434,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        (
            "lm_studio",
            ("http://localhost:1234/v1",),
            {},
            "localhost",
            1234,
            "/v1/responses",
            ("openai", "OpenAIResponses"),
        ),
        ("other_port", ("http://localhost:1234/v1",), {}, "localhost", 1235, "/v1/chat/completions", None),
        # host normalisation: loopback names are one host, case and a trailing dot do not matter,
        # a base URL without a port has its scheme's default
        (
            "localhost_is_127",
            ("http://localhost:8787",),
            {},
            "127.0.0.1",
            8787,
            "/v1/messages",
            ("anthropic", "AnthropicMessages"),
        ),
        (
            "127_is_localhost",
            ("http://127.0.0.1:8787",),
            {},
            "localhost",
            8787,
            "/v1/messages",
            ("anthropic", "AnthropicMessages"),
        ),
        (
            "ipv6_loopback",
            ("http://[::1]:8787/v1",),
            {},
            "127.0.0.1",
            8787,
            "/v1/responses",
            ("openai", "OpenAIResponses"),
        ),
        (
            "case_and_dot",
            ("https://GW.Internal./v1",),
            {},
            "gw.internal",
            443,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        (
            "https_default",
            ("https://gw.internal/v1",),
            {},
            "gw.internal",
            443,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        (
            "https_explicit",
            ("https://gw.internal:443/v1",),
            {},
            "gw.internal",
            443,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        (
            "http_default",
            ("http://gw.internal/v1",),
            {},
            "gw.internal",
            80,
            "/v1/chat/completions",
            ("openai", "OpenAIChat"),
        ),
        ("http_is_not_443", ("http://gw.internal/v1",), {}, "gw.internal", 443, "/v1/chat/completions", None),
        ("other_loopback_port", ("http://localhost:8787",), {}, "127.0.0.1", 8788, "/v1/messages", None),
        ("unknown_host", (), {}, "example.com", 443, "/v1/chat/completions", None),
        ("not_llm", (), {}, "example.com", 443, "/index.html", None),
        # ollama's native API on ollama's default port, any host, without configuration
        ("ollama_default", (), {}, "127.0.0.1", 11434, "/api/chat", ("ollama", "OllamaChat")),
        ("ollama_generate", (), {}, "localhost", 11434, "/api/generate", ("ollama", "OllamaGenerate")),
        ("ollama_lan_host", (), {}, "gpu-box.lan", 11434, "/api/chat", ("ollama", "OllamaChat")),
        ("ollama_proxied", (), {}, "localhost", 11434, "/ollama/api/chat", ("ollama", "OllamaChat")),
        # ... but neither its other endpoints, nor another API there, nor its paths on another port
        ("ollama_tags", (), {}, "localhost", 11434, "/api/tags", None),
        ("ollama_embed", (), {}, "localhost", 11434, "/api/embed", None),
        ("port_11434_other_api", (), {}, "gpu-box.lan", 11434, "/v1/messages", None),
        ("api_chat_elsewhere", (), {}, "localhost", 8080, "/api/chat", None),
        ("api_chat_public_host", (), {}, "example.com", 443, "/api/chat", None),
        ("ollama_other_port", ("http://gpu-box:8000",), {}, "gpu-box", 8000, "/api/chat", ("ollama", "OllamaChat")),
        ("ollama_cloud", (), {}, "ollama.com", 443, "/api/chat", ("ollama", "OllamaChat")),
        ("ollama_cloud_openai", (), {}, "ollama.com", 443, "/v1/chat/completions", ("ollama", "OpenAIChat")),
    ],
)
def test_flavours(
    flavour: str,
    bases: tuple[str, ...],
    names: dict[str, str],
    host: str,
    port: int,
    path: str,
    expected: tuple[str, str] | None,
) -> None:
    endpoint = EndpointMatcher(bases, names).match(host, port, path)
    if expected is None:
        assert endpoint is None
    else:
        assert endpoint is not None
        assert (endpoint.provider_name, type(endpoint.provider).__name__) == expected


def test_lookup_marks_llm_paths_on_uncovered_hosts() -> None:
    """``lookup`` still finds the API of an LLM path on a host no rule covers, marked not observed (an
    official SDK's request there is observed, others get a hint); a path that is no API's is ``None``."""
    matcher = EndpointMatcher()
    found = matcher.lookup("127.0.0.1", 8787, "/v1/messages")
    assert found is not None and not found.observed and type(found.provider).__name__ == "AnthropicMessages"
    assert matcher.match("127.0.0.1", 8787, "/v1/messages") is None
    assert matcher.lookup("127.0.0.1", 8787, "/healthz") is None
    known = matcher.lookup("api.anthropic.com", 443, "/v1/messages")
    assert known is not None and known.observed


def test_match_any_host() -> None:
    assert EndpointMatcher(match_any_host=True).match("gateway", 80, "/llm/v1/messages") is not None
    assert EndpointMatcher(match_any_host=True).match("gateway", 80, "/llm/v1/other") is None


def test_model_from_path() -> None:
    from llmtap._providers import gemini

    assert gemini.PROVIDER.model_from_path("/v1beta/models/gemini-2.5-flash:generateContent") == "gemini-2.5-flash"
    path = "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    assert gemini.PROVIDER.model_from_path(path) == "gemini-2.5-pro"


def _mock(seen: list[str]) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(200, json=CHAT_BODY, headers={"x-request-id": "req_mock"})

    return httpx2.MockTransport(handler)


def test_azure_openai_sdk_paths_and_name() -> None:
    """The real ``AzureOpenAI`` client builds the deployment path; llmtap names it ``azure.ai.openai``."""
    seen: list[str] = []
    with capture() as cap:
        client = openai.AzureOpenAI(
            azure_endpoint="https://myres.openai.azure.com",
            api_version="2024-10-21",
            api_key="azure-secret",
            http_client=httpx2.Client(transport=_mock(seen)),
        )
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        cap.wait(1)
        (record,) = cap.records
    assert "/openai/deployments/gpt-4o/chat/completions" in seen[0]
    assert record.provider == "azure.ai.openai"
    assert record.request_model == "gpt-4o"
    assert record.response_model == "served-model"
    assert record.usage.input_tokens == 5
    assert record.request_id == "req_mock"


@pytest.mark.parametrize(
    ("base_url", "name"),
    [("http://localhost:11434/v1", None), ("http://vllm.internal:8000/v1", "vllm"), ("http://localhost:1234/v1", None)],
    ids=["ollama", "vllm_named", "lm_studio"],
)
def test_compatible_servers_through_the_openai_sdk(base_url: str, name: str | None) -> None:
    seen: list[str] = []
    settings = llmtap.Settings(base_urls=(base_url,), provider_names={base_url: name} if name else {})
    with capture(settings) as cap:
        client = openai.OpenAI(base_url=base_url, api_key="x", http_client=httpx2.Client(transport=_mock(seen)))
        client.chat.completions.create(model="llama3", messages=[{"role": "user", "content": "hi"}])
        cap.wait(1)
        (record,) = cap.records
    assert record.provider == (name or "openai")
    assert record.request_model == "llama3"
    assert record.stop_reasons == ("stop",)
    body: Any = json.loads(json.dumps(CHAT_BODY))
    assert record.usage.output_tokens == body["usage"]["completion_tokens"]


def test_provider_name_override(sim: Simulator) -> None:
    sim.clear()
    settings = llmtap.Settings(base_urls=(sim.base_url,), provider_names={sim.base_url: "my-gateway"})
    with capture(settings) as cap, httpx2.Client() as client:
        body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
        client.post(sim.base_url + "/v1/messages", json=body, headers=Scenario(tokens=1).headers()).read()
        cap.wait(1)
        assert cap.records[0].provider == "my-gateway"
        assert cap.sample("llmtap_attempts_total", gen_ai_provider_name="my-gateway") == 1
    sim.wait_served(1)  # served before the next test clears the simulator


# -- zero configuration: SDK traffic on any host, other LLM-looking traffic named once --------------------

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
    from llmtap._hooks.sdk_calls import SDK_HOOKS, SDK_PROVIDERS

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
