"""``llmtap._exporters.tracing``: one CLIENT span per attempt, from the request sent to the end of the body,
its status an error only for a failed attempt, and a retry linked to the attempt before it in its call.

The exporter is a unit (records in, spans out): it is fed hand-built records and read through the SDK's
in-memory exporter; the spans of real traffic are checked with the SDKs (test_anthropic_sdk.py ...)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from llmtap._core.calls import call_record
from llmtap._core.record import FAILED, AttemptStart, Outcome, Usage
from llmtap._exporters.tracing import TracingExporter
from tests.support.records import attempt_record
from tests.support.spans import T0, Spans

DETAIL = (
    "http.request.method", "url.path", "http.response.status_code", "gen_ai.request.stream",
    "llmtap.time_to_headers", "llmtap.stream.chunks", "llmtap.stream.max_gap",
    "llmtap.retry_after", "llmtap.server.processing_time", "llmtap.parse_errors",
)  # fmt: skip
"""What ``Settings.span_detail`` adds to a span."""


@pytest.fixture
def spans() -> Iterator[Spans]:
    made = Spans()
    yield made
    made.provider.shutdown()


def test_one_client_span_from_the_request_to_the_end_of_the_body(spans: Spans) -> None:
    spans.attempt(operation="chat", request_model="claude", started_at=5.0, ended_at=7.5, request_max_tokens=64)
    (span,) = spans.finished()
    assert (span.name, span.kind) == ("chat claude", SpanKind.CLIENT)
    assert (span.start_time, span.end_time) == (T0, T0 + 2_500_000_000)  # the body's end, not the headers'
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.request.model"] == "claude" and attributes["gen_ai.request.max_tokens"] == 64
    assert attributes["llmtap.outcome"] == "completed"


def test_a_span_carries_the_genai_client_span_attributes_and_nothing_a_metric_says(spans: Spans) -> None:
    """The default set, exactly: the GenAI client-span conventions, the outcome and the ids; no HTTP detail,
    no zero usage parts, ``gen_ai.request.stream`` only on streams (the span table of docs/reference/spans.md)."""
    spans.attempt(
        operation="chat", provider="anthropic", request_model="claude", server_address="api.anthropic.com",
        server_port=443, request_max_tokens=64, request_stream=False, streamed=False, call_id="c-1",
        response_id="msg_1", response_model="claude-1", stop_reasons=("end_turn",), request_id="req_1",
        usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=0, cache_write_tokens=0),
        headers_at=0.5, first_chunk_at=0.6, first_token_at=0.6, attributes=(("feature", "search"),),
    )  # fmt: skip
    (span,) = spans.finished()
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude",
        "gen_ai.request.max_tokens": 64,
        "server.address": "api.anthropic.com",
        "server.port": 443,
        "llmtap.call.id": "c-1",
        "feature": "search",
        "llmtap.outcome": "completed",
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.model": "claude-1",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "llmtap.request_id": "req_1",
    }


def test_a_stream_says_so_with_its_first_output_and_usage_parts_when_there_are_some(spans: Spans) -> None:
    """The conventions' time to first chunk is the first generated output (0.25), not the first body bytes
    (``message_start``, 0.05): on every streamed attempt's span, with default settings."""
    spans.attempt(
        request_stream=True, streamed=True, first_chunk_at=0.05, first_token_at=0.25,
        usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, cache_write_tokens=2, reasoning_tokens=3),
    )  # fmt: skip
    (span,) = spans.finished()
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["gen_ai.response.time_to_first_chunk"] == 0.25
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 4
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 2
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 3


def test_span_detail_adds_the_http_attributes_and_what_repeats_a_metric() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = TracingExporter(provider, detail=True)
    record = attempt_record(
        start_unix_ns=T0, request_stream=False, streamed=True, status_code=200, headers_at=0.1,
        first_chunk_at=0.2, first_token_at=0.3, chunks=4, max_gap=0.05, retry_after=1.5, server_time=0.4,
        parse_errors=1, usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=0),
    )  # fmt: skip
    start = AttemptStart(**{name: getattr(record, name) for name in AttemptStart._fields})
    exporter.end(record, exporter.start(start))
    (span,) = memory.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert {key: attributes[key] for key in DETAIL} == {
        "http.request.method": record.method,
        "url.path": record.url_path,
        "http.response.status_code": 200,
        "gen_ai.request.stream": False,
        "llmtap.time_to_headers": 0.1,
        "llmtap.stream.chunks": 4,
        "llmtap.stream.max_gap": 0.05,
        "llmtap.retry_after": 1.5,
        "llmtap.server.processing_time": 0.4,
        "llmtap.parse_errors": 1,
    }
    assert "gen_ai.usage.cache_read.input_tokens" not in attributes  # zero parts stay off with detail too
    provider.shutdown()


def test_spans_of_one_operation_and_model_share_their_name_string(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A span holds its name until exported: one string per (operation, model), bounded (past the bound a
    span gets its own, equal name)."""
    model = "".join(["clau", "de"])  # not a constant the compiler would share anyway
    spans.attempt(operation="chat", request_model=model)
    spans.attempt(operation="chat", request_model="".join(["clau", "de"]))
    first, second = spans.finished()
    assert first.name == second.name == "chat claude" and first.name is second.name
    monkeypatch.setattr("llmtap._exporters.tracing._MAX_NAMES", 1)  # full: the next pair is named, not kept
    spans.attempt(operation="chat", request_model="gpt")
    spans.attempt(operation="chat", request_model="gpt")
    third, fourth = spans.finished()[2:]
    assert third.name == fourth.name == "chat gpt" and third.name is not fourth.name


def test_a_span_without_a_model_is_named_by_its_operation(spans: Spans) -> None:
    spans.attempt(operation="chat", request_model="")
    (span,) = spans.finished()
    assert span.name == "chat" and "gen_ai.request.model" not in (span.attributes or {})


@pytest.mark.parametrize("outcome", list(Outcome))
def test_only_a_failed_attempt_is_an_error(spans: Spans, outcome: Outcome) -> None:
    """Rejections and service-side endings are errors; the app's own endings (a close, a cancel) are not."""
    spans.attempt(outcome=outcome, error_type="overloaded_error" if outcome is Outcome.SERVER_ERROR else None)
    (span,) = spans.finished()
    if outcome in FAILED:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == ("overloaded_error" if outcome is Outcome.SERVER_ERROR else outcome.value)
    else:
        assert span.status.status_code is StatusCode.UNSET


def test_a_retry_links_to_the_attempt_before_it_until_the_call_ends(spans: Spans) -> None:
    first = spans.attempt(call_id="c-1", outcome=Outcome.REJECTED, status_code=529)
    spans.attempt(call_id="c-1", resend_count=1, retry_reason="529")
    spans.attempt(call_id="c-2")  # another call: no link
    one, two, other = spans.finished()
    assert not one.links and not other.links
    (link,) = two.links
    assert link.context == one.context and dict(link.attributes or {}) == {"llmtap.link": "previous_attempt"}
    assert {s.attributes["llmtap.call.id"] for s in (one, two) if s.attributes} == {"c-1"}
    assert dict(two.attributes or {})["http.request.resend_count"] == 1
    spans.exporter.call_end(call_record("c-1", 2, 0.0, first))
    spans.attempt(call_id="c-1")  # after the call's end its spans are forgotten: nothing to link to
    assert not spans.finished()[-1].links
