"""The real ``google-genai`` SDK against the simulator's Gemini API, sync and async.

Which HTTP client google-genai uses (read in ``google/genai/_api_client.py``, 3.x):

* sync: an ``httpx2.Client`` subclass (``httpx.Client`` when httpx2 is absent or
  ``GOOGLE_GENAI_HTTP_CLIENT=httpx``) -> seen by llmtap;
* async: an ``aiohttp.ClientSession`` whenever aiohttp is importable, unless ``HttpOptions`` carries
  ``httpx_async_client`` or ``async_client_args={"transport": ...}`` -> seen (llmtap's aiohttp hook);
  otherwise an ``httpx2.AsyncClient`` subclass -> seen.

Three modes therefore: "sync", "async" (an httpx2 transport passed) and "aiohttp" (the SDK's default
async client). google-genai retries nothing unless
``HttpOptions.retry_options`` is set; it has no ``request()`` hook llmtap links retries through, and
it sends no retry-count header, so each of its attempts is its own call with ``resend_count == 0``.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors, types

from llmtap import Outcome, _drive
from llmtap._core.record import FAILED
from llmtap._drive import Action, fresh_model, served_for
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture

SECRET = "AIzaSy-llmtap-test-secret-key-0123456789"
MODES = ["sync", "async", "aiohttp"]
# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")


def _model() -> str:
    """A model name unique to one call: served records of earlier tests can never be mistaken for ours."""
    return fresh_model("gemini-test")


def _options(sim: Simulator, mode: str, scenario: Scenario) -> types.HttpOptions:
    """The client options of ``mode`` (for the tests that make their own client)."""
    options: dict[str, Any] = {"base_url": sim.base_url, "headers": scenario.headers()}
    if mode == "async":
        options["async_client_args"] = {"transport": httpx2.AsyncHTTPTransport()}
    return types.HttpOptions(**options)


def drive(
    sim: Simulator, mode: str, action: Action, scenario: Scenario, model: str, *, transport: str | None = None,
    max_retries: int = 0, timeout: float | None = None, **options: Any,
) -> tuple[list[str], BaseException | None]:  # fmt: skip
    """One SDK call in ``mode`` (sync, async through httpx2, aiohttp); returns the text pieces the app
    received and the exception it saw, if any."""
    if mode == "aiohttp":
        mode, transport = "async", None
    elif mode == "async" and transport is None:
        transport = "httpx2"
    result = _drive.drive("gemini", sim.base_url, action, mode="async" if mode == "async" else "sync", model=model,
                          api_key=SECRET, headers=scenario.headers(), transport=transport, max_retries=max_retries,
                          timeout=timeout, options=options)  # fmt: skip
    return result.pieces, result.error


def _served(sim: Simulator, model: str, count: int) -> list[Served]:
    """This call's served records (a handler of an earlier test may still be logging its own)."""
    return served_for(sim, model, count)


def _check_common(cap: Capture, sim: Simulator, model: str, expected: list[Outcome]) -> list[Served]:
    cap.wait(len(expected), calls=len(expected))
    served = _served(sim, model, len(expected))
    assert [r.outcome for r in cap.records] == expected
    assert len(served) == len(expected)
    # no SDK hook for google-genai: every attempt is its own call
    assert [c.attempts for c in cap.calls] == [1] * len(expected)
    for record, seen in zip(cap.records, served, strict=True):
        assert record.provider == "gcp.gemini"
        assert record.operation == "generate_content"
        assert record.request_model == model
        assert record.request_stream is seen.stream
        assert record.status_code == seen.status
        assert record.resend_count == 0 and seen.retry_count == 0
        assert record.url_path == seen.path
        assert seen.api == "gemini" and seen.auth_present  # the key was sent ...
        assert SECRET not in repr(record)  # ... and never recorded
    spans = sorted(cap.spans, key=lambda s: s.start_time or 0)
    assert [s.attributes["llmtap.outcome"] if s.attributes else None for s in spans] == [o.value for o in expected]
    assert [s.status.status_code.name == "ERROR" for s in spans] == [o in FAILED for o in expected]
    for span in spans:
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value)
        for event in span.events:
            assert SECRET not in str(event.attributes)
    assert cap.sample("llmtap_streams_in_flight") == 0
    return served


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("action", "stop_reason", "finish"), [("stream", "max_tokens", "MAX_TOKENS"), ("create", "refusal", "SAFETY")]
)
def test_tokens_first_token_and_stop_reason(
    sim: Simulator, cap: Capture, mode: str, action: Action, stop_reason: str, finish: str
) -> None:
    model = _model()
    scenario = Scenario(tokens=6, ttft=0.05, gap=0.05, input=300, cache_read=120, reasoning=9, stop_reason=stop_reason)
    got, error = drive(sim, mode, action, scenario, model)
    assert error is None, repr(error)
    assert "".join(got) == scenario.expected_text()
    (served,) = _check_common(cap, sim, model, [Outcome.COMPLETED])
    (record,) = cap.records
    assert record.usage.input_tokens == 300 + 120  # promptTokenCount includes cachedContentTokenCount
    assert record.usage.cache_read_tokens == 120
    assert record.usage.output_tokens == 6 + 9  # candidatesTokenCount + thoughtsTokenCount
    assert record.usage.reasoning_tokens == 9
    assert record.usage.cache_write_tokens is None
    assert (served.input_tokens, served.output_tokens) == (420, 15)
    assert record.stop_reason == finish
    assert record.response_model == model
    assert record.response_id is not None and len(record.response_id) == 23
    assert record.request_id is None  # the Gemini API sends no request-id header
    if action == "stream":
        assert served.first_token_sent_at is not None and record.first_token_at is not None
        # causal, and at the first token, not at the end (the 1 ms accuracy: test_ttft_accuracy.py); the
        # 0.25 s between the first token and the end leave room for a loaded machine's scheduling
        assert served.first_token_sent_at <= record.first_token_at < served.ended_at
        # six text chunks and the finishReason chunk, no [DONE]; an aiohttp read hands out all it has
        # buffered at once, so there the reads can be fewer than the server's writes
        assert record.chunks >= (1 if mode == "aiohttp" else 7)
    else:
        assert record.first_token_at is None and served.first_token_sent_at is None
    assert cap.sample("llmtap_tokens_total") > 0


@pytest.mark.parametrize("mode", MODES)
def test_incomplete_stream_reports_only_what_was_sent(sim: Simulator, cap: Capture, mode: str) -> None:
    """Without the finishReason chunk only the prompt side of the usage was on the wire."""
    model = _model()
    got, error = drive(sim, mode, "stream", Scenario(tokens=4, input=50, cache_read=5, no_stop=True), model)
    assert error is None and "".join(got) == "tok0 tok1 tok2 tok3 "
    _check_common(cap, sim, model, [Outcome.INCOMPLETE])
    (record,) = cap.records
    assert record.usage.input_tokens == 55 and record.usage.cache_read_tokens == 5
    assert record.usage.output_tokens is None  # never invented
    assert record.stop_reason is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("status", "error_type"), [(503, "UNAVAILABLE"), (429, "RESOURCE_EXHAUSTED")])
def test_retry_options_attempts_are_separate_calls(
    sim: Simulator, cap: Capture, mode: str, status: int, error_type: str
) -> None:
    """google-genai retries only with ``retry_options``; its attempts are not linked into one call (the
    simulator's ``fail=9`` fails all three)."""
    model = _model()
    scenario = Scenario(fail=9, fail_status=status, retry_after=0.01)
    _, error = drive(sim, mode, "stream", scenario, model, max_retries=2)
    assert isinstance(error, errors.APIError) and error.code == status
    _check_common(cap, sim, model, [Outcome.REJECTED] * 3)
    assert all(r.error_type == error_type for r in cap.records)
    assert all(r.retry_after == 0.01 for r in cap.records)
    assert cap.sample("llmtap_retries_total") == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_api_versions_and_httpx_backend(sim: Simulator, cap: Capture, mode: str, version: str) -> None:
    """Both URL versions; the httpx (1.x) backend, chosen by passing httpx transports, is seen too."""
    model = _model()
    got, error = drive(sim, mode, "stream", Scenario(tokens=3), model, api_version=version, transport="httpx")
    assert error is None and got == ["tok0 ", "tok1 ", "tok2 ", ""]
    (served,) = _check_common(cap, sim, model, [Outcome.COMPLETED])
    assert served.path == f"/{version}/models/{model}:streamGenerateContent"


def test_async_default_aiohttp_and_httpx2_are_both_seen(sim: Simulator, cap: Capture) -> None:
    """google-genai's async client sends through aiohttp whenever aiohttp is importable and no httpx
    transport / client was passed (llmtap's aiohttp hook), else through httpx2 (the httpx2 hook): both
    are recorded, once each."""
    model = _model()
    scenario = Scenario(tokens=3)

    async def call(own_client: bool) -> str:
        http = httpx2.AsyncClient() if own_client else None
        options = types.HttpOptions(base_url=sim.base_url, headers=scenario.headers(), httpx_async_client=http)
        client = genai.Client(api_key=SECRET, http_options=options)
        assert client._api_client._use_aiohttp() is (not own_client)
        try:
            stream = await client.aio.models.generate_content_stream(model=model, contents="hi")
            parts = [c.text or "" async for c in stream]
            parts.append((await client.aio.models.generate_content(model=model, contents="hi")).text or "")
        finally:
            await client.aio.aclose()
            client.close()
            if http is not None:
                await http.aclose()  # the SDK leaves a client it was given open
        return "".join(parts)

    for own_client in (False, True):
        seen_before = len(cap.records)
        assert asyncio.run(call(own_client)) == "tok0 tok1 tok2 " * 2
        cap.wait(seen_before + 2, calls=seen_before + 2)
        mine = cap.records[seen_before:]
        assert [(r.outcome, r.request_stream) for r in mine] == [(Outcome.COMPLETED, True), (Outcome.COMPLETED, False)]
        assert [r.usage.output_tokens for r in mine] == [3, 3]
    assert len(_served(sim, model, 4)) == 4 and len(cap.records) == 4  # once each, never twice
    assert {r.provider for r in cap.records} == {"gcp.gemini"}
    assert cap.sample("llmtap_streams_in_flight") == 0


@pytest.mark.parametrize("mode", MODES)
def test_error_chunk_ends_the_attempt_when_parsed(sim: Simulator, cap: Capture, mode: str) -> None:
    """google-genai raises on an error chunk without closing the response. The async client's
    response then lives until the garbage collector finds the exception's frames (the positive
    control: without the terminal-event rule the async case fails here); the sync client's
    generators unwind and drop it at once. Either way the attempt ends when the chunk is parsed:
    with the collector off, its record exists as soon as the app has the exception."""
    model = _model()
    client = genai.Client(api_key=SECRET, http_options=_options(sim, mode, Scenario(tokens=5, error_event_at=2)))
    caught: list[BaseException] = []

    async def async_body() -> None:
        try:
            async for _ in await client.aio.models.generate_content_stream(model=model, contents="hi"):
                pass
        except errors.ServerError as exc:
            caught.append(exc)
            assert [r.outcome for r in cap.records] == [Outcome.SERVER_ERROR]
        finally:
            await client.aio.aclose()

    gc.disable()
    try:
        if mode == "sync":
            try:
                for _ in client.models.generate_content_stream(model=model, contents="hi"):
                    pass
            except errors.ServerError as exc:
                caught.append(exc)
                assert [r.outcome for r in cap.records] == [Outcome.SERVER_ERROR]
                assert cap.sample("llmtap_streams_in_flight") == 0
        else:
            asyncio.run(async_body())
        assert len(caught) == 1
    finally:
        gc.enable()
        client.close()
        caught.clear()
        gc.collect()
    _check_common(cap, sim, model, [Outcome.SERVER_ERROR])
    assert cap.records[0].error_type == "UNAVAILABLE"  # the chunk's own status (503 for overloaded_error)
