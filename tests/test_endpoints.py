"""Which traffic is observed and under which provider name: one case per compatible-server flavour.

Path and naming need no wire, so the real SDKs send through ``httpx2.MockTransport`` here; the
bytes-on-the-wire behaviour of the same parsers is covered against the simulator elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import llmtap
from llmtap._core.endpoints import EndpointMatcher
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
