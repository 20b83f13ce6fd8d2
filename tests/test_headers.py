"""The one walk over response headers, and the rate limits it keeps raw and converts when read."""

from __future__ import annotations

import time

import pytest

from llmtap._core.headers import _RESET_AT, rate_limits, read_header_items, read_headers
from llmtap._providers._base import SERVER_TIMES, Facts, Header
from llmtap._providers._catalog import ENTRIES, parser
from llmtap._providers.anthropic import PROVIDER as ANTHROPIC
from llmtap._providers.bedrock import PROVIDER as BEDROCK
from llmtap._providers.openai_chat import PROVIDER as OPENAI
from tests.support.records import kept_rate_limits


def test_what_the_path_needs() -> None:
    facts = Facts()
    found = read_headers(
        ANTHROPIC,
        [
            (b"Content-Type", b"Text/Event-Stream"),
            (b"Content-Encoding", b"gzip"),
            (b"content-encoding", b"br"),
            (b"Request-Id", b"req_1"),
            (b"retry-after", b"3"),
            (b"retry-after-ms", b"1500"),
            (b"x-unrelated", b"1"),
        ],
        facts,
    )
    assert found.content_type == b"text/event-stream" and found.encoding == b"gzip,br"
    assert found.retry_after == 1.5 and found.errors == 0 and found.rate_limits is None
    assert facts.request_id == "req_1"


def test_provider_kinds_go_into_the_facts() -> None:
    facts = Facts()
    read_headers(OPENAI, [(b"openai-processing-ms", b"250"), (b"x-envoy-upstream-service-time", b"300")], facts)
    assert facts.server_time == 0.25  # the provider's processing time; Envoy's is a server time, not that
    assert facts.server_times == {"openai-processing-ms": 0.25, "x-envoy-upstream-service-time": 0.3}
    facts = Facts()
    found = read_headers(ANTHROPIC, [(b"x-envoy-upstream-service-time", b"-5")], facts)
    assert found.errors == 1 and facts.server_times is None  # a negative time is garbage
    found = read_headers(ANTHROPIC, [(b"X-Envoy-Upstream-Service-Time", b"12")], facts)
    assert found.errors == 0 and facts.server_times == {"x-envoy-upstream-service-time": 0.012}
    assert facts.server_time is None
    facts = Facts()
    read_headers(BEDROCK, [(b"x-amzn-errortype", b"ThrottlingException:http://x")], facts)
    assert facts.error_type == "ThrottlingException"


def test_every_server_time_header_is_a_source() -> None:
    """A server-time header a provider declares is read under its own name as the ``source`` label: one missing
    from ``SERVER_TIMES`` would be dropped by the walk (the control: the table's header sources are declared)."""
    declared = {
        name.decode()
        for entry in ENTRIES
        for name, (kind, _) in parser(entry).headers.items()
        if kind in (Header.SERVER_TIME_MS, Header.UPSTREAM_TIME_MS)
    }
    assert declared <= set(SERVER_TIMES)
    assert {"openai-processing-ms", "x-envoy-upstream-service-time", "x-amzn-bedrock-invocation-latency"} <= declared


def test_rate_limits_are_kept_raw_and_converted_when_read() -> None:
    reset = b"2026-01-01T00:00:10Z"
    headers = [
        (b"anthropic-ratelimit-requests-limit", b"4000"),
        (b"anthropic-ratelimit-requests-remaining", b"3999.5"),
        (b"anthropic-ratelimit-requests-reset", reset),
        (b"anthropic-ratelimit-tokens-limit", b"nan"),
    ]
    found = read_headers(ANTHROPIC, headers, Facts())
    assert found.errors == 1  # the garbage value is counted on the path, as before
    assert kept_rate_limits(found.rate_limits) == [
        ("requests", 0, b"4000"),
        ("requests", 1, b"3999.5"),
        ("requests", _RESET_AT, reset),
        ("tokens", 0, None),
    ]
    at = time.mktime((2026, 1, 1, 0, 0, 0, 0, 0, 0)) - time.timezone
    assert found.rate_limits is not None
    assert rate_limits(found.rate_limits, at) == (("requests", [4000.0, 3999.5, 10.0]), ("tokens", [None, None, None]))
    assert rate_limits(found.rate_limits, at + 60)[0][1][2] == 0.0  # a reset in the past is now


def test_a_response_s_rate_limits_are_three_objects_whatever_their_number() -> None:
    """Ended records wait for a reader (up to 256): the walk keeps one ``specs`` tuple per provider, shared by
    every response, and one bytes object each for the slots and the values, not a tuple per header."""
    resources = ("requests", "tokens", "input-tokens", "output-tokens")
    headers = [
        (f"anthropic-ratelimit-{resource}-{kind}".encode(), value)
        for resource in resources
        for kind, value in (("limit", b"4000"), ("remaining", b"3999"), ("reset", b"2026-01-01T00:00:10Z"))
    ]
    first = read_headers(ANTHROPIC, headers, Facts()).rate_limits
    again = read_headers(ANTHROPIC, list(reversed(headers)), Facts()).rate_limits
    assert first is not None and again is not None
    assert first.specs is again.specs and len(first.slots) == 12 and type(first.values) is bytes
    assert kept_rate_limits(again) == list(reversed(kept_rate_limits(first)))
    assert rate_limits(first, 0.0) == rate_limits(again, 0.0)[::-1]
    assert len(rate_limits(first, 0.0)) == 4 and all(None not in values for _, values in rate_limits(first, 0.0))


def test_openai_durations() -> None:
    found = read_headers(
        OPENAI,
        [(b"x-ratelimit-limit-requests", b"500"), (b"x-ratelimit-reset-requests", b"6m0s")],
        Facts(),
    )
    assert found.rate_limits is not None
    assert rate_limits(found.rate_limits, 0.0) == (("requests", [500.0, None, 360.0]),)


@pytest.mark.parametrize("value", [b"inf", b"1e999", b"x", b"9" * 400, b"\xff", b"5\n", b"\n5"])
def test_garbage_numbers_are_parse_errors(value: bytes) -> None:
    found = read_headers(ANTHROPIC, [(b"anthropic-ratelimit-requests-limit", value)], Facts())
    assert found.errors == 1 and kept_rate_limits(found.rate_limits) == [("requests", 0, None)]


@pytest.mark.parametrize("value", [b"not a date", b"\xff", b"2026-01-01T00:00:10Z\n"])
def test_garbage_resets_are_parse_errors(value: bytes) -> None:
    found = read_headers(ANTHROPIC, [(b"anthropic-ratelimit-tokens-reset", value)], Facts())
    assert found.errors == 1 and kept_rate_limits(found.rate_limits) == [("tokens", _RESET_AT, None)]


@pytest.mark.parametrize("module_name", ["httpx", "httpx2"])
def test_httpx_header_items_are_read_as_kept(module_name: str) -> None:
    """The shells read httpx's own ``(raw, lower-case, value)`` items (no copy): the same findings as the raw pairs."""
    module = pytest.importorskip(module_name)
    raw = [(b"Content-Type", b"application/json"), (b"Request-Id", b"req_7"), (b"Retry-After", b"2")]
    headers = module.Headers(raw)
    items = headers._list
    assert type(items) is list and [(name, value) for name, _, value in items] == headers.raw == raw
    via_items, via_pairs = Facts(), Facts()
    found = read_header_items(ANTHROPIC, items, via_items)
    assert found == read_headers(ANTHROPIC, raw, via_pairs)
    assert found.content_type == b"application/json" and found.retry_after == 2.0
    assert via_items.request_id == via_pairs.request_id == "req_7"
