"""One time-to-first-token rule for every provider: the first event carrying generated output of any
kind (text, reasoning, a tool name or its arguments). Every provider is checked against the same
table of event kinds, each parser's classification alone and through the observer, which is the
one place that decides "first output"."""

from __future__ import annotations

from typing import Any

import pytest

from llmtap._core.observer import AttemptObserver, Ending
from llmtap._providers import gemini, ollama_chat
from llmtap._providers._base import Facts, Output, Provider
from tests.support.events import KINDS, TABLE, TERMINAL, Event, data, sse
from tests.support.replay import CONFIG
from tests.support.replay import START as START_VALUE

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


def test_every_provider_fills_the_same_table() -> None:
    for provider, rows in TABLE.items():
        assert tuple(rows) == KINDS, provider.name
        assert all(rows[kind] for kind in KINDS), provider.name


@pytest.mark.parametrize(("provider", "kind", "event"), _cases())
def test_classification(provider: Provider, kind: str, event: Event) -> None:
    name, payload = event
    output = provider.on_event(Facts(), None if name is None else name.encode(), data(payload))
    assert output is EXPECTED_PER_PROVIDER.get((provider, kind), EXPECTED[kind])


NDJSON: frozenset[Provider] = frozenset({ollama_chat.PROVIDER})
"""The providers whose streams are JSON lines (``application/x-ndjson``), not SSE."""


def _framed(provider: Provider, event: Event) -> bytes:
    """``event`` as ``provider``'s stream carries it: an SSE event, or one JSON line."""
    return data(event[1]) + b"\n" if provider in NDJSON else sse(event)


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
