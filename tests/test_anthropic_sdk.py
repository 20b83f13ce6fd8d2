"""The real ``anthropic`` SDK, sync and async, against the simulator: what is particular to it (usage,
TTFT, retries linked into one call, the SDK's own spans, telemetry faults). Every outcome class, for
every SDK, is in ``test_sdk_cases.py``; both drive the SDK through ``llmtap._drive``.

What the server did (``sim.served``) is the ground truth the records, metrics and spans are compared with.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import anthropic
import pytest

from llmtap import Outcome, _drive
from llmtap._drive import Action, Mode, Result
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture
from tests.support.sdklines import ANTHROPIC_HAS_TRACING, ANTHROPIC_ON_HTTPX, TIMEOUTS

MODES = ["sync", "async"]


def drive(sim: Simulator, mode: Mode, action: Action, scenario: Scenario, **config: Any) -> Result:
    """One call of the ``anthropic`` SDK (``claude-test``, 2 retries unless ``config`` says otherwise)."""
    config.setdefault("max_retries", 2)
    return _drive.drive("anthropic", sim.base_url, action, mode=mode, model="claude-test",
                        headers=scenario.headers(), **config)  # fmt: skip


def outcomes(cap: Capture) -> list[Outcome]:
    return [r.outcome for r in cap.records]


@pytest.mark.parametrize("mode", MODES)
def test_completed_stream_matches_server(sim: Simulator, cap: Capture, mode: Mode) -> None:
    scenario = Scenario(
        tokens=8, ttft=0.05, gap=0.01, input=120, cache_read=40, cache_write=7, stop_reason="max_tokens"
    )
    run = drive(sim, mode, "stream", scenario)
    assert run.error is None
    cap.wait(1, calls=1)
    (record,) = cap.records
    (served,) = [s for s in sim.wait_served(1) if s.request_id == record.request_id]
    assert record.outcome is Outcome.COMPLETED
    assert record.streamed
    # tokens exact, input normalised to include the cache
    assert record.usage.input_tokens == 120 + 40 + 7
    assert record.usage.cache_read_tokens == 40
    assert record.usage.cache_write_tokens == 7
    assert record.usage.output_tokens == 8
    assert record.stop_reason == "max_tokens"
    assert record.request_id == served.request_id
    assert record.response_model == "claude-test"
    assert record.response_id is not None and record.response_id.startswith("msg_")
    # TTFT: the first content token as the client saw it, vs the server's write of it
    assert served.first_token_sent_at is not None and record.first_token_at is not None
    # causal, and at the first token, not at the end (the 1 ms accuracy: test_ttft_accuracy.py)
    assert served.first_token_sent_at <= record.first_token_at < served.ended_at
    assert record.first_chunk_at is not None and record.first_chunk_at < record.first_token_at
    assert record.time_to_first_token is not None and record.time_to_first_token >= 0.05
    # chunk gaps measured
    assert record.chunks >= 8 and 0.005 < record.max_gap <= record.ended_at - record.first_chunk_at
    # rate limits from the headers
    resources = {rl.resource: rl for rl in record.rate_limits}
    assert set(resources) == {"requests", "tokens", "input_tokens", "output_tokens"}
    assert resources["requests"].limit is not None and resources["requests"].remaining is not None
    assert cap.sample("llmtap_ratelimit_limit", resource="requests") == resources["requests"].limit
    assert cap.sample("llmtap_ratelimit_remaining", resource="requests") == resources["requests"].remaining
    assert cap.sample("llmtap_tokens_total", gen_ai_token_type="input") == 167
    assert cap.sample("llmtap_tokens_total", gen_ai_token_type="cache_read") == 40
    assert cap.sample("llmtap_stop_reasons_total", reason="max_tokens") == 1
    assert cap.sample("llmtap_time_to_first_token_seconds_count") == 1
    assert cap.sample("gen_ai_client_operation_time_per_output_chunk_seconds_count") == record.chunks - 1
    (span,) = cap.spans
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.input_tokens"] == 167
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 40
    assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == 7
    assert span.attributes["gen_ai.response.finish_reasons"] == ("max_tokens",)
    assert span.attributes["llmtap.request_id"] == served.request_id
    # the span ends when the stream ends, not at the headers
    assert span.end_time is not None and span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 >= 0.05 + 7 * 0.01


@pytest.mark.parametrize("mode", MODES)
def test_retries_are_linked(sim: Simulator, cap: Capture, mode: Mode) -> None:
    run = drive(sim, mode, "stream", Scenario(tokens=2, fail=2, fail_status=429, retry_after=0.05))
    assert run.error is None
    cap.wait(3, calls=1)
    first = cap.records[0]
    assert [r.resend_count for r in cap.records] == [0, 1, 2]
    assert first.retry_after == pytest.approx(0.05) and first.status_code == 429
    assert len({r.call_id for r in cap.records}) == 1 and first.call_id
    assert cap.sample("llmtap_retries_total", reason="429") == 2
    assert cap.sample("llmtap_retry_after_seconds_count") == 2
    (call,) = cap.calls
    assert call.attempts == 3
    assert call.duration >= 0.1  # two server-advised waits are inside the call
    assert call.time_to_first_token is not None and call.time_to_first_token >= 0.1
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="completed") == 1
    spans = sorted(cap.spans, key=lambda s: s.start_time or 0)
    assert [s.attributes["http.request.resend_count"] if s.attributes else None for s in spans[1:]] == [1, 2]
    # each retry links to the attempt before it
    assert spans[1].links[0].context.span_id == spans[0].context.span_id
    assert spans[2].links[0].context.span_id == spans[1].context.span_id


@pytest.mark.parametrize("mode", MODES)
def test_timeout(sim: Simulator, cap: Capture, mode: Mode) -> None:
    run = drive(sim, mode, "stream", Scenario(tokens=4, stall_at=1, stall=1.0), timeout=0.3, max_retries=0)
    # mid-stream, the SDK lets the transport's exception through unwrapped
    assert isinstance(run.error, TIMEOUTS), repr(run.error)
    cap.wait(1, calls=1)
    (record,) = cap.records
    assert record.outcome is Outcome.TIMEOUT
    assert record.error_type == "ReadTimeout"
    assert cap.sample("llmtap_streams_total", outcome="timeout") == 1


@pytest.mark.parametrize("mode", MODES)
def test_stalls_counted(sim: Simulator, cap: Capture, mode: Mode) -> None:
    run = drive(sim, mode, "stream", Scenario(tokens=4, stall_at=2, stall=0.3))
    assert run.error is None
    cap.wait(1)
    assert cap.records[0].stalls == 1
    assert cap.sample("llmtap_stream_stalls_total") == 1


@pytest.mark.skipif(not ANTHROPIC_HAS_TRACING, reason="this anthropic SDK has no tracing of its own")
@pytest.mark.parametrize("tracing", ["sdk_spans_on", "sdk_spans_off"])
def test_composes_with_the_sdk_call_span(sim: Simulator, cap: Capture, tracing: str) -> None:
    option: dict[str, Any] = (
        {"tracer_provider": cap.tracer_provider} if tracing == "sdk_spans_on" else {"traces": {"enabled": False}}
    )
    run = drive(sim, "sync", "stream", Scenario(tokens=2, fail=1, retry_after=0.01), options={"open_telemetry": option})
    assert run.error is None
    cap.wait(2, calls=1)
    spans = cap.spans
    ours = [s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == "llmtap"]
    theirs = [s for s in spans if s not in ours]
    assert len(ours) == 2
    if tracing == "sdk_spans_on":
        (call_span,) = theirs  # one SDK span per call, retries inside: not duplicated by us
        for span in ours:
            assert span.parent is not None and span.parent.span_id == call_span.context.span_id
    else:
        assert theirs == []
        assert all(s.parent is None for s in ours)


def test_no_secrets_in_spans(sim: Simulator, cap: Capture) -> None:
    drive(sim, "sync", "stream", Scenario(tokens=2))
    cap.wait(1)
    (span,) = cap.spans
    text = repr(dict(span.attributes or {}))
    assert "sk-test-secret" not in text
    assert "hi" not in [str(v) for v in (span.attributes or {}).values()]  # no prompt content
    assert not any("key" in k or "auth" in k for k in (span.attributes or {}))


def test_unrelated_traffic_untouched(sim: Simulator, cap: Capture) -> None:
    import httpx2

    with httpx2.Client() as client:
        response = client.get(sim.base_url + "/healthz")
    assert response.status_code == 200  # the simulator's health check: it was served
    assert cap.records == []
    drive(sim, "sync", "stream", Scenario(tokens=2))  # positive control: the same capture records LLM traffic
    cap.wait(1)
    assert [r.url_path for r in cap.records] == ["/v1/messages"]


def _raise(*_: object) -> None:
    raise RuntimeError("sink exploded")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["start", "end", "call_end", "parser"])
def test_telemetry_faults_never_break_requests(
    sim: Simulator, cap: Capture, mode: Mode, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "parser":
        from llmtap._providers import anthropic as provider

        monkeypatch.setattr(provider.AnthropicMessages, "on_event", _raise)
    else:
        for sink in (*cap.tap.sinks, cap.tap.spans):  # the span exporter too, in its own role
            if sink is not None and sink.name != "recording":
                monkeypatch.setattr(sink, where, _raise)
    run = drive(sim, mode, "helper", Scenario(tokens=5))
    assert run.error is None
    assert run.text == "tok0 tok1 tok2 tok3 tok4 "
    cap.wait(1)
    assert len(cap.records) == 1
    if where == "parser":
        assert cap.records[0].parse_errors > 0


@pytest.mark.parametrize("mode", MODES)
def test_a_529_retried_to_success_is_a_rejection_not_an_interruption(sim: Simulator, cap: Capture, mode: Mode) -> None:
    """Issue 14: one 529 the SDK retried to success is ``rejected`` 1 and ``completed`` 1, no ``server_error``;
    the status and error type stay on the attempt, and the call completed."""
    run = drive(sim, mode, "stream", Scenario(tokens=3, fail=1, fail_status=529, retry_after=0.01))
    assert run.error is None and run.events > 0
    cap.wait(2, calls=1)
    assert outcomes(cap) == [Outcome.REJECTED, Outcome.COMPLETED]
    rejected = cap.records[0]
    # the SDK closes a response it retries unread, so the status is the error type
    assert (rejected.status_code, rejected.error_type) == (529, "529")
    assert cap.sample("llmtap_streams_total", outcome="rejected") == 1
    assert cap.sample("llmtap_streams_total", outcome="completed") == 1
    assert cap.sample("llmtap_streams_total", outcome="server_error") == 0  # pre-created, so 0 and not absent
    assert cap.sample("llmtap_attempts_total", status_code="529", error_type="529") == 1
    assert cap.sample("llmtap_retries_total", reason="529") == 1
    assert cap.calls[0].outcome is Outcome.COMPLETED
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="completed") == 1
    spans = sorted(cap.spans, key=lambda s: s.start_time or 0)
    assert [s.status.status_code.name for s in spans] == ["ERROR", "UNSET"]
    assert spans[0].attributes is not None and spans[0].attributes["error.type"] == "529"
    assert spans[0].attributes["llmtap.outcome"] == "rejected"


def _in_the_back_off(frames: list[FrameType]) -> bool:
    return any(frame.f_code.co_name == "_sleep_for_retry" for frame in frames)


def _awaiting(coro: Any) -> list[FrameType]:
    """The frames of a suspended coroutine and of what it awaits, in turn (``Task.get_stack()`` has only the
    outermost one)."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def _stack(frame: FrameType | None) -> list[FrameType]:
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


@pytest.mark.parametrize("mode", MODES)
def test_a_call_the_app_cancels_in_the_sdks_back_off_is_cancelled_then(
    sim: Simulator, cap: Capture, mode: Mode
) -> None:
    """The server answers 429 with ``retry-after: 30``; the app gives up while the SDK waits to retry (its task
    cancelled; sync: Ctrl-C, a real SIGINT): the attempt stays ``rejected``, and the call is ``cancelled``, timed
    to that moment (the back-off it waited through included), not the ``rejected`` of its last attempt."""
    options: dict[str, Any] = {"base_url": sim.base_url, "api_key": "k", "max_retries": 2}
    if ANTHROPIC_HAS_TRACING:
        options["open_telemetry"] = False
    options["default_headers"] = Scenario(tokens=3, fail=1, fail_status=429, retry_after=30).headers()
    request: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if mode == "async":

        async def cancel_in_the_back_off() -> None:
            client = anthropic.AsyncAnthropic(**options)
            task = asyncio.ensure_future(client.messages.create(**request))
            # polled: nothing signals that the SDK reached its sleep
            while not _in_the_back_off(_awaiting(task.get_coro())):  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.close()

        asyncio.run(cancel_in_the_back_off())
    else:
        client = anthropic.Anthropic(**options)
        main = threading.get_ident()

        def interrupt() -> None:  # Ctrl-C once the main thread sleeps before its retry
            while not _in_the_back_off(_stack(sys._current_frames().get(main))):
                time.sleep(0.005)
            signal.pthread_kill(main, signal.SIGINT)  # to the main thread: its sleep is interrupted

        # Python's own SIGINT handler (an earlier test, or the runner, may have set another)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            threading.Thread(target=interrupt, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                client.messages.create(**request)
        finally:
            signal.signal(signal.SIGINT, previous)
        client.close()
    cap.wait(1, calls=1)
    (rejected,) = cap.records
    (call,) = cap.calls
    assert (rejected.outcome, rejected.status_code) == (Outcome.REJECTED, 429)
    assert (call.outcome, call.attempts) == (Outcome.CANCELLED, 1)
    assert call.started_at == rejected.started_at and call.ended_at > rejected.ended_at  # the back-off is in
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="cancelled") == 1
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="rejected") == 0  # positive: 1 without the fix
    assert len(sim.wait_served(1)) == 1  # no retry was sent


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "error", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
    ],
)
def test_a_bad_request_stream_is_rejected(
    sim: Simulator, cap: Capture, mode: Mode, status: int, error: type[BaseException], error_type: str
) -> None:
    """The app's own bad request or key: not retried, ``rejected`` (not a service-side abort), the call too."""
    run = drive(sim, mode, "stream", Scenario(tokens=3, fail=1, fail_status=status))
    assert isinstance(run.error, error), repr(run.error)
    cap.wait(1, calls=1)
    assert outcomes(cap) == [Outcome.REJECTED]
    assert (cap.records[0].status_code, cap.records[0].error_type) == (status, error_type)
    assert cap.sample("llmtap_streams_total", outcome="rejected") == 1
    assert cap.sample("llmtap_streams_total", outcome="completed") == 0
    assert cap.sample("llmtap_streams_total", outcome="server_error") == 0
    assert cap.calls[0].outcome is Outcome.REJECTED
    assert cap.sample("llmtap_call_duration_seconds_count", outcome="rejected") == 1


def test_leaving_a_loop_over_a_stream_is_client_closed_and_dropping_a_held_one_is_abandoned(
    sim: Simulator, cap: Capture
) -> None:
    """``for event in client.messages.create(stream=True): break``: the loop drops the only reference to
    the stream, its generators unwind and httpx2 closes the response at once: ``client_closed``. The same
    stream held, read to the same point and then dropped (``del``) is ``abandoned`` (the control). The legacy
    line's httpx leaves the response open at the ``break``: only the garbage collector ends it, ``abandoned``."""
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    kwargs: dict[str, Any] = {"model": "claude-test", "max_tokens": 64, "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    for event in client.messages.create(**kwargs):
        if event.type == "content_block_delta":
            break
    if ANTHROPIC_ON_HTTPX:
        gc.collect()
    cap.wait(1)
    stream = client.messages.create(**kwargs)
    for event in stream:
        if event.type == "content_block_delta":
            break
    del stream
    if ANTHROPIC_ON_HTTPX:  # over httpx a response and its stream refer to each other
        gc.collect()
    cap.wait(2)
    left = Outcome.ABANDONED if ANTHROPIC_ON_HTTPX else Outcome.CLIENT_CLOSED
    assert outcomes(cap) == [left, Outcome.ABANDONED]
    client.close()


@pytest.mark.parametrize(("stop_at", "expected"), [
    ("message_delta", Outcome.COMPLETED),  # the stop reason and usage came: the whole answer (LiteLLM's way)
    ("content_block_delta", Outcome.CLIENT_CLOSED),  # control: closed mid-answer
])  # fmt: skip
def test_a_stream_closed_after_its_stop_reason_is_completed(
    sim: Simulator, cap: Capture, stop_at: str, expected: Outcome
) -> None:
    """LiteLLM reads an Anthropic stream until the stop reason (``message_delta``) and closes the response
    before ``message_stop``: the answer is whole, so the attempt is ``completed`` with its stop reason and
    usage, not ``client_closed`` (which an SRE's client-abort alert counts)."""
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    stream = client.messages.create(
        model="claude-test", max_tokens=16, stream=True, messages=[{"role": "user", "content": "hi"}],
        extra_headers=Scenario(tokens=4, stop_reason="end_turn").headers(),
    )  # fmt: skip
    for event in stream:
        if event.type == stop_at:
            break
    stream.close()
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is expected
    if expected is Outcome.COMPLETED:
        assert record.stop_reason == "end_turn" and record.usage.output_tokens == 4
    client.close()
