"""``llmtap._core.record``: the outcome classes (each outcome in exactly one, as the table of
docs/explanation/endings.md says),
what a record derives from its times, and the named tuples the request path makes with ``tuple.__new__``
(without their Python-level constructors, which check the field count)."""

from __future__ import annotations

import re
from typing import Any

import httpx

import llmtap
from llmtap._core.builder import build_record
from llmtap._core.calls import call_record
from llmtap._core.gaps import GapCounter
from llmtap._core.headers import read_header_items
from llmtap._core.record import APP_SIDE, FAILED, SERVICE_SIDE, CallRecord, Cost, Outcome
from llmtap._core.request import info_from_json
from llmtap._providers._base import Facts
from llmtap._providers.anthropic import PROVIDER as ANTHROPIC
from llmtap.testing import capture
from tests.support.paths import ROOT
from tests.support.records import attempt_record
from tests.support.replay import START


def _documented_outcomes() -> dict[str, str]:
    """outcome -> side (``app``, ``service``, ``service (refusal)``, ``""``), from docs/explanation/endings.md."""
    text = (ROOT / "docs" / "explanation" / "endings.md").read_text()
    section = text[text.index("## The outcomes") : text.index("## Rejected is not interrupted")]
    return dict(re.findall(r"^\| `([a-z_]+)` \|.*\| ([a-z() ]*?) *\|$", section, re.M))


def test_each_outcome_is_in_exactly_one_class() -> None:
    classes = [{Outcome.COMPLETED}, {Outcome.REJECTED}, SERVICE_SIDE, APP_SIDE]
    for outcome in Outcome:
        assert sum(outcome in c for c in classes) == 1, outcome
    assert SERVICE_SIDE | {Outcome.REJECTED} == FAILED


def test_the_documented_table_names_every_outcome_and_its_side() -> None:
    documented = _documented_outcomes()
    assert set(documented) == {o.value for o in Outcome}
    sides = {"app": APP_SIDE, "service": SERVICE_SIDE, "service (refusal)": {Outcome.REJECTED}}
    for outcome in Outcome:
        side = documented[outcome.value]
        assert (outcome in sides[side]) if side else outcome is Outcome.COMPLETED, (outcome, side)


def test_is_error_is_a_failure_not_an_app_side_ending() -> None:
    assert [o for o in Outcome if attempt_record(outcome=o).is_error] == [o for o in Outcome if o in FAILED]
    assert attempt_record(outcome=Outcome.REJECTED).is_error  # positive control
    assert not attempt_record(outcome=Outcome.CLIENT_CLOSED).is_error


def test_times_are_measured_from_the_attempts_start() -> None:
    record = attempt_record(started_at=10.0, headers_at=10.5, first_chunk_at=10.75, first_token_at=11.0, ended_at=14.0)
    assert (record.duration, record.time_to_headers, record.time_to_first_chunk, record.time_to_first_token) == (
        4.0,
        0.5,
        0.75,
        1.0,
    )
    never = attempt_record(started_at=10.0, ended_at=10.25)  # refused before any header, chunk or token
    assert (never.time_to_headers, never.time_to_first_chunk, never.time_to_first_token) == (None, None, None)


def test_the_stop_reason_is_the_first_choices() -> None:
    assert attempt_record(stop_reasons=("length", "stop")).stop_reason == "length"
    assert attempt_record(stop_reasons=()).stop_reason is None


def test_a_calls_times_include_its_retries() -> None:
    call = CallRecord("c", "anthropic", "chat", "m", 3, Outcome.COMPLETED, 1.0, 9.0, 8.0)
    assert (call.duration, call.time_to_first_token) == (8.0, 7.0)
    assert call._replace(first_token_at=None).time_to_first_token is None


def test_a_costs_total_leaves_the_savings_out() -> None:
    assert Cost(input=1.0, output=2.0, cache_read=0.25, cache_write=0.5, cache_savings=100.0).total == 3.75


BASE = "http://llm.test"


def _complete(value: Any) -> bool:
    return len(value) == len(type(value)._fields)


def test_every_named_tuple_of_the_request_path_is_complete() -> None:
    with capture(llmtap.Settings(base_urls=(BASE,), traces=False), patch=False) as cap:
        request = httpx.Request("POST", BASE + "/v1/messages", json={"model": "m", "max_tokens": 8})
        attempt = cap.tap._begin(request)
        assert attempt is not None
        start = attempt.observer.start
    record = build_record(
        START,
        Outcome.COMPLETED,
        None,
        200,
        False,
        0.5,
        None,
        1.0,
        GapCounter((0.1,), 1.0),
        Facts(),
        False,
        None,
        None,
        0,
    )
    found = read_header_items(ANTHROPIC, [(b"Content-Type", b"content-type", b"application/json")], Facts())
    for value in (start, record, record.usage, call_record("c", 1, 0.0, record), info_from_json({"model": "m"}), found):
        assert _complete(value), type(value).__name__
    assert not _complete(tuple.__new__(type(start), tuple(start)[:-1]))  # the check bites: one field short
