"""No secrets and no content in anything llmtap exports.

Canaries are planted in API keys, auth headers, a Gemini ``?key=`` query parameter, prompts, system
prompts, tool arguments, user metadata, completions (streamed and not), error messages and response
cookies. Then every exported byte is searched: the Prometheus exposition text, the spans and the
OTel metric points serialised with the OTLP protobuf encoder, and llmtap's log output. A positive
control (a planted request model, which *is* exported) proves the search finds what is there.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

import llmtap
from llmtap._instrumentor import LlmtapInstrumentor
from llmtap._log import reset as reset_log
from llmtap.testing import RecordingSink
from tests.support.fixtures import FIXTURES, require_fixtures
from tests.support.rawserver import RawServer, Reply, Seen, fixture_reply, http_response


def canary(kind: str) -> str:
    return f"CANARY{kind}{secrets.token_hex(8)}"


CANARIES = {
    kind: canary(kind)
    for kind in (
        "ANTHROPICKEY", "OPENAIKEY", "GEMINIKEY", "GEMINIQUERYKEY", "AUTHHEADER", "CUSTOMHEADER", "PROMPT",
        "SYSTEM", "TOOLARGS", "USERID", "OPENAIUSER", "COMPLETION", "STREAMCOMPLETION", "GEMINICOMPLETION",
        "ERRORMESSAGE", "COOKIE",
    )
}  # fmt: skip
CONTROL = canary("MODEL")  # a request model: exported by design, so the search must find it


def _anthropic_stream(seen: Seen) -> bytes:
    _, status, headers, body = fixture_reply(FIXTURES / "anthropic-messages-stream-text.json")
    text = body.decode()
    out = []
    for line in text.split("\n"):
        if line.startswith("data:") and '"text_delta"' in line:
            event = json.loads(line[5:])
            event["delta"]["text"] = CANARIES["STREAMCOMPLETION"]
            line = "data: " + json.dumps(event)
        out.append(line)
    headers = [*headers, (b"set-cookie", f"session={CANARIES['COOKIE']}".encode())]
    return http_response(status, headers, "\n".join(out).encode())


def _reply(seen: Seen) -> Reply:
    json_headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    request = json.loads(seen.body or b"{}")
    if seen.target.startswith("/v1/messages") and request.get("stream"):
        return Reply([_anthropic_stream(seen)])
    if seen.target.startswith("/v1/messages") and request.get("max_tokens") == 1:
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": CANARIES["ERRORMESSAGE"]}}
        return Reply([http_response(400, json_headers, json.dumps(error).encode())])
    if seen.target.startswith("/v1/messages"):
        message = {
            "type": "message", "id": "msg_1", "model": "claude-x", "role": "assistant", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": CANARIES["COMPLETION"]}],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        }  # fmt: skip
        return Reply([http_response(200, json_headers, json.dumps(message).encode())])
    if seen.target.startswith("/v1/chat/completions"):
        _, status, headers, body = fixture_reply(FIXTURES / "openai-chat-stream-include-usage.json")
        body = body.replace(b'"content":"This', f'"content":"{CANARIES["STREAMCOMPLETION"]}'.encode())
        return Reply([http_response(status, headers, body)])
    # Gemini streamGenerateContent?alt=sse
    chunk = {
        "candidates": [{"content": {"parts": [{"text": CANARIES["GEMINICOMPLETION"]}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 3},
        "modelVersion": "gemini-x",
    }
    sse = [(b"content-type", b"text/event-stream"), (b"connection", b"close")]
    return Reply([http_response(200, sse, b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")])


class Exported:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.recording = RecordingSink()
        self.log_lines: list[str] = []

    def channels(self) -> dict[str, bytes]:
        """Every exported byte, by channel."""
        metrics = self.reader.get_metrics_data()
        assert metrics is not None
        return {
            "prometheus exposition": generate_latest(self.registry),
            "spans (OTLP protobuf)": encode_spans(self.spans.get_finished_spans()).SerializeToString(),
            "OTel metric points (OTLP protobuf)": encode_metrics(metrics).SerializeToString(),
            "llmtap log": "\n".join(self.log_lines).encode(),
        }


class _Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def exported() -> Iterator[Exported]:
    require_fixtures()
    out = Exported()
    reset_log()
    logger = logging.getLogger("llmtap")
    handler = _Lines(out.log_lines)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    instrumentor = LlmtapInstrumentor()
    with RawServer(_reply) as server:
        instrumentor.instrument(
            settings=llmtap.Settings(base_urls=(server.base_url,)),
            registry=out.registry,
            tracer_provider=out.tracer_provider,
            meter_provider=MeterProvider(metric_readers=[out.reader]),
            extra_sinks=[out.recording],
        )
        try:
            _traffic(server.base_url)
            out.recording.wait(6, calls=6)
            out.log_lines.append(f"control line {CONTROL}")  # the log channel's positive control
            yield out
        finally:
            instrumentor.uninstrument()
            logger.removeHandler(handler)
            logger.setLevel(old_level)


def _traffic(base_url: str) -> None:
    c = CANARIES
    headers = {"x-custom-auth": c["CUSTOMHEADER"], "authorization": f"Bearer {c['AUTHHEADER']}"}
    tool = {"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    with anthropic.Anthropic(api_key=c["ANTHROPICKEY"], base_url=base_url, max_retries=0) as client:
        common: dict[str, Any] = {
            "model": CONTROL,
            "system": c["SYSTEM"],
            "metadata": {"user_id": c["USERID"]},
            "tools": [tool],
            "extra_headers": headers,
        }
        tool_use = {"type": "tool_use", "id": "t1", "name": "t", "input": {"a": c["TOOLARGS"]}}
        messages: list[Any] = [
            {"role": "user", "content": c["PROMPT"]},
            {"role": "assistant", "content": [tool_use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": c["PROMPT"]}]},
        ]
        with client.messages.stream(max_tokens=16, messages=messages, **common) as stream:
            assert c["STREAMCOMPLETION"] in stream.get_final_text()
        message = client.messages.create(max_tokens=16, messages=messages, **common)
        assert c["COMPLETION"] in message.content[0].text
        with pytest.raises(anthropic.BadRequestError, match=c["ERRORMESSAGE"]):
            client.messages.create(max_tokens=1, messages=messages, **common)
    with openai.OpenAI(api_key=c["OPENAIKEY"], base_url=base_url + "/v1", max_retries=0) as oai:
        chunks = oai.chat.completions.create(
            model=CONTROL,
            messages=[{"role": "system", "content": c["SYSTEM"]}, {"role": "user", "content": c["PROMPT"]}],
            user=c["OPENAIUSER"],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-custom-auth": c["CUSTOMHEADER"]},
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert c["STREAMCOMPLETION"] in text
    url = f"{base_url}/v1beta/models/{CONTROL}:streamGenerateContent?alt=sse&key={c['GEMINIQUERYKEY']}"
    body = {"contents": [{"role": "user", "parts": [{"text": c["PROMPT"]}]}]}
    with httpx2.Client() as raw:
        for headers_ in ({"x-goog-api-key": c["GEMINIKEY"]}, {}):
            with raw.stream("POST", url, json=body, headers=headers_) as response:
                assert c["GEMINICOMPLETION"].encode() in response.read()


def test_the_search_finds_what_is_exported(exported: Exported) -> None:
    """Positive control: the planted request model is in every channel, found by the same search."""
    for channel, data in exported.channels().items():
        assert CONTROL.encode() in data, channel


def test_no_canary_in_any_exported_byte(exported: Exported) -> None:
    channels = exported.channels()
    searched = sum(len(data) for data in channels.values())
    leaks = [
        (kind, channel)
        for kind, value in CANARIES.items()
        for channel, data in channels.items()
        if value.encode() in data or value.lower().encode() in data.lower() or value[-16:].encode() in data
    ]
    assert leaks == []
    assert searched > 10_000  # something substantial was searched
    print(f"\nsecrets: {len(CANARIES)} canaries, {len(channels)} channels, {searched} exported bytes searched")


def test_the_traffic_was_observed(exported: Exported) -> None:
    records = exported.recording.records
    assert len(records) == 6
    assert {r.provider for r in records} == {"anthropic", "openai", "gcp.gemini"}
    assert all(r.request_model == CONTROL for r in records)
