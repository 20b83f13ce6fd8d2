"""Bedrock through boto3, for real: the ``bedrock-runtime`` client (botocore over urllib3, SigV4 with fake
credentials) against the simulator speaking Converse, ConverseStream, InvokeModel and
InvokeModelWithResponseStream: each attempt once, with its ending, TTFT, tokens, stop reason, server time,
request id, model and retries; botocore's Stubber still works; other services pass untouched; the simulator's
frames are what botocore's own decoder reads.
"""

from __future__ import annotations

import gc
import http.client
import json
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.awsrequest
import botocore.client
import botocore.endpoint
import pytest
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError, ReadTimeoutError
from botocore.stub import Stubber

import llmtap
from llmtap import Outcome
from llmtap._core import handoff
from llmtap._core.record import AttemptRecord
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture, capture

MODEL = "us.anthropic.claude-test-v1:0"  # an inference-profile id: a ':' the URL carries quoted
MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]
INVOKE_BODY = json.dumps(
    {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
)


def client(sim: Simulator, scenario: Scenario | None = None, service: str = "bedrock-runtime", **config: Any) -> Any:
    """A real boto3 client of ``service`` for the simulator; ``scenario`` rides on every attempt as the
    simulator's header (added before signing, by a handler that returns nothing)."""
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})  # no retry unless asked
    made = boto3.client(
        service,
        endpoint_url=sim.base_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(**config),
    )
    if scenario is not None:
        header = scenario.to_header()

        def add_scenario(request: Any, **kwargs: Any) -> None:
            request.headers["x-llmtap-sim"] = header

        made.meta.events.register(f"before-sign.{made.meta.service_model.endpoint_prefix}.*", add_scenario)
    return made


def served(sim: Simulator, count: int) -> list[Served]:
    return [s for s in sim.wait_served(count) if s.api.startswith("bedrock")]


def only(cap: Capture, calls: int = 1) -> AttemptRecord:
    cap.wait(1, calls=calls)
    (record,) = cap.records
    return record


# -- every operation, completed --------------------------------------------------------------------------


def _read_converse_stream(bedrock: Any) -> str:
    response = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 64})
    text = []
    for event in response["stream"]:
        text.append(event.get("contentBlockDelta", {}).get("delta", {}).get("text", ""))
    return "".join(text)


def _read_converse(bedrock: Any) -> str:
    response = bedrock.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 64})
    return str(response["output"]["message"]["content"][0]["text"])


def _read_invoke_stream(bedrock: Any) -> str:
    response = bedrock.invoke_model_with_response_stream(modelId=MODEL, body=INVOKE_BODY)
    text = []
    for event in response["body"]:
        chunk = json.loads(event["chunk"]["bytes"])
        text.append(chunk.get("delta", {}).get("text", ""))
    return "".join(text)


def _read_invoke(bedrock: Any) -> str:
    response = bedrock.invoke_model(modelId=MODEL, body=INVOKE_BODY)
    return str(json.loads(response["body"].read())["content"][0]["text"])


OPERATIONS = {
    "converse_stream": (_read_converse_stream, True, "/converse-stream"),
    "converse": (_read_converse, False, "/converse"),
    "invoke_model_with_response_stream": (_read_invoke_stream, True, "/invoke-with-response-stream"),
    "invoke_model": (_read_invoke, False, "/invoke"),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_completed_matches_server(sim: Simulator, cap: Capture, operation: str) -> None:
    read, streamed, suffix = OPERATIONS[operation]
    scenario = Scenario(
        tokens=6, ttft=0.05, gap=0.01, input=120, cache_read=40, cache_write=7, stop_reason="max_tokens"
    )
    text = read(client(sim, scenario))
    assert text == scenario.expected_text()
    record = only(cap)
    (server,) = served(sim, 1)
    assert record.outcome is Outcome.COMPLETED and record.error_type is None
    assert record.provider == "aws.bedrock"
    assert record.request_model == MODEL  # decoded from the path
    assert record.url_path == f"/model/{MODEL}{suffix}"  # decoded, as httpx's and aiohttp's paths are
    assert server.path == f"/model/{quote(MODEL, safe='')}{suffix}"  # what went on the wire
    assert record.status_code == 200 and record.request_id == server.request_id
    assert record.streamed is streamed and record.request_stream is streamed
    assert record.request_max_tokens == 64
    assert record.usage.input_tokens == 120 + 40 + 7  # the total: Bedrock reports input without the cache
    assert (record.usage.cache_read_tokens, record.usage.cache_write_tokens) == (40, 7)
    assert record.usage.output_tokens == 6
    assert record.stop_reason == "max_tokens"
    assert record.server_time is not None and record.server_time > 0
    assert record.resend_count == 0 and record.retry_reason is None and record.call_id is not None
    if streamed:
        assert record.first_token_at is not None and record.headers_at is not None
        assert record.headers_at <= record.first_token_at < record.ended_at
    else:
        assert record.first_token_at is None
    (call,) = cap.calls
    assert call.attempts == 1 and call.outcome is Outcome.COMPLETED


@pytest.mark.parametrize("tool_call", [False, True], ids=["text", "tool_call"])
def test_ttft_is_the_first_output_not_message_start(sim: Simulator, cap: Capture, tool_call: bool) -> None:
    """messageStart comes with the headers, the first output (a text delta; a tool call's contentBlockStart
    naming the tool) 0.3 s later: llmtap's first token is after the app had messageStart, and no later than
    the app had that first output."""
    scenario = Scenario(tokens=4, ttft=0.3, gap=0.01, tool_call=tool_call, stop_reason="tool_use")
    response = client(sim, scenario).converse_stream(modelId=MODEL, messages=MESSAGES)
    seen: dict[str, float] = {}
    for event in response["stream"]:
        for name in event:
            if name != "ResponseMetadata":
                seen.setdefault(name, time.perf_counter())
    first_output = "contentBlockStart" if tool_call else "contentBlockDelta"
    record = only(cap)
    assert record.outcome is Outcome.COMPLETED and record.stop_reason == "tool_use"
    assert record.first_token_at is not None
    assert seen["messageStart"] < record.first_token_at <= seen[first_output]


# -- every ending of a stream --------------------------------------------------------------------------


def test_client_closed(sim: Simulator, cap: Capture) -> None:
    bedrock = client(sim, Scenario(tokens=20, gap=0.02))
    response = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)
    stream = response["stream"]
    for event in stream:
        if "contentBlockDelta" in event:
            break
    stream.close()
    record = only(cap)
    assert record.outcome is Outcome.CLIENT_CLOSED and record.first_token_at is not None


def test_abandoned(sim: Simulator, cap: Capture) -> None:
    bedrock = client(sim, Scenario(tokens=20, gap=0.02))

    def read_one_and_drop() -> None:
        response = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)
        for event in response["stream"]:
            if "contentBlockDelta" in event:
                break

    read_one_and_drop()
    with warnings.catch_warnings():  # the connection the app dropped is closed by the collector: its warning
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()  # the EventStream and its generator are a reference cycle: the collector finds them
    record = only(cap)
    assert record.outcome is Outcome.ABANDONED and record.first_token_at is not None


@pytest.mark.parametrize(
    ("error_type", "exception"),
    [
        ("rate_limit_error", "throttlingException"),
        ("overloaded_error", "serviceUnavailableException"),
        ("api_error", "internalServerException"),
        ("invalid_request_error", "validationException"),
    ],
)
@pytest.mark.parametrize("operation", ["converse_stream", "invoke_model_with_response_stream"])
def test_exception_frame_is_server_error(
    sim: Simulator, cap: Capture, operation: str, error_type: str, exception: str
) -> None:
    read, _, _ = OPERATIONS[operation]
    with pytest.raises(EventStreamError) as raised:
        read(client(sim, Scenario(tokens=6, error_event_at=2, error_type=error_type)))
    assert raised.value.response["Error"]["Code"] == exception  # botocore read the frame so too
    record = only(cap)
    assert record.outcome is Outcome.SERVER_ERROR and record.error_type == exception
    assert record.status_code == 200 and record.first_token_at is not None


@pytest.mark.parametrize("operation", ["converse_stream", "invoke_model_with_response_stream"])
def test_cut_mid_stream_is_connection_error(sim: Simulator, cap: Capture, operation: str) -> None:
    read, _, _ = OPERATIONS[operation]
    with pytest.raises(Exception) as raised:
        read(client(sim, Scenario(tokens=6, drop_at=2)))
    assert "ProtocolError" in {cls.__name__ for cls in type(raised.value).__mro__}
    record = only(cap)
    assert record.outcome is Outcome.CONNECTION_ERROR and record.error_type == "ProtocolError"
    assert record.first_token_at is not None


def test_a_converse_body_cut_is_a_connection_error_after_its_status(sim: Simulator, cap: Capture) -> None:
    """botocore reads a non-streamed body inside its send: the response's headers were seen all the same; the
    body ends short of its content-length without an error from urllib3 (botocore turns the check off)."""
    with pytest.raises(KeyError):  # botocore has urllib3 not enforce content-length: half a JSON body is parsed
        _read_converse(client(sim, Scenario(tokens=5, drop_at=2)))
    record = only(cap)
    assert record.outcome is Outcome.CONNECTION_ERROR and record.status_code == 200
    assert record.headers_at is not None and record.error_type == "IncompleteRead"


def test_an_invoke_model_body_cut_is_a_connection_error(sim: Simulator, cap: Capture) -> None:
    with pytest.raises(Exception) as raised:
        _read_invoke(client(sim, Scenario(tokens=5, drop_at=2)))
    # urllib3's read of a body the server cut raises (botocore wraps it for the app)
    assert type(raised.value).__name__ == "ResponseStreamingError"
    record = only(cap)
    assert record.outcome is Outcome.CONNECTION_ERROR and record.error_type == "ProtocolError"


@pytest.mark.parametrize("operation", ["converse_stream", "invoke_model_with_response_stream"])
def test_body_ending_before_the_stop_is_incomplete(sim: Simulator, cap: Capture, operation: str) -> None:
    read, _, _ = OPERATIONS[operation]
    read(client(sim, Scenario(tokens=4, no_stop=True)))  # botocore reads a short stream without a word
    record = only(cap)
    assert record.outcome is Outcome.INCOMPLETE and record.error_type == "incomplete_stream"


def test_read_timeout_mid_stream(sim: Simulator, cap: Capture) -> None:
    bedrock = client(sim, Scenario(tokens=6, stall_at=2, stall=5.0, stall_until_closed=True), read_timeout=0.3)
    with pytest.raises(Exception) as raised:
        _read_converse_stream(bedrock)
    assert "ReadTimeoutError" in type(raised.value).__name__
    record = only(cap)
    assert record.outcome is Outcome.TIMEOUT and record.first_token_at is not None


def test_read_timeout_before_headers(sim: Simulator, cap: Capture) -> None:
    bedrock = client(sim, Scenario(headers_delay=5.0), read_timeout=0.3)
    with pytest.raises(ReadTimeoutError):
        _read_converse(bedrock)
    record = only(cap)
    assert record.outcome is Outcome.TIMEOUT and record.status_code is None


@pytest.mark.parametrize(
    ("status", "code"), [(400, "ValidationException"), (403, "AccessDeniedException"), (429, "ThrottlingException")]
)
@pytest.mark.parametrize("operation", ["converse_stream", "converse", "invoke_model"])
def test_rejected_with_botocores_error_code(
    sim: Simulator, cap: Capture, operation: str, status: int, code: str
) -> None:
    read, _, _ = OPERATIONS[operation]
    with pytest.raises(ClientError) as raised:
        read(client(sim, Scenario(fail=1, fail_status=status)))
    assert raised.value.response["Error"]["Code"] == code
    record = only(cap)
    assert record.outcome is Outcome.REJECTED and record.status_code == status and record.error_type == code


# -- retries: one call, its attempts linked ------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("operation", ["converse_stream", "converse"])
def test_retries_are_one_call(sim: Simulator, cap: Capture, operation: str, status: int) -> None:
    read, _, _ = OPERATIONS[operation]
    read(
        client(
            sim, Scenario(tokens=3, fail=2, fail_status=status), retries={"total_max_attempts": 3, "mode": "standard"}
        )
    )
    cap.wait(3, calls=1)
    records = sorted(cap.records, key=lambda r: r.started_at)
    assert [s.retry_count for s in served(sim, 3)] == [0, 1, 2]  # the simulator read amz-sdk-request so too
    assert [r.outcome for r in records] == [Outcome.REJECTED, Outcome.REJECTED, Outcome.COMPLETED]
    assert [r.resend_count for r in records] == [0, 1, 2]
    assert [r.retry_reason for r in records] == [None, str(status), str(status)]
    assert len({r.call_id for r in records}) == 1 and records[0].call_id is not None
    (call,) = cap.calls
    assert call.attempts == 3 and call.outcome is Outcome.COMPLETED


def test_retry_after_a_connection_error(sim: Simulator, cap: Capture) -> None:
    """botocore retries a send that failed before any response (here: a read timeout before the headers)."""
    bedrock = client(sim, Scenario(headers_delay=5.0), read_timeout=0.2, retries={"total_max_attempts": 2})
    with pytest.raises(ReadTimeoutError):
        _read_converse(bedrock)
    cap.wait(2, calls=1)
    records = sorted(cap.records, key=lambda r: r.started_at)
    assert [r.outcome for r in records] == [Outcome.TIMEOUT, Outcome.TIMEOUT]
    assert [r.retry_reason for r in records] == [None, "timeout"]
    (call,) = cap.calls
    assert call.attempts == 2 and call.outcome is Outcome.TIMEOUT


def test_without_sdk_calls_the_attempt_number_comes_from_amz_sdk_request(sim: Simulator) -> None:
    """``sdk_calls=False``: no logical call, the simulator's URL observed as a base URL; botocore's own
    ``amz-sdk-request: attempt=N`` still numbers the attempts."""
    settings = llmtap.Settings(base_urls=(sim.base_url,), sdk_calls=False)
    sim.clear()
    with capture(settings) as cap:
        _read_converse_stream(
            client(
                sim, Scenario(tokens=3, fail=1, fail_status=503), retries={"total_max_attempts": 2, "mode": "standard"}
            )
        )
        cap.wait(2)
        records = sorted(cap.records, key=lambda r: r.started_at)
    assert [r.outcome for r in records] == [Outcome.REJECTED, Outcome.COMPLETED]
    assert [r.resend_count for r in records] == [0, 1]
    assert [r.retry_reason for r in records] == [None, "unknown"]
    assert all(r.call_id is None and r.provider == "aws.bedrock" for r in records)


# -- what is not observed, and what llmtap must not break ------------------------------------------


def test_stubber_still_works(sim: Simulator, cap: Capture) -> None:
    """botocore's Stubber answers in ``before-call``: the stubbed answer comes back as without llmtap and
    nothing went on the wire to count. The same client unstubbed is counted (the control)."""
    bedrock = client(sim, Scenario(tokens=2))
    stubbed = {
        "output": {"message": {"role": "assistant", "content": [{"text": "stubbed"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        "metrics": {"latencyMs": 1},
    }
    with Stubber(bedrock) as stubber:
        stubber.add_response("converse", stubbed, {"modelId": MODEL, "messages": MESSAGES})
        response = bedrock.converse(modelId=MODEL, messages=MESSAGES)
        stubber.assert_no_pending_responses()
    assert response["output"]["message"]["content"][0]["text"] == "stubbed"
    assert cap.records == [] and cap.calls == []
    assert _read_converse(bedrock) == Scenario(tokens=2).expected_text()  # control: unstubbed, on the wire
    assert only(cap).outcome is Outcome.COMPLETED


def test_other_services_pass_untouched(sim: Simulator) -> None:
    """An S3 request whose path looks like Converse's, with no base URL configured: not observed, its error
    (the simulator has no S3) raised as without llmtap. A bedrock-runtime call in the same block is (the control)."""
    sim.clear()
    with capture(llmtap.Settings()) as cap:
        s3 = client(sim, service="s3", s3={"addressing_style": "path"})
        with pytest.raises(ClientError):
            s3.get_object(Bucket="model", Key="x/converse")
        assert [s.path for s in sim.wait_served(1)] == ["/model/x/converse"]
        assert cap.records == []
        _read_converse(client(sim, Scenario(tokens=2)))  # not a known host either: observed as a Bedrock call
        record = only(cap)
    assert record.outcome is Outcome.COMPLETED and record.provider == "aws.bedrock"


def test_clients_made_before_instrument_and_uninstrument(sim: Simulator) -> None:
    sent = botocore.endpoint.Endpoint._send
    made_call = botocore.client.BaseClient._make_api_call
    made_response = botocore.awsrequest.AWSResponse.__init__
    bedrock = client(sim, Scenario(tokens=2))  # before instrument()
    sim.clear()
    with capture() as cap:
        assert botocore.endpoint.Endpoint._send is not sent  # wrapped on the class
        assert botocore.client.BaseClient._make_api_call is not made_call
        assert botocore.awsrequest.AWSResponse.__init__ is not made_response
        _read_converse_stream(bedrock)
        assert only(cap).outcome is Outcome.COMPLETED
    assert botocore.endpoint.Endpoint._send is sent  # restored
    assert botocore.awsrequest.AWSResponse.__init__ is made_response
    assert botocore.client.BaseClient._make_api_call is made_call
    assert _read_converse_stream(bedrock) == Scenario(tokens=2).expected_text()  # still works, unobserved


def test_no_secret_on_any_record_or_span(sim: Simulator, cap: Capture) -> None:
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url=sim.base_url,
        region_name="us-east-1",
        aws_access_key_id="AKIDSECRETKEYID",
        aws_secret_access_key="wJalrXUtnFEMIsecretsecret",
        aws_session_token="SESSIONTOKENSECRET",
    )
    bedrock.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "my private prompt"}]}])
    record = only(cap)
    seen = repr(record) + repr([span.attributes for span in cap.spans])
    for secret in ("AKIDSECRETKEYID", "wJalrXUtnFEMI", "SESSIONTOKENSECRET", "Signature", "private prompt"):
        assert secret not in seen
    assert MODEL in seen  # control: the record and spans are what was searched


# -- the simulator's frames, read by botocore's own decoder --------------------------------------------


def _raw_stream(sim: Simulator, path: str, body: bytes, scenario: Scenario) -> bytes:
    url = urlsplit(sim.base_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request("POST", path, body=body, headers={**scenario.headers(), "content-type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("content-type") == "application/vnd.amazon.eventstream"
        return response.read()
    finally:
        connection.close()


def _decoded(data: bytes) -> list[tuple[dict[str, Any], Any]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(message.headers, json.loads(message.payload)) for message in buffer]


def test_converse_stream_frames_decode_with_botocore(sim: Simulator) -> None:
    scenario = Scenario(tokens=3, input=9, cache_read=2, cache_write=1, stop_reason="stop_sequence")
    body = json.dumps({"messages": MESSAGES}).encode()
    messages = _decoded(_raw_stream(sim, f"/model/{quote(MODEL, safe='')}/converse-stream", body, scenario))
    assert {headers[":message-type"] for headers, _ in messages} == {"event"}
    events = [headers[":event-type"] for headers, _ in messages]
    assert events == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    payloads = [payload for _, payload in messages]
    assert payloads[0]["role"] == "assistant"
    assert "".join(p["delta"]["text"] for p in payloads[1:4]) == scenario.expected_text()
    assert payloads[5]["stopReason"] == "stop_sequence"
    assert payloads[6]["usage"] == {
        "inputTokens": 9,
        "outputTokens": 3,
        "totalTokens": 15,
        "cacheReadInputTokens": 2,
        "cacheWriteInputTokens": 1,
    }
    assert payloads[6]["metrics"]["latencyMs"] >= 1
    assert all(isinstance(p["p"], str) for p in payloads)  # Bedrock's padding field


def test_converse_stream_exception_and_corrupt_frames_decode_with_botocore(sim: Simulator) -> None:
    body = json.dumps({"messages": MESSAGES}).encode()
    path = f"/model/{quote(MODEL, safe='')}/converse-stream"
    messages = _decoded(_raw_stream(sim, path, body, Scenario(tokens=3, error_event_at=1, error_type="api_error")))
    headers, payload = messages[-1]
    assert headers[":message-type"] == "exception"
    assert headers[":exception-type"] == "internalServerException" and "message" in payload
    with pytest.raises(ChecksumMismatch):
        _decoded(_raw_stream(sim, path, body, Scenario(tokens=3, corrupt_at=1)))


def test_a_corrupt_frame_is_a_parse_error_and_botocore_raises(sim: Simulator, cap: Capture) -> None:
    """The first delta's CRC is wrong: llmtap counts a parse error, botocore raises to the app, which leaves the
    stream to the collector (boto3 closes nothing on an error)."""
    with pytest.raises(ChecksumMismatch):
        _read_converse_stream(client(sim, Scenario(tokens=4, corrupt_at=0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    record = only(cap)
    assert record.parse_errors >= 1
    assert record.outcome is Outcome.ABANDONED


@pytest.fixture(autouse=True)
def _no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    yield


def test_time_is_not_spent_waiting(sim: Simulator, cap: Capture) -> None:
    """The stream arrives at the app as the server paces it: the observer buffers nothing whole (the first
    event reaches the app long before the last is sent)."""
    bedrock = client(sim, Scenario(tokens=5, ttft=0.0, gap=0.2))
    response = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)
    first_delta_at = None
    for event in response["stream"]:
        if "contentBlockDelta" in event and first_delta_at is None:
            first_delta_at = time.perf_counter()
    (server,) = served(sim, 1)
    assert first_delta_at is not None and first_delta_at < server.ended_at
    assert only(cap).outcome is Outcome.COMPLETED


# -- a dropped stream is ended outside the garbage collector --------------------------------------------


@pytest.mark.parametrize("early", [0, 1])
def test_a_dropped_stream_is_ended_outside_the_collector(sim: Simulator, early: int) -> None:
    """The app drops a boto3 stream (unread, or partly read) in a reference cycle; a collection on another thread
    that holds the app's sink lock finds it: llmtap only hands the ending off (else that thread would wait on its
    own lock), and the attempt is counted abandoned once, on an ordinary stack."""
    from llmtap import _lifecycle
    from llmtap._drive import Config, adapter, run
    from tests.support.gcwatch import InsideGc, LockedSink, collect_holding

    held = Scenario(tokens=20, stall_at=3, stall=2.0, stall_until_closed=True)  # ends only when the client leaves

    sim.clear()
    with InsideGc().installed() as inside:
        sink = LockedSink(inside)
        _lifecycle.activate(llmtap.Settings(otel_metrics=False), extra_sinks=[sink])
        try:
            bedrock = adapter("boto3", Config(sim.base_url, api_key="k"))
            gc.disable()
            try:
                result = run(bedrock, "hold", "amazon.nova-gc", headers=held.headers(), early=early)
                assert result.error is None, repr(result.error)
                holder: list[Any] = list(result.value)
                holder.append(holder)
                dropped = weakref.ref(holder[0])
                del holder, result
                assert dropped() is not None and sink.records == []  # garbage only the cyclic collector finds
                with warnings.catch_warnings():  # botocore leaves the dropped stream's connection to the collector
                    warnings.simplefilter("ignore", ResourceWarning)
                    thread, errors = collect_holding(sink.lock)
                    thread.join(60)
                assert not thread.is_alive(), "llmtap ended the attempt inside the collector, under the lock"
            finally:
                gc.enable()
            assert errors == [] and dropped() is None
            assert sink.inside_gc == 0
            deadline = time.monotonic() + 5
            while not sink.records and time.monotonic() < deadline:
                handoff.drain()
                time.sleep(0.01)
            assert [r.outcome for r in sink.records] == [Outcome.ABANDONED]
            assert len(sink.calls) == 1
            bedrock.close()
        finally:
            _lifecycle.deactivate()


def test_a_long_converse_body_is_not_scanned(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The call's parameters say what the request is (its output limit in ``inferenceConfig``, model and stream in
    the path): a conversation with a long history is not scanned byte by byte on its way out. Without the call
    hook (``sdk_calls=False``) the body is what is left to read (the control)."""
    from llmtap._core import request as request_module

    scanned: list[int] = []
    scan = request_module.info_from_body

    def spy(body: bytes) -> Any:
        scanned.append(len(body))
        return scan(body)

    monkeypatch.setattr(request_module, "info_from_body", spy)
    history = [{"role": "user", "content": [{"text": "word " * 50_000}]}]
    for sdk_calls in (True, False):
        sim.clear()
        with capture(llmtap.Settings(base_urls=(sim.base_url,), sdk_calls=sdk_calls)) as cap:
            client(sim, Scenario(tokens=2)).converse(modelId=MODEL, messages=history, inferenceConfig={"maxTokens": 77})
            record = only(cap, calls=1)
        assert record.request_max_tokens == 77 and record.request_model == MODEL
        assert (scanned == []) is sdk_calls, (sdk_calls, scanned)


def test_the_body_proxy_is_the_real_response_to_its_readers(sim: Simulator, cap: Capture) -> None:
    """What botocore and the app read or set on InvokeModel's raw body reaches urllib3's response."""
    response = client(sim, Scenario(tokens=3)).invoke_model(modelId=MODEL, body=INVOKE_BODY)
    body = response["body"]
    raw = body._raw_stream
    assert type(raw).__name__ == "ObservedBody"  # the control: the proxy is what botocore reads
    inner = raw._inner
    raw.auto_close = False
    assert inner.auto_close is False and raw.auto_close is False
    assert raw.status == inner.status == 200 and raw.readable()
    with body as stream:  # StreamingBody's ``with`` hands out its raw stream: the proxy
        assert json.loads(stream.read())["stop_reason"] == "end_turn"
    record = only(cap)
    assert record.outcome is Outcome.COMPLETED and record.usage.output_tokens == 3


def test_a_response_a_before_send_handler_supplies_is_not_counted(sim: Simulator, cap: Capture) -> None:
    """moto and recorders answer in ``before-send``: nothing goes on the wire, nothing is counted, and the app gets
    the handler's answer as without llmtap. The same client without the handler is counted (the control)."""
    from botocore.awsrequest import AWSResponse

    body = json.dumps(
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "canned"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
            "metrics": {"latencyMs": 1},
        }
    ).encode()

    class Raw:
        def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
            yield body

    def canned(request: Any, **kwargs: Any) -> AWSResponse:
        response = AWSResponse(request.url, 200, {"content-type": "application/json"}, Raw())
        response._content = body
        return response

    bedrock = client(sim, Scenario(tokens=2))
    bedrock.meta.events.register_first("before-send.bedrock-runtime.Converse", canned)
    assert _read_converse(bedrock) == "canned"
    assert sim.wait_served(0) == [] and cap.records == []
    bedrock.meta.events.unregister("before-send.bedrock-runtime.Converse", canned)
    assert _read_converse(bedrock) == Scenario(tokens=2).expected_text()
    assert only(cap).outcome is Outcome.COMPLETED
