"""One time-to-first-token rule for every provider: the first event carrying generated output of any
kind (text, reasoning, a tool name or its arguments). Every provider is checked against the same
table of event kinds, each parser's classification alone and through the observer, which is the
one place that decides "first output"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmtap._core.observer import AttemptObserver, Ending
from llmtap._providers import anthropic, cohere, gemini, ollama_chat, openai_chat, openai_responses
from llmtap._providers._base import Facts, Output, Provider
from tests.support.replay import CONFIG
from tests.support.replay import START as START_VALUE

Event = tuple[str | None, dict[str, Any] | str]

KINDS = ("text", "reasoning", "tool_name", "tool_arguments", "none")
"""The rows every provider fills: an output kind, or ``none`` (events that carry no output)."""


def _chat(delta: dict[str, Any], **extra: Any) -> Event:
    return None, {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **extra}


def _gemini(*parts: dict[str, Any], **extra: Any) -> Event:
    return None, {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "index": 0}], **extra}


def _responses(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def _anthropic(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def _cohere(kind: str, message: dict[str, Any] | None = None, **fields: Any) -> Event:
    return kind, {"type": kind, **({} if message is None else {"delta": {"message": message}}), **fields}


def _ollama(message: dict[str, Any] | None, **extra: Any) -> Event:
    chunk: dict[str, Any] = {"model": "m", "created_at": "2026-01-01T00:00:00.000000001Z"}
    if message is not None:
        chunk["message"] = {"role": "assistant", **message}
    return None, {**chunk, "done": False, **extra}


TABLE: dict[Provider, dict[str, list[Event]]] = {
    anthropic.PROVIDER: {
        "text": [
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": "Hi"}),
        ],
        "reasoning": [
            _anthropic("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
            _anthropic("content_block_start", index=0, content_block={"type": "redacted_thinking", "data": "x"}),
        ],
        "tool_name": [
            _anthropic("content_block_start", index=1, content_block={"type": "tool_use", "id": "t", "name": "f"}),
            _anthropic("content_block_start", index=1, content_block={"type": "server_tool_use", "name": "web"}),
        ],
        "tool_arguments": [
            _anthropic("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"a'}),
        ],
        "none": [
            ("ping", {"type": "ping"}),
            _anthropic("message_start", message={"id": "msg", "model": "m", "usage": {"input_tokens": 3}}),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _anthropic("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": ""}),
            _anthropic("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
            _anthropic("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
            _anthropic("content_block_stop", index=0),
            _anthropic("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        ],
    },
    openai_chat.PROVIDER: {
        "text": [_chat({"content": "Hi"}), _chat({"refusal": "No"})],
        "reasoning": [_chat({"reasoning_content": "hmm"}), _chat({"reasoning": "hmm"})],
        "tool_name": [
            _chat({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "f"}}]}),
            _chat({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]}),
        ],
        "tool_arguments": [_chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]})],
        "none": [
            _chat({"role": "assistant", "content": ""}),
            _chat({"role": "assistant", "content": None, "refusal": None}),
            _chat({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
            (None, {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            _chat({}, usage=None),
        ],
    },
    openai_responses.PROVIDER: {
        "text": [
            _responses("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Hi"),
            _responses("response.refusal.delta", item_id="m", delta="No"),
        ],
        "reasoning": [
            _responses("response.reasoning_summary_text.delta", item_id="r", summary_index=0, delta="hmm"),
            _responses("response.reasoning_text.delta", item_id="r", delta="hmm"),
        ],
        "tool_name": [
            _responses(
                "response.output_item.added",
                output_index=1,
                item={"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": ""},
            ),
            _responses("response.output_item.added", output_index=0, item={"type": "web_search_call", "id": "w"}),
        ],
        "tool_arguments": [
            _responses("response.function_call_arguments.delta", item_id="fc", output_index=1, delta='{"a'),
        ],
        "none": [
            _responses("response.created", response={"id": "r", "model": "m", "status": "in_progress"}),
            _responses("response.in_progress", response={"id": "r", "status": "in_progress"}),
            _responses("response.output_item.added", output_index=0, item={"type": "message", "content": []}),
            _responses("response.output_item.added", output_index=0, item={"type": "reasoning", "summary": []}),
            _responses("response.content_part.added", item_id="m", part={"type": "output_text", "text": ""}),
            _responses("response.function_call_arguments.delta", item_id="fc", delta=""),
            _responses("response.function_call_arguments.done", item_id="fc", arguments="{}"),
        ],
    },
    gemini.PROVIDER: {
        "text": [_gemini({"text": "Hi"})],
        "reasoning": [_gemini({"text": "hmm", "thought": True})],
        "tool_name": [_gemini({"functionCall": {"name": "f", "args": {"a": 1}}})],
        # a Gemini function call arrives whole: its name and arguments in one part
        "tool_arguments": [_gemini({"functionCall": {"name": "f", "args": {}}}, {"text": ""})],
        "none": [
            _gemini({"text": ""}),
            _gemini({"thoughtSignature": "c2ln"}),
            (None, {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}, "modelVersion": "m"}),
            (None, {"candidates": [{"index": 0}]}),
        ],
    },
    cohere.PROVIDER: {
        "text": [
            _cohere("content-delta", {"content": {"text": "Hi"}}, index=0),
            _cohere("content-start", {"content": {"type": "text", "text": "Hi"}}, index=0),
        ],
        "reasoning": [
            _cohere("content-delta", {"content": {"thinking": "hmm"}}, index=0),
            _cohere("tool-plan-delta", {"tool_plan": "I will"}),
        ],
        "tool_name": [
            _cohere(
                "tool-call-start",
                {"tool_calls": {"id": "t", "type": "function", "function": {"name": "f", "arguments": ""}}},
                index=0,
            ),
        ],
        "tool_arguments": [_cohere("tool-call-delta", {"tool_calls": {"function": {"arguments": '{"a'}}}, index=0)],
        "none": [
            _cohere("message-start", {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": []}, id="m"),
            _cohere("content-start", {"content": {"type": "text", "text": ""}}, index=0),
            _cohere("content-delta", {"content": {"text": ""}}, index=0),
            _cohere("content-end", index=0),
            _cohere("tool-call-end", index=0),
            _cohere("citation-start", {"citations": {"start": 0, "end": 2, "text": "Hi"}}, index=0),
        ],
    },
    # NDJSON lines (each event below is framed as one line, application/x-ndjson)
    ollama_chat.PROVIDER: {
        "text": [_ollama({"content": "Hi"})],
        "reasoning": [_ollama({"content": "", "thinking": "hmm"})],
        "tool_name": [_ollama({"content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]})],
        # an ollama tool call arrives whole: its name and arguments in one chunk
        "tool_arguments": [_ollama({"tool_calls": [{"function": {"name": "f", "arguments": {}}}]})],
        "none": [
            _ollama({"content": ""}),
            _ollama({"content": "", "thinking": ""}),
            _ollama({"content": "", "tool_calls": []}),
            _ollama(None),
        ],
    },
}
EXPECTED = {
    "text": Output.TEXT,
    "reasoning": Output.REASONING,
    "tool_name": Output.TOOL_NAME,
    "tool_arguments": Output.TOOL_ARGUMENTS,
    "none": None,
}
# Gemini's functionCall part carries the name and the arguments together: it counts as the tool name
EXPECTED_PER_PROVIDER: dict[tuple[Provider, str], Output | None] = {
    (gemini.PROVIDER, "tool_arguments"): Output.TOOL_NAME,
    (ollama_chat.PROVIDER, "tool_arguments"): Output.TOOL_NAME,  # the same for ollama's
}


def _cases() -> list[Any]:
    return [
        pytest.param(provider, kind, event, id=f"{provider.__class__.__name__}-{kind}-{n}")
        for provider, rows in TABLE.items()
        for kind in KINDS
        for n, event in enumerate(rows[kind])
    ]


def _data(payload: dict[str, Any] | str) -> bytes:
    return (payload if isinstance(payload, str) else json.dumps(payload)).encode()


def test_every_provider_fills_the_same_table() -> None:
    for provider, rows in TABLE.items():
        assert tuple(rows) == KINDS, provider.name
        assert all(rows[kind] for kind in KINDS), provider.name


@pytest.mark.parametrize(("provider", "kind", "event"), _cases())
def test_classification(provider: Provider, kind: str, event: Event) -> None:
    name, payload = event
    output = provider.on_event(Facts(), None if name is None else name.encode(), _data(payload))
    assert output is EXPECTED_PER_PROVIDER.get((provider, kind), EXPECTED[kind])


def _sse(event: Event) -> bytes:
    name, payload = event
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    return head + b"data: " + _data(payload) + b"\n\n"


NDJSON: frozenset[Provider] = frozenset({ollama_chat.PROVIDER})
"""The providers whose streams are JSON lines (``application/x-ndjson``), not SSE."""


def _framed(provider: Provider, event: Event) -> bytes:
    """``event`` as ``provider``'s stream carries it: an SSE event, or one JSON line."""
    return _data(event[1]) + b"\n" if provider in NDJSON else _sse(event)


def _content_type(provider: Provider) -> bytes:
    return b"application/x-ndjson" if provider in NDJSON else b"text/event-stream"


@pytest.mark.parametrize(("provider", "kind", "event"), [c for c in _cases() if c.values[1] != "none"])
def test_first_token_is_the_first_output_event(provider: Provider, kind: str, event: Event) -> None:
    """Through the observer: every non-output event first (one chunk each, TTFT not set: the
    positive control), then the output event, whose arrival is the time to first token."""
    observer = AttemptObserver(START_VALUE, provider, CONFIG)
    observer.on_response(200, [(b"content-type", _content_type(provider))], 0.0)
    now = 0.0
    for quiet in TABLE[provider]["none"]:
        now += 0.01
        observer.on_chunk(_framed(provider, quiet), now)
    assert observer.first_token_at is None
    observer.on_chunk(_framed(provider, event), 1.0)
    observer.on_chunk(_framed(provider, TABLE[provider]["text"][0]), 2.0)
    record = observer.end(Ending.EOF, 3.0)
    assert record is not None and record.first_token_at == 1.0
    assert record.parse_errors == 0


# The provider's terminal events: a final one, and an in-band error. The attempt ends when one is parsed.
TERMINAL: dict[Provider, tuple[Event, Event]] = {
    anthropic.PROVIDER: (
        _anthropic("message_stop"),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    ),
    openai_chat.PROVIDER: ((None, "[DONE]"), (None, {"error": {"type": "server_error", "message": "x"}})),
    openai_responses.PROVIDER: (
        _responses("response.completed", response={"id": "r", "status": "completed", "output": []}),
        _responses("response.failed", response={"id": "r", "status": "failed", "error": {"code": "server_error"}}),
    ),
    gemini.PROVIDER: (
        (None, {"candidates": [{"index": 0, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3}}),
        (None, {"error": {"code": 503, "message": "x", "status": "UNAVAILABLE"}}),
    ),
    cohere.PROVIDER: (
        _cohere("message-end", None, delta={"finish_reason": "COMPLETE", "usage": {"tokens": {"output_tokens": 1}}}),
        _cohere("message-end", None, delta={"finish_reason": "ERROR", "error": "overloaded"}),
    ),
    ollama_chat.PROVIDER: (
        _ollama({"content": ""}, done=True, done_reason="stop", prompt_eval_count=3, eval_count=1),
        (None, {"error": "model runner has unexpectedly stopped"}),
    ),
}


@pytest.mark.parametrize("which", ["final", "error"])
@pytest.mark.parametrize("provider", list(TERMINAL), ids=lambda p: p.__class__.__name__)
def test_terminal_event_ends_the_attempt(provider: Provider, which: str) -> None:
    """Every provider: ``on_chunk`` says so at the chunk holding the terminal event (not before: the
    positive control), whatever arrives after it."""
    assert set(TERMINAL) == set(TABLE)
    final, error = TERMINAL[provider]
    observer = AttemptObserver(START_VALUE, provider, CONFIG)
    observer.on_response(200, [(b"content-type", _content_type(provider))], 0.0)
    for n, event in enumerate([*TABLE[provider]["none"], TABLE[provider]["text"][0]]):
        assert observer.on_chunk(_framed(provider, event), 0.1 + n / 100) is False
    assert observer.on_chunk(_framed(provider, final if which == "final" else error), 1.0) is True
    record = observer.end(Ending.TERMINAL, 1.0)
    assert record is not None and record.ended_at == 1.0
    assert record.outcome.value == ("completed" if which == "final" else "server_error")
    assert record.first_token_at is not None and record.parse_errors == 0
    assert observer.end(Ending.EOF, 2.0) is None


def test_take_counts_sets_valid_counts_and_refuses_the_rest_as_count_does() -> None:
    facts = Facts()
    facts.output_tokens = 7  # known from an earlier event
    usage = {"in": 3, "cache": 0, "neg": -1, "flag": True, "frac": 1.5, "huge": 1 << 64, "text": "4"}
    fields = (("in", "input_tokens"), ("cache", "cache_read_tokens"), ("absent", "output_tokens"))
    facts.take_counts(usage, fields)
    assert (facts.input_tokens, facts.cache_read_tokens, facts.output_tokens) == (3, 0, 7)  # absent: left as it was
    assert facts.rejected == 0  # positive control for the refusals below
    for key in ("neg", "flag", "frac", "huge", "text"):
        reference = Facts()
        assert reference.count(usage[key]) is None and reference.rejected == 1  # what count says of it
        facts.take_counts(usage, ((key, "cache_write_tokens"),))
        assert facts.cache_write_tokens is None
    assert facts.rejected == 5
