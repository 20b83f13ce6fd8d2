"""Bedrock's Converse API parser (no wire: a pure unit) through the attempt observer: the ConverseStream
events as botocore's service model names them, split anywhere; which event is the first output; how a
stream's end is decided; Converse bodies and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmtap._core.endpoints import EndpointMatcher
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import AttemptRecord, Outcome
from llmtap._core.request import info_from_body
from llmtap._providers import bedrock, bedrock_converse
from llmtap._providers._base import Facts, Output
from llmtap.simulator._clouds import encode_event_stream_message
from tests.support.replay import START

CONFIG = ObserverConfig(stall_threshold=5.0, gap_bounds=(0.01, 0.1), max_event_bytes=2048, max_json_bytes=1 << 20)
PROVIDER = bedrock_converse.PROVIDER


def event(kind: str, data: dict[str, Any]) -> bytes:
    return encode_event_stream_message(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
        json.dumps({**data, "p": "abcdefgh"}).encode(),
    )


def exception(kind: str) -> bytes:
    return encode_event_stream_message(
        {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
        b'{"message":"simulated"}',
    )


START_EVENT = event("messageStart", {"role": "assistant"})
DELTA = event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
STOP = event("messageStop", {"stopReason": "end_turn"})
METADATA = event(
    "metadata",
    {
        "usage": {
            "inputTokens": 9,
            "outputTokens": 3,
            "totalTokens": 17,
            "cacheReadInputTokens": 4,
            "cacheWriteInputTokens": 1,
        },
        "metrics": {"latencyMs": 250},
    },
)
STREAM = [START_EVENT, DELTA, DELTA, event("contentBlockStop", {"contentBlockIndex": 0}), STOP, METADATA]


def observer() -> AttemptObserver:
    start = START._replace(provider="aws.bedrock", url_path="/model/m/converse-stream")
    obs = AttemptObserver(start, PROVIDER, CONFIG)
    obs.on_response(200, [(b"content-type", b"application/vnd.amazon.eventstream"), (b"x-amzn-requestid", b"r-1")], 0.1)
    return obs


def run(messages: list[bytes], ending: Ending = Ending.EOF, size: int = 1 << 20) -> tuple[AttemptRecord, bool]:
    """The messages fed in reads of ``size`` bytes; the record and whether a read said the stream ended."""
    obs = observer()
    data = b"".join(messages)
    said = False
    for i in range(0, len(data), size):
        said = obs.on_chunk(data[i : i + size], 0.2 + i * 1e-6) or said
    record = obs.end(ending, 1.0)
    assert record is not None
    return record, said


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_stream_through_the_observer(size: int) -> None:
    record, said = run(STREAM, size=size)
    assert said  # metadata after messageStop: the terminal event
    assert record.outcome is Outcome.COMPLETED and record.streamed
    assert record.usage.input_tokens == 9 + 4 + 1  # the total: Converse leaves the cache out
    assert (record.usage.output_tokens, record.usage.cache_read_tokens, record.usage.cache_write_tokens) == (3, 4, 1)
    assert record.stop_reason == "end_turn" and record.request_id == "r-1"
    assert record.server_time == 0.25 and [s[:2] for s in record.server_times] == [("latencyMs", 0.25)]
    assert record.first_token_at is not None and record.parse_errors == 0


def test_a_body_the_server_ends_after_messagestop_is_incomplete_and_a_close_there_completed() -> None:
    """The rule of every provider: the stop reason came, the terminal event (``metadata``) not. The server
    ending the body there is ``incomplete``; the client closing it there had the whole answer (control)."""
    record, said = run(STREAM[:-1])
    assert not said  # not the terminal event: metadata may follow
    assert record.outcome is Outcome.INCOMPLETE and record.stop_reason == "end_turn"
    assert record.usage.output_tokens is None  # its usage never came
    closed, _ = run(STREAM[:-1], ending=Ending.CLOSED)
    assert closed.outcome is Outcome.COMPLETED and closed.stop_reason == "end_turn"


def test_a_close_before_messagestop_is_client_closed() -> None:
    record, _ = run([START_EVENT, DELTA], Ending.CLOSED)
    assert record.outcome is Outcome.CLIENT_CLOSED


def test_no_messagestop_is_incomplete_even_with_metadata() -> None:
    record, said = run([START_EVENT, DELTA, METADATA])
    assert not said
    assert record.outcome is Outcome.INCOMPLETE and record.error_type == "incomplete_stream"
    record, _ = run([START_EVENT, DELTA])  # the control: the same without metadata
    assert record.outcome is Outcome.INCOMPLETE


@pytest.mark.parametrize(
    "kind",
    [
        "throttlingException",
        "modelStreamErrorException",
        "internalServerException",
        "serviceUnavailableException",
        "validationException",
    ],
)
def test_exception_message_is_a_server_error(kind: str) -> None:
    record, said = run([START_EVENT, DELTA, exception(kind)])
    assert said
    assert record.outcome is Outcome.SERVER_ERROR and record.error_type == kind


def test_error_message_is_a_server_error() -> None:
    error = encode_event_stream_message({":message-type": "error", ":error-code": "InternalFailure"}, b"{}")
    record, said = run([START_EVENT, error])
    assert said and record.outcome is Outcome.SERVER_ERROR and record.error_type == "InternalFailure"


@pytest.mark.parametrize(
    ("kind", "data", "output"),
    [
        ("messageStart", {"role": "assistant"}, None),
        ("contentBlockDelta", {"delta": {"text": "x"}}, Output.TEXT),
        ("contentBlockDelta", {"delta": {"text": ""}}, None),
        ("contentBlockDelta", {"delta": {"reasoningContent": {"text": "hmm"}}}, Output.REASONING),
        ("contentBlockDelta", {"delta": {"reasoningContent": {"redactedContent": "AAAA"}}}, Output.REASONING),
        ("contentBlockDelta", {"delta": {"reasoningContent": {"signature": "sig"}}}, None),
        ("contentBlockDelta", {"delta": {"toolUse": {"input": '{"q"'}}}, Output.TOOL_ARGUMENTS),
        ("contentBlockDelta", {"delta": {"toolUse": {"input": ""}}}, None),
        ("contentBlockStart", {"start": {"toolUse": {"toolUseId": "t", "name": "lookup"}}}, Output.TOOL_NAME),
        ("contentBlockStop", {"contentBlockIndex": 0}, None),
        ("messageStop", {"stopReason": "end_turn"}, None),
    ],
)
def test_which_events_are_output(kind: str, data: dict[str, Any], output: Output | None) -> None:
    assert PROVIDER.on_event(Facts(), kind.encode(), json.dumps(data).encode()) is output


def test_first_token_is_the_first_output_not_message_start() -> None:
    obs = observer()
    obs.on_chunk(START_EVENT, 0.2)
    assert obs.first_token_at is None
    obs.on_chunk(event("contentBlockDelta", {"delta": {"reasoningContent": {"signature": "s"}}}), 0.3)
    assert obs.first_token_at is None
    obs.on_chunk(DELTA, 0.4)
    assert obs.first_token_at == 0.4


def test_past_the_first_token_deltas_are_skipped_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[bytes | None] = []
    on_event = PROVIDER.on_event

    def spy(facts: Facts, kind: bytes | None, data: bytes) -> Output | None:
        parsed.append(kind)
        return on_event(facts, kind, data)

    monkeypatch.setattr(PROVIDER, "on_event", spy)
    obs = observer()
    for message in [START_EVENT, DELTA, DELTA, DELTA, DELTA, STOP, METADATA]:
        obs.on_chunk(message, 0.2)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None and record.outcome is Outcome.COMPLETED and record.usage.output_tokens == 3
    assert parsed == [b"messageStart", b"contentBlockDelta", b"messageStop", b"metadata"]


def test_converse_body() -> None:
    facts = Facts()
    body = {
        "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7, "cacheReadInputTokens": 0},
        "metrics": {"latencyMs": 1200},
    }
    PROVIDER.on_body(facts, body, 200)
    assert facts.final and facts.stop_reasons == {0: "tool_use"} and facts.server_time == 1.2
    assert (facts.input_tokens, facts.output_tokens, facts.cache_read_tokens) == (5, 2, 0)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"message": "slow down", "__type": "com.amazon.coral.service#ThrottlingException"}, "ThrottlingException"),
        ({"message": "x", "__type": "ValidationException:http://internal.amazon.com/"}, "ValidationException"),
        ({"message": "no type"}, None),
    ],
)
def test_error_body_type_as_botocore_reads_it(body: dict[str, Any], expected: str | None) -> None:
    facts = Facts()
    PROVIDER.on_body(facts, body, 400)
    assert facts.error_type == expected and not facts.final


@pytest.mark.parametrize(
    ("path", "model", "stream"),
    [
        ("/model/amazon.nova-pro-v1%3A0/converse", "amazon.nova-pro-v1:0", False),
        (
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            True,
        ),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fabc/converse",
            "arn:aws:bedrock:us-east-1:1:application-inference-profile/abc",
            False,
        ),
        (  # decoded already, as httpx's and yarl's URLs give a path: the ARN's "/" inside the model segment
            "/model/arn:aws:bedrock:us-east-1:1:application-inference-profile/abc/converse-stream",
            "arn:aws:bedrock:us-east-1:1:application-inference-profile/abc",
            True,
        ),
    ],
)
def test_model_and_stream_from_the_path(path: str, model: str, stream: bool) -> None:
    endpoint = EndpointMatcher().match("bedrock-runtime.us-east-1.amazonaws.com", 443, path)
    assert endpoint is not None and endpoint.provider is PROVIDER and endpoint.provider_name == "aws.bedrock"
    assert PROVIDER.model_from_path(path) == model
    assert PROVIDER.stream_from_path(path) is stream


def test_a_decoded_arn_on_the_invoke_path_is_claude_too() -> None:
    """The anthropic SDK's Bedrock client sends an ARN quoted; httpx hands llmtap the path decoded."""
    path = "/model/arn:aws:bedrock:us-east-1:1:application-inference-profile/abc/invoke-with-response-stream"
    endpoint = EndpointMatcher().match("bedrock-runtime.us-east-1.amazonaws.com", 443, path)
    assert endpoint is not None and endpoint.provider is bedrock.PROVIDER
    assert bedrock.PROVIDER.model_from_path(path) == "arn:aws:bedrock:us-east-1:1:application-inference-profile/abc"


def test_a_long_model_is_bounded() -> None:
    model = PROVIDER.model_from_path("/model/" + "a" * 1000 + "/converse")
    assert model is not None and len(model) == 256


def test_max_tokens_from_inference_config() -> None:
    body = json.dumps({"messages": [], "inferenceConfig": {"maxTokens": 512, "temperature": 0.2}}).encode()
    assert info_from_body(body).max_tokens == 512


def test_invoke_stream_server_time_from_invocation_metrics() -> None:
    facts = Facts()
    data = json.dumps(
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"invocationLatency": 840, "firstByteLatency": 90}}
    ).encode()
    assert bedrock.PROVIDER.on_event(facts, None, data) is None
    assert facts.final and facts.server_time == 0.84
    assert facts.server_times == {"invocationLatency": 0.84, "firstByteLatency": 0.09}
