"""Raw ``aiohttp.ClientSession`` requests against the simulator: every ending, every read style, once.

google-genai's default async client (aiohttp) is driven through every outcome in ``test_sdk_cases.py``;
here the session is the app's own, so each ending can be produced exactly: EOF, an in-band error, a
dropped connection, ``release()`` / ``close()`` / leaving ``async with`` early, cancellation, the
garbage collector, ``raise_for_status``, and aiohttp's own decompression.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import pytest

import llmtap
from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture
from tests.support.layers import every_layer_observes
from tests.support.rawserver import RawServer, Reply, http_response

BODY: dict[str, Any] = {
    "model": "claude-raw-aio",
    "max_tokens": 64,
    "stream": True,
    "messages": [{"role": "user", "content": "hi"}],
}


def _run(
    sim: Simulator,
    scenario: Scenario,
    body_reader: Callable[[aiohttp.ClientResponse], Awaitable[Any]],
    **session_options: Any,
) -> Any:
    """One POST /v1/messages through a fresh session; returns what ``body_reader`` returned (or raised)."""

    async def main() -> Any:
        async with (
            aiohttp.ClientSession(**session_options) as session,
            session.post(sim.base_url + "/v1/messages", json=BODY, headers=scenario.headers()) as response,
        ):
            return await body_reader(response)

    try:
        return asyncio.run(main())
    except Exception as exc:
        return exc


async def _lines(response: aiohttp.ClientResponse) -> bytes:
    return b"".join([line async for line in response.content])


async def _iter_any(response: aiohttp.ClientResponse) -> bytes:
    return b"".join([chunk async for chunk in response.content.iter_any()])


async def _iter_chunked(response: aiohttp.ClientResponse) -> bytes:
    return b"".join([chunk async for chunk in response.content.iter_chunked(7)])


async def _iter_chunks(response: aiohttp.ClientResponse) -> bytes:
    return b"".join([chunk async for chunk, _ in response.content.iter_chunks()])


async def _read(response: aiohttp.ClientResponse) -> bytes:
    return await response.read()


async def _readline_loop(response: aiohttp.ClientResponse) -> bytes:
    parts = []
    while line := await response.content.readline():
        parts.append(line)
    return b"".join(parts)


READERS = [_lines, _iter_any, _iter_chunked, _iter_chunks, _read, _readline_loop]


@pytest.mark.parametrize("reader", READERS, ids=[r.__name__.strip("_") for r in READERS])
def test_completed_whatever_the_read_style(sim: Simulator, cap: Capture, reader: Any) -> None:
    scenario = Scenario(tokens=6, gap=0.002, input=40)
    body = _run(sim, scenario, reader)
    assert isinstance(body, bytes) and b"message_stop" in body  # the app got every byte, unchanged
    cap.wait(1, calls=1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED
    assert (record.provider, record.request_model, record.request_stream) == ("anthropic", "claude-raw-aio", True)
    assert record.request_max_tokens == 64  # from aiohttp's json= argument
    assert (record.usage.input_tokens, record.usage.output_tokens) == (40, 6)
    assert record.first_token_at is not None and record.stop_reason == "end_turn"
    assert record.parse_errors == 0
    # ours by request id: an earlier test's request may finish on the shared simulator meanwhile
    (served,) = [s for s in sim.wait_served(1) if s.request_id == record.request_id]
    assert served.outcome_sent == "completed" and served.status == record.status_code == 200
    assert cap.sample("llmtap_streams_in_flight") == 0
    assert cap.sample("llmtap_streams_total", outcome="completed") == 1


def test_gzip_decoded_by_aiohttp_is_parsed(sim: Simulator, cap: Capture) -> None:
    """aiohttp inflates the body itself: the observer gets the inflated bytes and is not told of gzip."""
    body = _run(sim, Scenario(tokens=4, gzip=True), _iter_any)
    assert isinstance(body, bytes) and b"message_stop" in body
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED and record.usage.output_tokens == 4 and record.parse_errors == 0


def test_gzip_left_compressed_by_aiohttp_is_inflated_by_the_observer(sim: Simulator, cap: Capture) -> None:
    """``auto_decompress=False``: the app reads the gzip bytes themselves, so the observer is told of gzip and
    inflates what it parses (the test above is the positive control: there aiohttp inflates)."""
    body = _run(sim, Scenario(tokens=4, gzip=True), _iter_any, auto_decompress=False)
    assert isinstance(body, bytes) and body[:2] == b"\x1f\x8b"  # the app got gzip
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED and record.usage.output_tokens == 4 and record.parse_errors == 0


@pytest.mark.parametrize(
    ("layout", "encoding", "request_option", "session_option", "decoded"),
    [
        ("before 3.13", b"gzip", None, True, True),
        ("before 3.13", b"GZIP", None, True, True),
        ("before 3.13", b"br", None, True, True),
        ("before 3.13", b"gzip", False, True, False),  # the request's option wins
        ("before 3.13", b"gzip", True, False, True),
        ("before 3.13", b"gzip", None, False, False),
        ("before 3.13", b"zstd", None, True, False),  # not one it decodes
        ("before 3.13", None, None, True, False),
        ("3.13", b"gzip", None, True, True),  # total_compressed_bytes set: decoded
        ("3.13", b"gzip", None, False, False),  # left None: not decoded
    ],
)
def test_whether_aiohttp_decoded_the_body(
    layout: str, encoding: bytes | None, request_option: bool | None, session_option: bool, decoded: bool
) -> None:
    """Which aiohttp hands the app a decompressed body, on both layouts (real aiohttp of each: ``make compat``
    runs this file on 3.12, the floor; ``make test`` on the current one)."""
    from types import SimpleNamespace

    from llmtap._hooks.aiohttp_session import _decoded

    content = SimpleNamespace()
    if layout == "3.13":
        content.total_compressed_bytes = 0 if decoded else None
    raw = [(b"Content-Type", b"text/event-stream")] + ([(b"Content-Encoding", encoding)] if encoding else [])
    session = SimpleNamespace(_auto_decompress=session_option)
    kwargs = {} if request_option is None else {"auto_decompress": request_option}
    assert _decoded(SimpleNamespace(content=content), session, kwargs, raw) is decoded


async def _first_line_then(response: aiohttp.ClientResponse, ending: str) -> None:
    await response.content.readline()
    if ending == "release":
        response.release()
    elif ending == "close":
        response.close()
    # "exit": leaving ``async with`` releases it


@pytest.mark.parametrize("ending", ["release", "close", "exit"])
def test_app_closes_early(sim: Simulator, cap: Capture, ending: str) -> None:
    _run(sim, Scenario(tokens=200, gap=0.005), lambda r: _first_line_then(r, ending))
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.CLIENT_CLOSED and record.error_type is None
    assert cap.sample("llmtap_streams_in_flight") == 0


@pytest.mark.parametrize(
    ("scenario", "outcome", "error"),
    [
        (Scenario(tokens=6, error_event_at=2), Outcome.SERVER_ERROR, "overloaded_error"),
        (Scenario(tokens=6, drop_at=2), Outcome.CONNECTION_ERROR, "ClientPayloadError"),
        (Scenario(tokens=6, no_stop=True), Outcome.INCOMPLETE, "incomplete_stream"),
        (Scenario(fail=1, fail_status=429, retry_after=2), Outcome.REJECTED, "rate_limit_error"),
    ],
    ids=["error_event", "dropped", "incomplete", "429"],
)
def test_service_side_endings(sim: Simulator, cap: Capture, scenario: Scenario, outcome: Outcome, error: str) -> None:
    result = _run(sim, scenario, _iter_any)
    if outcome is Outcome.CONNECTION_ERROR:
        assert isinstance(result, aiohttp.ClientPayloadError)  # the app's exception, untouched
    cap.wait(1)
    (record,) = cap.records
    assert (record.outcome, record.error_type) == (outcome, error)
    if scenario.fail:
        assert record.status_code == 429 and record.retry_after == 2
    assert cap.sample("llmtap_streams_in_flight") == 0


def test_raise_for_status_records_the_status(sim: Simulator, cap: Capture) -> None:
    """``raise_for_status=True`` raises inside ``_request``, after the headers: a 429, not a connection error."""

    async def main() -> BaseException | None:
        async with aiohttp.ClientSession(raise_for_status=True) as session:
            try:
                scenario = Scenario(fail=1, fail_status=429)
                await session.post(sim.base_url + "/v1/messages", json=BODY, headers=scenario.headers())
            except aiohttp.ClientResponseError as exc:
                return exc
        return None

    error = asyncio.run(main())
    assert isinstance(error, aiohttp.ClientResponseError) and error.status == 429
    cap.wait(1)
    (record,) = cap.records
    assert (record.outcome, record.status_code, record.error_type) == (Outcome.REJECTED, 429, "429")


def test_cancelled_while_reading(sim: Simulator, cap: Capture) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            first = asyncio.Event()

            async def read() -> None:
                async with session.post(
                    sim.base_url + "/v1/messages", json=BODY, headers=Scenario(tokens=200, gap=0.01).headers()
                ) as response:
                    async for _ in response.content:
                        first.set()

            task = asyncio.create_task(read())
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.CANCELLED
    assert cap.sample("llmtap_streams_in_flight") == 0


def test_dropped_unclosed_is_abandoned(sim: Simulator, cap: Capture) -> None:
    """aiohttp keeps an unreleased response alive while its connection still feeds it (the reader
    holds the response's end-of-body callback); once the body has arrived, dropping it unread is
    found by the garbage collector: abandoned."""

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            url, headers = sim.base_url + "/v1/messages", Scenario(tokens=5).headers()
            response = await session.post(url, json=BODY, headers=headers)
            await response.content.readline()
            await asyncio.to_thread(sim.wait_served, 1)
            await response.content.wait_eof()  # the real reader's, through the proxy
            gc.collect()
            assert cap.records == []  # the control: still referenced, not ended
            del response
            gc.collect()
            assert [r.outcome for r in cap.records] == [Outcome.ABANDONED]

    asyncio.run(main())
    assert cap.sample("llmtap_streams_in_flight") == 0


def test_non_llm_request_passes_untouched(sim: Simulator, cap: Capture) -> None:
    """A path that is no LLM API's is not observed; its control, on the same session, is."""

    async def main() -> tuple[int, int]:
        async with aiohttp.ClientSession(base_url=sim.base_url) as session:
            async with session.get("/healthz") as health:
                await health.read()
            async with session.post("/v1/messages", json=BODY, headers=Scenario(tokens=2).headers()) as response:
                await response.read()  # through the session's base_url: observed
            return health.status, response.status

    assert asyncio.run(main()) == (200, 200)
    cap.wait(1)
    assert [r.url_path for r in cap.records] == ["/v1/messages"]
    # both reached the server (an earlier test's request may finish on the shared simulator meanwhile:
    # ours are told apart by path and request id, not by count)
    served = sim.wait_served(2)
    assert [s.path for s in served].count("/healthz") == 1
    assert cap.records[0].request_id in {s.request_id for s in served if s.path == "/v1/messages"}


def test_a_hook_that_cannot_load_leaves_the_request_alone(
    sim: Simulator, cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aiohttp_session.py`` is imported by the first request; if that fails, the request goes out
    unobserved and the failure is counted; the control, once it loads, is observed."""
    from llmtap._hooks import patches
    from llmtap._log import internal_errors

    monkeypatch.setattr(patches, "_aiohttp_wrapper", None)  # as before any request loaded it
    monkeypatch.setitem(sys.modules, "llmtap._hooks.aiohttp_session", None)  # its import raises ImportError
    before = internal_errors()["other"]
    completed = _run(sim, Scenario(tokens=2), _read)
    assert not isinstance(completed, Exception) and b"message_stop" in completed
    assert internal_errors()["other"] == before + 1
    assert cap.records == []
    monkeypatch.undo()
    _run(sim, Scenario(tokens=2), _read)
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]


def _anthropic_over_aiohttp(sim: Simulator) -> None:
    async def main() -> None:
        client = anthropic.AsyncAnthropic(
            base_url=sim.base_url, api_key="k", max_retries=0, http_client=anthropic.DefaultAioHttpClient()
        )
        async with client:
            message = await client.messages.create(
                model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            assert message.content

    asyncio.run(main())


def test_httpx_over_aiohttp_counted_once(sim: Simulator, cap: Capture) -> None:
    """The httpx hook observes the SDK's httpx2 client; the aiohttp session below it passes through."""
    _anthropic_over_aiohttp(sim)
    cap.wait(1, calls=1)
    assert [(r.outcome, r.call_id is not None) for r in cap.records] == [(Outcome.COMPLETED, True)]


def test_httpx_over_aiohttp_without_the_guard_counts_twice(
    sim: Simulator, cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control of the test above: the aiohttp hook does see the same attempt below the httpx one,
    so without the shells' flag it would be counted twice."""
    every_layer_observes(monkeypatch)
    _anthropic_over_aiohttp(sim)
    cap.wait(2)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED] * 2
    assert len(sim.wait_served(1)) == 1


def test_uninstrument_restores_request(sim: Simulator) -> None:
    original = aiohttp.ClientSession.__dict__["_request"]
    with capture(llmtap.Settings(base_urls=(sim.base_url,))):
        assert aiohttp.ClientSession.__dict__["_request"] is not original
        assert aiohttp.ClientSession.__dict__["_request"].__wrapped__ is original
    assert aiohttp.ClientSession.__dict__["_request"] is original


def test_patched_only_when_imported() -> None:
    """llmtap does not import aiohttp; the post-import hook patches it when the app does."""
    code = """
import sys, llmtap
llmtap.instrument(llmtap.Settings(prometheus=False, traces=False))
assert "aiohttp" not in sys.modules
import aiohttp
wrapped = aiohttp.ClientSession.__dict__["_request"]
assert hasattr(wrapped, "__wrapped__"), wrapped
llmtap.uninstrument()
assert not hasattr(aiohttp.ClientSession.__dict__["_request"], "__wrapped__")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_request_body_from_data_bytes(sim: Simulator, cap: Capture) -> None:
    """``data=`` bytes (how google-genai sends) give the request model too."""

    async def main() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                sim.base_url + "/v1/messages",
                data=json.dumps(BODY | {"model": "claude-bytes"}).encode(),
                headers={"content-type": "application/json", **Scenario(tokens=2).headers()},
            ) as response,
        ):
            await response.read()

    asyncio.run(main())
    cap.wait(1)
    assert [(r.request_model, r.outcome) for r in cap.records] == [("claude-bytes", Outcome.COMPLETED)]


def test_app_retries_a_429(sim: Simulator, cap: Capture) -> None:
    """An app's own retry loop over a raw session: each attempt is its own call; the retry count the
    request carries (``x-stainless-retry-count``, as the SDKs send it) is read from aiohttp's headers."""

    async def main() -> list[int]:
        statuses = []
        async with aiohttp.ClientSession() as session:
            for retry in range(2):
                headers = {
                    **Scenario(tokens=3, fail=1, fail_status=429).headers(),
                    "X-Stainless-Retry-Count": str(retry),
                }
                async with session.post(sim.base_url + "/v1/messages", json=BODY, headers=headers) as response:
                    await response.read()
                    statuses.append(response.status)
        return statuses

    assert asyncio.run(main()) == [429, 200]
    cap.wait(2, calls=2)
    assert [(r.outcome, r.status_code, r.resend_count, r.retry_reason) for r in cap.records] == [
        (Outcome.REJECTED, 429, 0, None),
        (Outcome.COMPLETED, 200, 1, "unknown"),
    ]
    assert [c.attempts for c in cap.calls] == [1, 1]


def test_the_proxy_hands_everything_else_to_the_real_reader(sim: Simulator, cap: Capture) -> None:
    """What the proxy does not observe is the real reader's: attributes and methods work as before."""

    async def main() -> tuple[int, bool, object, bool]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(sim.base_url + "/v1/messages", json=BODY, headers=Scenario(tokens=2).headers()) as response,
        ):
            assert type(response.content).__name__ == "ObservedContent"  # the control: it is the proxy
            await response.content.read()
            return response.content.total_bytes, response.content.at_eof(), response.content.exception(), response.ok

    total, at_eof, exception, ok = asyncio.run(main())
    assert total > 0 and at_eof and exception is None and ok
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]


def _sse(event: str, **data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


def test_the_attempt_ends_at_the_terminal_event() -> None:
    """The attempt ends with the read that completes ``message_stop``, although the body goes on (a
    comment 0.3 s later) and the response is not released yet; the control: not a read earlier."""
    events = [
        _sse("message_start", message={"id": "msg_1", "model": "m", "usage": {"input_tokens": 3}}),
        _sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "hi"}),
        _sse("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}),
        _sse("message_stop"),
    ]
    head = http_response(200, [(b"content-type", b"text/event-stream"), (b"connection", b"close")], b"")
    with RawServer(Reply([head + b"".join(events), b": trailing comment\n\n"], pause=0.3)) as raw:

        async def main() -> list[list[Outcome]]:
            seen: list[list[Outcome]] = []
            async with (
                aiohttp.ClientSession() as session,
                session.post(raw.base_url + "/v1/messages", json=BODY) as response,
            ):
                while line := await response.content.readline():
                    seen.append([r.outcome for r in cap.records])
                    if line == b"\n" and len(seen) == 4 * 3:  # the blank line that ends message_stop
                        assert not response.content.at_eof()  # the body goes on
                        break
            return seen

        with capture(llmtap.Settings(base_urls=(raw.base_url,))) as cap:
            seen = asyncio.run(main())
    assert seen[:-1] == [[]] * (len(seen) - 1) and seen[-1] == [Outcome.COMPLETED]
    (record,) = cap.records
    assert (record.usage.input_tokens, record.usage.output_tokens, record.stop_reason) == (3, 1, "end_turn")
