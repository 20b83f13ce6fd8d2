"""Claude through the ``anthropic`` package's cloud clients, for real: ``AnthropicBedrock`` (AWS
event-stream framing, SigV4 with fake credentials) and ``AnthropicVertex`` (SSE, a fixed access
token), sync and async, against the simulator speaking both wire formats: usage, TTFT and error types as each
cloud sends them. Every outcome class, for these clients too, is in ``test_sdk_cases.py``; both drive
the SDK through ``llmtap._drive``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from llmtap import Outcome, _drive
from llmtap._drive import Action, Mode, Result, Sdk
from llmtap._drive._anthropic import AnthropicSdk
from llmtap._providers.anthropic import AnthropicMessages
from llmtap._providers.bedrock_converse import BedrockConverse
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture

MODES = ["sync", "async"]

MODEL = "claude-test"  # names Claude, as Bedrock model ids do (`anthropic.claude-…`)


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # fake credentials: the SDK signs with SigV4 locally (botocore), the simulator never checks
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    yield


CLIENTS = ("bedrock", "vertex")


def drive(
    sim: Simulator, mode: Mode, action: Action, scenario: Scenario, client: str | type[Sdk], **config: Any
) -> Result:
    """One call of a cloud client of the ``anthropic`` package (2 retries unless ``config`` says otherwise)."""
    config.setdefault("max_retries", 2)
    return _drive.drive(client, sim.base_url, action, mode=mode, model=MODEL, headers=scenario.headers(), **config)


def served_since(sim: Simulator, since: float, api: str, count: int) -> list[Served]:
    """The ``count`` requests of ``api`` received since ``since``, waiting up to 5 s for them (the fixture's
    ``clear()`` already drops the records of requests an earlier test left in flight)."""
    deadline = time.monotonic() + 5.0
    while True:
        mine = [s for s in sim.wait_served(0) if s.api == api and s.received_at >= since]
        if len(mine) >= count or time.monotonic() > deadline:
            return mine
        time.sleep(0.01)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_completed_stream_matches_server(sim: Simulator, cap: Capture, mode: Mode, client: str) -> None:
    scenario = Scenario(
        tokens=8, ttft=0.05, gap=0.01, input=120, cache_read=40, cache_write=7, stop_reason="max_tokens"
    )
    since = time.perf_counter()
    run = drive(sim, mode, "stream", scenario, client)
    assert run.error is None, repr(run.error)
    cap.wait(1, calls=1)
    (record,) = cap.records
    (served,) = served_since(sim, since, client, 1)
    assert record.outcome is Outcome.COMPLETED and record.streamed
    assert record.usage.input_tokens == 120 + 40 + 7
    assert record.usage.cache_read_tokens == 40
    assert record.usage.cache_write_tokens == 7
    assert record.usage.output_tokens == 8
    assert record.stop_reason == "max_tokens"
    assert record.response_model == MODEL
    assert record.response_id is not None and record.response_id.startswith("msg_")
    # Bedrock sends its request id in x-amzn-requestid; Vertex documents none for these calls
    assert record.request_id == (served.request_id if client == "bedrock" else None)
    assert record.rate_limits == ()  # neither cloud sends rate-limit headers
    # TTFT: the first content token as the client saw it, after the server wrote it (causal bounds only:
    # which event sets it is checked on a fixed clock in test_eventstream.py, its ms accuracy over many
    # streams in test_ttft_accuracy.py)
    assert served.first_token_sent_at is not None and record.first_token_at is not None
    assert record.first_token_at >= served.first_token_sent_at
    assert record.time_to_first_token is not None and record.time_to_first_token >= 0.05
    assert record.chunks >= 8 and record.max_gap > 0.005
    assert record.parse_errors == 0
    assert cap.sample("llmtap_tokens_total", gen_ai_token_type="input") == 167
    assert cap.sample("llmtap_stop_reasons_total", reason="max_tokens") == 1
    assert cap.sample("llmtap_time_to_first_token_seconds_count") == 1
    (span,) = cap.spans
    assert span.attributes is not None
    assert span.attributes["gen_ai.response.finish_reasons"] == ("max_tokens",)
    assert span.end_time is not None and span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 >= 0.05 + 7 * 0.01  # ends with the stream


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_non_streaming_matches_server(sim: Simulator, cap: Capture, mode: Mode, client: str) -> None:
    scenario = Scenario(tokens=5, input=30, cache_read=4, stop_reason="end_turn")
    run = drive(sim, mode, "create", scenario, client)
    assert run.error is None, repr(run.error)
    cap.wait(1, calls=1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED and not record.streamed
    assert record.usage.input_tokens == 34 and record.usage.output_tokens == 5
    assert record.stop_reason == "end_turn"
    # Bedrock's x-amzn-bedrock-invocation-latency is the server time
    assert (record.server_time is not None) == (client == "bedrock")


@pytest.mark.parametrize("mode", MODES)
def test_a_corrupt_content_delta_ends_the_stream_early_and_is_counted(sim: Simulator, cap: Capture, mode: Mode) -> None:
    """Past the first token llmtap skips content deltas on their framing alone; their CRCs are checked by
    the SDK's decoder (botocore's), which raises the mismatch to the application and closes the body before
    its end: llmtap counts the attempt as ``client_closed`` (a stream without the fault: ``completed``)."""
    run = drive(sim, mode, "stream", Scenario(tokens=12, corrupt_at=6), "bedrock")
    assert type(run.error).__name__ == "ChecksumMismatch", repr(run.error)  # botocore refused the message
    assert run.pieces == [f"tok{i} " for i in range(6)]  # and gave nothing from it on
    clean = drive(sim, mode, "stream", Scenario(tokens=12), "bedrock")
    assert clean.error is None, repr(clean.error)
    cap.wait(2, calls=2)
    corrupt, good = cap.records
    assert corrupt.outcome is Outcome.CLIENT_CLOSED and corrupt.usage.output_tokens == 1  # message_start's
    assert corrupt.parse_errors == 0  # llmtap did not read the message it skipped
    assert good.outcome is Outcome.COMPLETED and good.usage.output_tokens == 12 and good.parse_errors == 0


def test_no_secrets_in_telemetry(sim: Simulator, cap: Capture) -> None:
    for client in CLIENTS:
        assert drive(sim, "sync", "stream", Scenario(tokens=2), client).error is None
    cap.wait(2, calls=2)
    assert len(cap.spans) == 2  # positive control: both calls were seen
    text = repr([s.attributes for s in cap.spans]) + repr(cap.records)
    for secret in ("ya29.secret", "AKIDEXAMPLE", "wJalrXUtnFEMI", "Signature=", "Bearer"):
        assert secret not in text


V = "/v1/projects/p/locations/us-east5/publishers"


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        # Bedrock runtime: Claude only (other vendors' models speak their own formats on these paths)
        ("bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-sonnet-4-5-v1:0/invoke", "aws.bedrock"),
        (
            "bedrock-runtime.eu-west-1.amazonaws.com",
            "/model/eu.anthropic.claude-haiku-4-5-v1:0/invoke-with-response-stream",
            "aws.bedrock",
        ),
        (
            "bedrock-runtime-fips.us-east-1.amazonaws.com",
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fabc/invoke",
            "aws.bedrock",
        ),
        ("bedrock-runtime.us-east-1.amazonaws.com", "/model/meta.llama3-70b-instruct-v1:0/invoke", None),
        # Converse: one format for every vendor's model (its own parser)
        ("bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-v2/converse-stream", "aws.bedrock"),
        ("bedrock-runtime.us-east-1.amazonaws.com", "/model/meta.llama3-70b-instruct-v1%3A0/converse", "aws.bedrock"),
        ("bedrock-runtime.us-east-1.amazonaws.com", "/guardrail/g1/version/1/apply", None),
        ("s3.us-east-1.amazonaws.com", "/bucket/invoke", None),
        # Claude's own API shape on the other cloud doors
        ("bedrock-mantle.us-east-1.api.aws", "/anthropic/v1/messages", "aws.bedrock"),
        ("aws-external-anthropic.us-east-1.api.aws", "/v1/messages", "anthropic"),
        ("claude.googleapis.com", "/v1/projects/p/locations/global/workspaces/w/invoke/v1/messages", "anthropic"),
        ("myres.services.ai.azure.com", "/anthropic/v1/messages", "anthropic"),
        ("myres.services.ai.azure.com", "/openai/v1/chat/completions", "azure.ai.openai"),
        # Vertex: Claude by publisher, Gemini unchanged, token counting is not generation
        (
            "us-east5-aiplatform.googleapis.com",
            f"{V}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
            "gcp.vertex_ai",
        ),
        ("aiplatform.googleapis.com", f"{V}/anthropic/models/claude-opus-4-1:streamRawPredict", "gcp.vertex_ai"),
        ("aiplatform.eu.rep.googleapis.com", f"{V}/anthropic/models/claude-opus-4-1:streamRawPredict", "gcp.vertex_ai"),
        ("us-east5-aiplatform.googleapis.com", f"{V}/anthropic/models/count-tokens:rawPredict", None),
        ("us-east5-aiplatform.googleapis.com", f"{V}/mistralai/models/mistral-large:rawPredict", None),
        (
            "us-east5-aiplatform.googleapis.com",
            f"{V}/google/models/gemini-2.5-pro:streamGenerateContent",
            "gcp.vertex_ai",
        ),
    ],
)
def test_cloud_endpoints(host: str, path: str, expected: str | None) -> None:
    from llmtap._core.endpoints import EndpointMatcher

    endpoint = EndpointMatcher().match(host, 443, path)
    if expected is None:
        assert endpoint is None
        return
    assert endpoint is not None and endpoint.provider_name == expected
    if "/publishers/google/" in path:
        assert endpoint.provider.name == "gcp.gemini"  # Gemini on Vertex keeps its own parser
    elif "/converse" in path:
        assert isinstance(endpoint.provider, BedrockConverse)
    elif "/openai/" not in path:
        assert isinstance(endpoint.provider, AnthropicMessages)  # Claude: the Anthropic event parser


def test_model_from_the_url_is_decoded_and_bounded() -> None:
    from llmtap._providers import bedrock as bedrock_provider
    from llmtap._providers import vertex_anthropic

    arn = "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-x"
    quoted = "arn:aws:bedrock:us-east-1:1:inference-profile%2Fus.anthropic.claude-x"
    assert bedrock_provider.PROVIDER.model_from_path(f"/model/{quoted}/invoke") == arn
    assert vertex_anthropic.PROVIDER.model_from_path(f"{V}/anthropic/models/claude%3Bx:rawPredict") == "claude;x"
    long = "claude-" + "x" * 1000
    assert len(bedrock_provider.PROVIDER.model_from_path(f"/model/{long}/invoke") or "") == 256


def _other(name: str, **auth: Any) -> type[Sdk]:
    """An adapter of another cloud client class of the ``anthropic`` package."""

    class Other(AnthropicSdk):
        _class = name

        def _auth(self) -> dict[str, Any]:
            return {"base_url": self.config.base_url, **auth}

    return Other


OTHER_CLIENTS = {
    "AnthropicBedrockMantle": _other("AnthropicBedrockMantle", api_key="mantle-secret", aws_region="us-east-1"),
    "AnthropicAWS": _other("AnthropicAWS", api_key="aws-secret", aws_region="us-east-1", workspace_id="wrkspc"),
    "AnthropicGoogleCloud": _other(
        "AnthropicGoogleCloud", project="p", location="global", workspace_id="w", token_provider=lambda: "tok"
    ),
    "AnthropicFoundry": _other("AnthropicFoundry", api_key="foundry-secret"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", list(OTHER_CLIENTS))
def test_other_cloud_clients_speak_the_messages_api(sim: Simulator, cap: Capture, mode: Mode, client: str) -> None:
    """Their hosts are matched above; here their real clients, through the simulator's /v1/messages
    (a local base URL, so the provider name is the parser's), stream and retry as the first-party one."""
    run = drive(sim, mode, "stream", Scenario(tokens=3, fail=1, retry_after=0.01), OTHER_CLIENTS[client])
    assert run.error is None, repr(run.error)
    cap.wait(2, calls=1)
    assert [r.outcome for r in cap.records] == [Outcome.REJECTED, Outcome.COMPLETED]
    assert cap.records[1].usage.output_tokens == 3 and cap.records[1].resend_count == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("client", "expected"), [("vertex", "RESOURCE_EXHAUSTED"), ("bedrock", "ThrottlingException")])
def test_quota_error_type(sim: Simulator, cap: Capture, mode: Mode, client: str, expected: str) -> None:
    """A 429 the SDK gives up on: Vertex's comes from Google's front end (a google.rpc body), Bedrock's
    type is in x-amzn-errortype; both are the record's error.type, documented values both."""
    run = drive(sim, mode, "stream", Scenario(tokens=2, fail=1, fail_status=429), client, max_retries=0)
    assert isinstance(run.error, anthropic.RateLimitError), repr(run.error)
    cap.wait(1, calls=1)
    (record,) = cap.records
    assert record.outcome is Outcome.REJECTED and record.error_type == expected
    assert cap.sample("llmtap_attempts_total", status_code="429", error_type=expected) == 1


@pytest.mark.parametrize(
    ("provider", "model"),
    [("aws.bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"), ("gcp.vertex_ai", "claude-sonnet-4-5@20250929")],
)
def test_cloud_claude_is_priced(provider: str, model: str) -> None:
    """Settings.cost finds Claude under the cloud's own prices (Bedrock ids exist only there)."""
    pytest.importorskip("genai_prices")
    from llmtap import Usage
    from llmtap._core.cost import Pricer

    cost = Pricer({}).price(provider, model, Usage(1000, 100, None, None, None))
    assert cost is not None and cost.total > 0
    assert Pricer({}).price(provider, "claude-nonexistent-9", Usage(1000, 100, None, None, None)) is None  # control


def test_bedrock_arn_model_through_the_sdk(sim: Simulator, cap: Capture) -> None:
    """An application inference profile's ARN: the SDK quotes its '/' into the path, httpx hands llmtap the path
    decoded (the ARN's '/' inside the model segment); observed, the model whole."""
    arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123"
    run = _drive.drive("bedrock", sim.base_url, "stream", model=arn, headers=Scenario(tokens=3).headers())
    assert run.error is None, repr(run.error)
    cap.wait(1, calls=1)
    (record,) = cap.records
    (served,) = sim.wait_served(1)
    assert "%2F" in served.path  # the control: quoted on the wire
    assert record.outcome is Outcome.COMPLETED and record.request_model == arn and record.provider == "aws.bedrock"
