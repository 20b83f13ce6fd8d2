"""The embedded simulator, driven by the real anthropic / openai SDKs and raw httpx; last, the knobs the probe
relies on (``fill``, ``count_input``, ``jitter``, ``prefill``, the per-token schedule), checked against what the
simulator says it did."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from llmtap.simulator import SCENARIO_HEADER, Scenario, ScenarioError, Served, Simulator

MSGS: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
MODEL = "claude-test-1"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as s:
        yield s


@pytest.fixture
def client(sim: Simulator) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=sim.base_url, api_key="test", max_retries=2) as c:
        yield c


def _post(sim: Simulator, scenario: Scenario | None = None, **body: Any) -> httpx.Response:
    headers = {"x-api-key": "test", "anthropic-version": "2023-06-01"}
    if scenario is not None:
        headers.update(scenario.headers())
    payload = {"model": MODEL, "max_tokens": 16, "messages": MSGS, **body}
    return httpx.post(f"{sim.base_url}/v1/messages", json=payload, headers=headers, timeout=5)


def _sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    events: list[tuple[str | None, str]] = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name: str | None = None
        data = ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
        events.append((name, data))
    return events


# ---------------------------------------------------------------------- Scenario


def test_scenario_parse_and_roundtrip() -> None:
    s = Scenario.parse("tokens=3, ttft=0.25;gap=0.01 gzip no-stop fail=2,fail_status=429,retry_after=1.5")
    assert s == Scenario(
        tokens=3, ttft=0.25, gap=0.01, gzip=True, no_stop=True, fail=2, fail_status=429, retry_after=1.5
    )
    assert Scenario.parse(s.to_header()) == s
    assert Scenario.parse("") == Scenario()
    assert Scenario().to_header() == ""
    assert Scenario.parse("gzip=0,model=claude-x") == Scenario(model="claude-x")
    assert s.headers() == {SCENARIO_HEADER: s.to_header()}
    assert Scenario(tokens=2).expected_text() == "tok0 tok1 "


@pytest.mark.parametrize(
    "bad",
    [
        "nope=1",
        "tokens=x",
        "tokens",
        "fail_status=418",
        "ttft=-1",
        "stop_reason=bogus",
        "gzip=maybe",
        "tokens=1,tokens=2",
    ],
)
def test_scenario_rejects(bad: str) -> None:
    with pytest.raises(ScenarioError):
        Scenario.parse(bad)


# ---------------------------------------------------------------------- Anthropic, happy paths


def test_stream_completes_with_text_and_usage(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(tokens=4, input=30, cache_read=7, cache_write=3, ttft=0.05, stop_reason="max_tokens")
    with client.messages.stream(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "tok0 tok1 tok2 tok3 "
    assert final.model == MODEL
    assert final.id.startswith("msg_")
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 4
    assert final.usage.input_tokens == 30
    assert final.usage.cache_read_input_tokens == 7
    assert final.usage.cache_creation_input_tokens == 3

    (served,) = sim.wait_served(1)
    assert served.path == "/v1/messages"
    assert served.api == "anthropic"
    assert served.status == 200 and served.stream and served.outcome_sent == "completed"
    assert served.retry_count == 0
    assert served.deltas_sent == 4
    assert (served.input_tokens, served.output_tokens, served.cache_read, served.cache_write) == (30, 4, 7, 3)
    assert served.stop_reason == "max_tokens"
    assert served.scenario == sc
    assert served.auth_present
    assert served.model == MODEL
    assert served.headers_sent_at is not None and served.first_token_sent_at is not None
    assert served.received_at <= served.headers_sent_at <= served.first_token_sent_at <= served.ended_at
    assert served.first_token_sent_at - served.headers_sent_at >= 0.05


def test_non_streaming_message(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(tokens=3, model="claude-other", stop_reason="stop_sequence")
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()
    )
    msg = raw.parse()
    assert msg.content[0].type == "text" and msg.content[0].text == "tok0 tok1 tok2 "
    assert msg.model == "claude-other" and msg.stop_reason == "stop_sequence"
    assert msg.usage.input_tokens == 25 and msg.usage.output_tokens == 3
    (served,) = sim.wait_served(1)
    assert not served.stream and served.outcome_sent == "completed"
    assert served.first_token_sent_at is None
    assert raw.headers["request-id"] == served.request_id
    assert raw.headers["anthropic-ratelimit-requests-limit"] == "4000"


def test_beta_query_and_default_scenario(sim: Simulator, client: anthropic.Anthropic) -> None:
    sim.default = Scenario(tokens=2)
    msg = client.beta.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].type == "text" and msg.content[0].text == "tok0 tok1 "
    (served,) = sim.wait_served(1)
    assert served.path == "/v1/messages" and served.scenario == Scenario(tokens=2)


def test_response_headers_and_ratelimit_countdown(sim: Simulator) -> None:
    r1, r2 = _post(sim), _post(sim)
    for r in (r1, r2):
        assert r.status_code == 200
        assert r.headers["request-id"].startswith("req_")
        assert r.headers["content-type"] == "application/json"
        for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
            for part in ("limit", "remaining", "reset"):
                assert f"anthropic-ratelimit-{kind}-{part}" in r.headers
        assert r.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    rem = [int(r.headers["anthropic-ratelimit-requests-remaining"]) for r in (r1, r2)]
    assert rem[1] == rem[0] - 1
    r3 = _post(sim, Scenario(ratelimit_remaining=0))
    assert r3.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert [s.request_id for s in sim.wait_served(3)] == [r.headers["request-id"] for r in (r1, r2, r3)]


def test_wire_format(sim: Simulator) -> None:
    r = _post(sim, Scenario(tokens=2), stream=True)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["transfer-encoding"] == "chunked"
    events = _sse_events(r.content)
    assert [e for e, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert any(d.endswith(" }") for _, d in events)  # padded like the real API
    start = json.loads(events[0][1])
    assert start["message"]["usage"] == {
        "input_tokens": 25,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1,
        "service_tier": "standard",
    }
    delta = json.loads(events[6][1])
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == 2 and delta["usage"]["input_tokens"] == 25


# ---------------------------------------------------------------------- faults


def test_fail_twice_then_succeed(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(fail=2, fail_status=529, retry_after=0.01, tokens=2)
    with client.messages.stream(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()) as s:
        assert "".join(s.text_stream) == "tok0 tok1 "
    served = sim.wait_served(3)
    assert [s.retry_count for s in served] == [0, 1, 2]
    assert [s.status for s in served] == [529, 529, 200]
    assert [s.outcome_sent for s in served] == ["error_status", "error_status", "completed"]
    assert served[0].output_tokens == 0 and served[0].stop_reason is None


def test_fail_body_and_headers(sim: Simulator) -> None:
    r = _post(sim, Scenario(fail=1, fail_status=429, retry_after=0.2))
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    assert r.headers["retry-after-ms"] == "200"
    body = r.json()
    assert body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": body["error"]["message"]},
        "request_id": r.headers["request-id"],
    }
    r = _post(sim, Scenario(fail=1, fail_status=500))
    assert r.status_code == 500 and r.json()["error"]["type"] == "api_error"
    assert "retry-after" not in r.headers and "retry-after-ms" not in r.headers
    r = _post(sim, Scenario(fail=1))
    assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"


def test_fail_without_a_retry_header_counts_the_requests_of_one_model_and_scenario(sim: Simulator) -> None:
    """A client that numbers no attempt (plain httpx here; LiteLLM, google-genai ...) gets past ``fail=N``:
    the server counts the requests of one path, model and scenario. Another model, or ``clear()``, starts
    the count again; control: a client that says its attempt number is believed, whatever the count."""
    sc = Scenario(fail=2, fail_status=503)
    assert [_post(sim, sc).status_code for _ in range(3)] == [503, 503, 200]
    assert [_post(sim, sc, model="other").status_code for _ in range(2)] == [503, 503]  # its own count
    assert _post(sim, Scenario(fail=2, fail_status=500)).status_code == 500  # another scenario: its own count
    sim.clear()
    assert _post(sim, sc).status_code == 503
    with httpx.Client() as client:
        said = {"x-api-key": "test", "anthropic-version": "2023-06-01", **sc.headers(), "x-stainless-retry-count": "0"}
        body = {"model": MODEL, "max_tokens": 16, "messages": MSGS}
        statuses = [client.post(f"{sim.base_url}/v1/messages", json=body, headers=said).status_code for _ in range(3)]
    assert statuses == [503, 503, 503]  # attempt 0 each time, as the client says
    assert [(s.retry_count, s.attempt) for s in sim.wait_served(4)] == [
        (0, 0)
    ] * 4  # the count started again at clear()


def test_every_scenario_knob_has_a_docstring() -> None:
    """docs/reference/simulator.md lists the knobs from these docstrings (docs/gen_reference.py)."""
    import ast
    import dataclasses
    import inspect

    from llmtap.simulator import _scenario

    (cls,) = (
        n for n in ast.parse(inspect.getsource(_scenario)).body if isinstance(n, ast.ClassDef) and n.name == "Scenario"
    )
    documented = {
        node.target.id
        for node, after in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(Scenario)}
    assert "fail" in documented and len(fields) > 20  # control: read
    assert fields - documented == set()


def test_fail_exhausts_retries(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(fail=5, retry_after=0.01)
    with pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers())
    assert info.value.status_code == 529
    assert [s.retry_count for s in sim.wait_served(3)] == [0, 1, 2]


def test_error_event_mid_stream(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(tokens=5, error_event_at=2)
    got: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError, match="overloaded_error"),
        client.messages.stream(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()) as s,
    ):
        got.extend(s.text_stream)
    assert got == ["tok0 ", "tok1 "]
    (served,) = sim.wait_served(1)
    assert served.outcome_sent == "error_event" and served.status == 200 and served.deltas_sent == 2

    raw = _post(sim, sc, stream=True)  # body ends cleanly right after the error event
    assert raw.content.endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )


def test_drop_mid_stream(sim: Simulator, client: anthropic.Anthropic) -> None:
    sc = Scenario(tokens=5, drop_at=3)
    got: list[str] = []
    with (
        pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)),
        client.messages.stream(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()) as s,
    ):
        got.extend(s.text_stream)
    assert got == ["tok0 ", "tok1 ", "tok2 "]
    (served,) = sim.wait_served(1)
    assert served.outcome_sent == "dropped" and served.deltas_sent == 3

    with pytest.raises(httpx.TransportError):
        _post(sim, sc, stream=True)


def test_no_stop(sim: Simulator) -> None:
    r = _post(sim, Scenario(tokens=2, no_stop=True), stream=True)
    assert r.status_code == 200  # the body ended cleanly (chunked terminator received)
    names = [e for e, _ in _sse_events(r.content)]
    assert names[-1] == "content_block_stop"
    assert "message_delta" not in names and "message_stop" not in names
    (served,) = sim.wait_served(1)
    assert served.outcome_sent == "no_stop"


def test_stall_and_gap_timing(sim: Simulator) -> None:
    sc = Scenario(tokens=3, headers_delay=0.05, gap=0.02, stall_at=1, stall=0.1)
    t0 = time.perf_counter()
    with (
        httpx.Client(timeout=5) as c,
        c.stream(
            "POST",
            f"{sim.base_url}/v1/messages",
            json={"model": MODEL, "stream": True, "messages": MSGS},
            headers=sc.headers(),
        ) as r,
    ):
        t_headers = time.perf_counter()
        r.read()
    (served,) = sim.wait_served(1)
    assert served.headers_sent_at is not None and served.first_token_sent_at is not None
    assert served.headers_sent_at - served.received_at >= 0.05
    assert t0 < served.headers_sent_at <= t_headers
    assert served.ended_at - served.first_token_sent_at >= 0.1 + 0.04


@pytest.mark.parametrize("stream", [True, False])
def test_gzip(sim: Simulator, client: anthropic.Anthropic, stream: bool) -> None:
    r = _post(sim, Scenario(tokens=3, gzip=True), stream=stream)
    assert r.headers["content-encoding"] == "gzip"
    if stream:
        assert [e for e, _ in _sse_events(r.content)][-1] == "message_stop"
    else:
        assert r.json()["content"][0]["text"] == "tok0 tok1 tok2 "
    with client.messages.stream(
        model=MODEL, max_tokens=16, messages=MSGS, extra_headers=Scenario(tokens=3, gzip=True).headers()
    ) as s:
        assert "".join(s.text_stream) == "tok0 tok1 tok2 "


def test_gzip_stream_is_incremental(sim: Simulator) -> None:
    sc = Scenario(tokens=2, gzip=True, ttft=0.2)
    with (
        httpx.Client(timeout=5) as c,
        c.stream("POST", f"{sim.base_url}/v1/messages", json={"stream": True}, headers=sc.headers()) as r,
    ):
        assert r.headers["content-encoding"] == "gzip"
        it = r.iter_bytes()
        first = next(it)  # decoded before the delayed deltas are even sent
        t_first = time.perf_counter()
        rest = b"".join(it)
    (served,) = sim.wait_served(1)
    assert b"message_start" in first
    assert served.first_token_sent_at is not None and t_first < served.first_token_sent_at
    assert b"message_stop" in rest


def test_keep_alive_reuse(sim: Simulator, client: anthropic.Anthropic) -> None:
    for _ in range(2):
        with client.messages.stream(model=MODEL, max_tokens=16, messages=MSGS) as s:
            s.get_final_message()
    client.messages.create(model=MODEL, max_tokens=16, messages=MSGS)
    served = sim.wait_served(3)
    assert len({s.connection for s in served}) == 1


def test_bad_header_unknown_path_and_bad_json(sim: Simulator, client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="unknown x-llmtap-sim key 'bogus'"):
        client.messages.create(model=MODEL, max_tokens=16, messages=MSGS, extra_headers={SCENARIO_HEADER: "bogus=1"})
    r = httpx.post(f"{sim.base_url}/v2/nothing", json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(f"{sim.base_url}/v1/messages")
    assert r.status_code == 405
    r = httpx.post(f"{sim.base_url}/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    served = sim.wait_served(4)
    assert [s.status for s in served] == [400, 404, 405, 400]
    assert httpx.get(f"{sim.base_url}/healthz").json() == {"status": "ok"}
    assert all(s.outcome_sent == "error_status" for s in served)
    assert not served[1].auth_present


def test_client_disconnect_is_recorded_quietly(sim: Simulator) -> None:
    sc = Scenario(tokens=50, gap=0.01)
    with (
        httpx.Client(timeout=5) as c,
        c.stream("POST", f"{sim.base_url}/v1/messages", json={"stream": True}, headers=sc.headers()) as r,
    ):
        next(r.iter_bytes())
    (served,) = sim.wait_served(1)
    assert served.outcome_sent == "client_disconnected"
    assert _post(sim).status_code == 200  # still serving


def _hold(c: httpx.Client, sim: Simulator) -> contextlib.AbstractContextManager[httpx.Response]:
    """A stream the server holds after its second delta until the client leaves (read up to there)."""
    held = Scenario(tokens=5, stall_at=2, stall=600, stall_until_closed=True)
    return c.stream("POST", f"{sim.base_url}/v1/messages", json={"stream": True}, headers=held.headers())


def _read_to_first_delta(r: httpx.Response) -> Iterator[str]:
    """Returns the line iterator: kept referenced, the connection stays open (closing it, httpcore closes
    the connection)."""
    lines = r.iter_lines()
    for line in lines:
        if "content_block_delta" in line:
            break
    return lines


def test_clear_forgets_the_requests_still_in_flight(sim: Simulator) -> None:
    """A request belongs to the records of the ``clear()`` generation it started in: a stream an earlier
    test left on a shared simulator ends after the clear without a record, so the count is exact."""
    with httpx.Client(timeout=10) as c:
        with _hold(c, sim) as r:
            lines = _read_to_first_delta(r)
            assert sim.in_flight == 1 and sim.served == []
            with pytest.raises(TimeoutError):
                sim.wait_idle(timeout=0.05)  # held for up to 600 s
            sim.clear()  # what the ``cap`` fixture does before each test
            mine = _post(sim, Scenario(tokens=1))
            assert mine.status_code == 200
            (served,) = sim.wait_served(1)
            assert served.request_id == mine.headers["request-id"]
            assert sim.in_flight == 1  # the held stream: still being served
            del lines
        # the client left: the held stream ends now, after the clear, and is not recorded
        assert sim.wait_idle() == [served]
        # control: the same held stream without a clear in between is recorded when it ends
        with _hold(c, sim) as r:
            _read_to_first_delta(r)
        assert [s.outcome_sent for s in sim.wait_idle()] == ["completed", "client_disconnected"]
        assert sim.in_flight == 0


def test_stop_is_quick_with_stalled_handler() -> None:
    sim = Simulator().start()
    started = threading.Event()
    errors: list[BaseException] = []

    def call() -> None:
        sc = Scenario(tokens=3, stall_at=1, stall=30)
        try:
            with (
                httpx.Client(timeout=10) as c,
                c.stream("POST", f"{sim.base_url}/v1/messages", json={"stream": True}, headers=sc.headers()) as r,
            ):
                started.set()
                r.read()
        except httpx.HTTPError as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    assert started.wait(5)
    time.sleep(0.05)
    t0 = time.perf_counter()
    sim.stop()
    # the stalled handler was interrupted, not waited for: stop() joins handlers with a 2 s deadline
    assert time.perf_counter() - t0 < 2.0
    t.join(5)
    assert not t.is_alive()
    assert errors and isinstance(errors[0], httpx.TransportError)
    (served,) = sim.served
    assert served.outcome_sent == "dropped" and served.detail == "simulator stopped"
    sim.stop()  # idempotent


def test_stop_closes_idle_keepalive_connections() -> None:
    sim = Simulator().start()
    with httpx.Client(timeout=5) as c:
        assert c.post(f"{sim.base_url}/v1/messages", json={}).status_code == 200
        t0 = time.perf_counter()
        sim.stop()
        # the idle connection was closed, not waited for: stop() joins handlers with a 2 s deadline
        assert time.perf_counter() - t0 < 2.0


async def test_async_sdk_stream(sim: Simulator) -> None:
    async with anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="test", max_retries=2) as c:
        sc = Scenario(tokens=3, fail=1, retry_after=0.01)
        async with c.messages.stream(model=MODEL, max_tokens=16, messages=MSGS, extra_headers=sc.headers()) as s:
            text = "".join([t async for t in s.text_stream])
    assert text == "tok0 tok1 tok2 "
    assert [s.status for s in sim.wait_served(2)] == [529, 200]


# ---------------------------------------------------------------------- OpenAI


@pytest.fixture
def oai(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim.base_url}/v1", api_key="test", max_retries=2) as c:
        yield c


def test_openai_chat_stream_with_usage(sim: Simulator, oai: openai.OpenAI) -> None:
    sc = Scenario(tokens=3, input=10, cache_read=4, reasoning=2, fail=1, fail_status=503, retry_after=0.01)
    stream = oai.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=sc.headers(),
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (14, 5)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 4
    served = sim.wait_served(2)
    assert [(s.status, s.retry_count, s.api) for s in served] == [
        (503, 0, "openai-chat"),
        (200, 1, "openai-chat"),
    ]
    assert served[1].input_tokens == 14 and served[1].output_tokens == 5


def test_openai_chat_headers_and_no_usage(sim: Simulator) -> None:
    r = httpx.post(f"{sim.base_url}/v1/chat/completions", json={"model": "gpt-x", "stream": True})
    assert r.headers["x-request-id"].startswith("req_")
    assert int(r.headers["openai-processing-ms"]) >= 0
    assert r.headers["x-ratelimit-limit-requests"] == "10000"
    assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    datas = [d for _, d in _sse_events(r.content)]
    assert datas[-1] == "[DONE]"
    assert all("usage" not in json.loads(d) for d in datas[:-1])


def test_openai_chat_non_stream_and_error_event(sim: Simulator, oai: openai.OpenAI) -> None:
    done = oai.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers=Scenario(tokens=2, stop_reason="max_tokens").headers(),
    )
    assert done.choices[0].message.content == "tok0 tok1 "
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 2

    stream = oai.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_headers=Scenario(tokens=4, error_event_at=1).headers(),
    )
    with pytest.raises(openai.APIError, match="overloaded"):
        list(stream)


def test_openai_responses_stream(sim: Simulator, oai: openai.OpenAI) -> None:
    sc = Scenario(tokens=3, input=10, cache_read=4, reasoning=2)
    events = list(oai.responses.create(model="gpt-test", input="hi", stream=True, extra_headers=sc.headers()))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "tok0 tok1 tok2 "
    last = events[-1]
    assert last.type == "response.completed"
    usage = last.response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (14, 5)
    assert usage.input_tokens_details.cached_tokens == 4
    assert usage.output_tokens_details.reasoning_tokens == 2
    assert last.response.output_text == "tok0 tok1 tok2 "

    resp = oai.responses.create(model="gpt-test", input="hi", extra_headers=sc.headers())
    assert resp.output_text == "tok0 tok1 tok2 " and resp.status == "completed"
    served: list[Served] = sim.wait_served(2)
    assert [s.api for s in served] == ["openai-responses"] * 2


def test_openai_responses_drop(sim: Simulator, oai: openai.OpenAI) -> None:
    stream = oai.responses.create(
        model="gpt-test", input="hi", stream=True, extra_headers=Scenario(tokens=3, drop_at=1).headers()
    )
    with pytest.raises(openai.APIConnectionError):
        list(stream)
    assert sim.wait_served(1)[0].outcome_sent == "dropped"


# ---------------------------------------------------------------------- Gemini


def _gemini(
    sim: Simulator, scenario: Scenario | None = None, *, stream: bool = True, version: str = "v1beta"
) -> httpx.Response:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    headers = {"x-goog-api-key": "test", **(scenario.headers() if scenario is not None else {})}
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    url = f"{sim.base_url}/{version}/models/gemini-x:{method}"
    return httpx.post(url, json=body, headers=headers, timeout=5)


def _gemini_chunks(raw: bytes) -> list[dict[str, Any]]:
    assert raw.endswith(b"\r\n\r\n") and b"\n\n" not in raw.replace(b"\r\n", b"")  # CRLF framing only
    blocks = [b for b in raw.split(b"\r\n\r\n") if b]
    assert all(b.startswith(b"data: ") and b"\r\n" not in b for b in blocks)
    return [json.loads(b[len(b"data: ") :]) for b in blocks]


def test_gemini_stream_wire_format(sim: Simulator) -> None:
    sc = Scenario(tokens=3, input=20, cache_read=6, reasoning=4, stop_reason="max_tokens")
    r = _gemini(sim, sc)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = _gemini_chunks(r.content)
    assert len(chunks) == 4  # one per delta, then the finishReason chunk; no [DONE]
    texts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks]
    assert texts == ["tok0 ", "tok1 ", "tok2 ", ""]
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert {c["responseId"] for c in chunks} == {chunks[0]["responseId"]}
    assert {c["modelVersion"] for c in chunks} == {"gemini-x"}
    for c in chunks[:-1]:  # the prompt side only until the end
        assert c["usageMetadata"]["promptTokenCount"] == 26
        assert c["usageMetadata"]["thoughtsTokenCount"] == 4
        assert "candidatesTokenCount" not in c["usageMetadata"]
    final = chunks[-1]["usageMetadata"]
    assert final["promptTokenCount"] == 26 and final["cachedContentTokenCount"] == 6
    assert final["candidatesTokenCount"] == 3 and final["thoughtsTokenCount"] == 4
    assert final["totalTokenCount"] == 26 + 3 + 4
    (served,) = sim.wait_served(1)
    assert served.api == "gemini" and served.stream and served.model == "gemini-x" and served.auth_present
    assert served.path == "/v1beta/models/gemini-x:streamGenerateContent"
    assert (served.input_tokens, served.output_tokens, served.cache_read) == (26, 7, 6)
    assert served.outcome_sent == "completed" and served.deltas_sent == 3


def test_gemini_unary_and_v1(sim: Simulator) -> None:
    r = _gemini(sim, Scenario(tokens=2, stop_reason="refusal"), stream=False, version="v1")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["candidates"] == [
        {"content": {"parts": [{"text": "tok0 tok1 "}], "role": "model"}, "finishReason": "SAFETY", "index": 0}
    ]
    usage = body["usageMetadata"]
    assert (usage["promptTokenCount"], usage["candidatesTokenCount"], usage["totalTokenCount"]) == (25, 2, 27)
    assert "cachedContentTokenCount" not in usage and "thoughtsTokenCount" not in usage
    assert body["modelVersion"] == "gemini-x" and len(body["responseId"]) == 23
    (served,) = sim.wait_served(1)
    assert served.path == "/v1/models/gemini-x:generateContent" and not served.stream


def test_gemini_errors(sim: Simulator) -> None:
    r = _gemini(sim, Scenario(fail=1, fail_status=429, retry_after=2))
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    error = r.json()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["details"] == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]
    for status, name in ((503, "UNAVAILABLE"), (500, "INTERNAL")):
        r = _gemini(sim, Scenario(fail=1, fail_status=status), stream=False)
        assert r.status_code == status and r.json()["error"]["status"] == name
    # google-genai numbers no attempt: the server counts the requests of one path, model and scenario
    assert _gemini(sim, Scenario(fail=1, fail_status=503)).status_code == 503
    assert _gemini(sim, Scenario(fail=1, fail_status=503)).status_code == 200
    # error_event_at: an in-stream error chunk, or the error status without streaming
    chunks = _gemini_chunks(_gemini(sim, Scenario(tokens=4, error_event_at=1)).content)
    assert len(chunks) == 2 and chunks[-1] == {
        "error": {"code": 503, "message": chunks[-1]["error"]["message"], "status": "UNAVAILABLE"}
    }
    r = _gemini(sim, Scenario(error_event_at=0, error_type="api_error"), stream=False)
    assert r.status_code == 500 and r.json()["error"]["status"] == "INTERNAL"
    # no_stop: no finishReason chunk; drop: no chunked terminator
    chunks = _gemini_chunks(_gemini(sim, Scenario(tokens=2, no_stop=True)).content)
    assert len(chunks) == 2 and all("finishReason" not in c["candidates"][0] for c in chunks)
    with pytest.raises(httpx.TransportError):
        _gemini(sim, Scenario(tokens=3, drop_at=1))
    # gzip, per chunk
    r = _gemini(sim, Scenario(tokens=2, gzip=True))
    assert r.headers["content-encoding"] == "gzip" and len(_gemini_chunks(r.content)) == 3
    # streamGenerateContent without alt=sse (a streamed JSON array) is not simulated
    r = httpx.post(f"{sim.base_url}/v1beta/models/gemini-x:streamGenerateContent", json={})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = httpx.post(f"{sim.base_url}/v1beta/models/gemini-x:countTokens", json={})
    assert r.status_code == 404
    served = sim.wait_served(12)
    assert [s.outcome_sent for s in served] == [
        *["error_status"] * 4,
        "completed",
        "error_event",
        "error_status",
        "no_stop",
        "dropped",
        "completed",
        "error_status",
        "error_status",
    ]
    assert [s.api for s in served] == ["gemini"] * 11 + ["unknown"]
    assert [(s.retry_count, s.attempt) for s in served[3:5]] == [
        (0, 0),
        (0, 1),
    ]  # the server's count of that path, model and scenario


def _ollama(sim: Simulator, scenario: Scenario, api: str = "chat", **body: Any) -> httpx.Response:
    payload: dict[str, Any] = {"model": "llama-x", **body}
    return httpx.post(f"{sim.base_url}/api/{api}", json=payload, headers=scenario.headers(), timeout=5)


def _lines(raw: bytes) -> list[dict[str, Any]]:
    assert raw.endswith(b"\n") and b"\n\n" not in raw  # one JSON object per line, each ended, no blank line
    return [json.loads(line) for line in raw.splitlines()]


def test_ollama_wire_format(sim: Simulator) -> None:
    """ollama's NDJSON (the real client's decoding of it is in tests/test_ollama.py): streamed unless the
    request says ``stream: false``, the last line ``done: true`` with the counts."""
    r = _ollama(sim, Scenario(tokens=3, input=9))  # no "stream": the server's default is to stream
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    lines = _lines(r.content)
    assert [line["done"] for line in lines] == [False, False, False, True]
    assert "".join(line["message"]["content"] for line in lines) == Scenario(tokens=3).expected_text()
    last = lines[-1]
    assert (last["done_reason"], last["prompt_eval_count"], last["eval_count"], last["model"]) == (
        "stop",
        9,
        3,
        "llama-x",
    )
    assert all(isinstance(last[k], int) and last[k] > 0 for k in ("total_duration", "eval_duration"))
    r = _ollama(sim, Scenario(tokens=2, fill=True), api="generate", stream=False, options={"num_predict": 4})
    body = r.json()
    assert r.headers["content-type"] == "application/json" and body["done"] is True
    assert (body["response"], body["done_reason"], body["eval_count"]) == ("tok0 tok1 tok2 tok3 ", "length", 4)
    # errors: a status with {"error": ...}, or a line of its own mid-stream
    r = _ollama(sim, Scenario(fail=1, fail_status=503), stream=True)
    assert r.status_code == 503 and set(r.json()) == {"error"}
    lines = _lines(_ollama(sim, Scenario(tokens=4, error_event_at=1), stream=True).content)
    assert len(lines) == 2 and set(lines[-1]) == {"error"}
    # no_stop: no done:true line; drop: no chunked terminator
    lines = _lines(_ollama(sim, Scenario(tokens=2, no_stop=True), api="generate").content)
    assert [line["done"] for line in lines] == [False, False]
    with pytest.raises(httpx.TransportError):
        _ollama(sim, Scenario(tokens=3, drop_at=1))
    served = sim.wait_served(6)
    assert [s.outcome_sent for s in served] == [
        "completed",
        "completed",
        "error_status",
        "error_event",
        "no_stop",
        "dropped",
    ]
    assert [s.api for s in served] == [
        "ollama-chat",
        "ollama-generate",
        "ollama-chat",
        "ollama-chat",
        "ollama-generate",
        "ollama-chat",
    ]
    assert [s.stream for s in served] == [True, False, True, True, True, True]


def test_stall_until_closed_holds_the_stream_until_the_client_leaves(sim: Simulator) -> None:
    sim.clear()
    held = Scenario(tokens=5, stall_at=2, stall=600, stall_until_closed=True)
    assert Scenario.parse(held.to_header()) == held
    with (
        httpx.Client(timeout=10) as c,
        c.stream("POST", f"{sim.base_url}/v1/messages", json={"stream": True}, headers=held.headers()) as r,
    ):
        for line in r.iter_lines():
            if "content_block_delta" in line:
                break  # the first delta read; the server holds after the second, until we leave
    (served,) = sim.wait_served(1)  # the client left long before the 600 s cap
    assert served.outcome_sent == "client_disconnected"
    assert served.deltas_sent == 2
    # control: a client that stays is answered in full once the cap has passed
    capped = Scenario(tokens=5, stall_at=2, stall=0.05, stall_until_closed=True)
    response = _post(sim, capped, stream=True)
    assert response.status_code == 200 and "message_stop" in response.text
    (_, served) = sim.wait_served(2)
    assert served.outcome_sent == "completed"
    unary = _post(sim, capped)  # the same knob holds a non-streamed answer
    assert unary.status_code == 200 and unary.json()["stop_reason"] == "end_turn"


# -- the knobs the probe relies on ----------------------------------------------------------------------


def test_knobs_parse_and_resolve() -> None:
    sc = Scenario.parse("fill,count_input,ttft=0.1,jitter=0.01,prefill=0.001,gap=0.002")
    assert sc.fill and sc.count_input and sc.jitter == 0.01 and sc.prefill == 0.001
    assert Scenario.parse(sc.to_header()) == sc
    concrete = sc.resolve(max_tokens=7, input_words=30)
    assert concrete.tokens == 7 and concrete.stop_reason == "max_tokens" and concrete.input == 30
    assert 0.1 + 0.03 - 0.01 <= concrete.ttft <= 0.1 + 0.03 + 0.01
    assert not (concrete.fill or concrete.count_input or concrete.jitter or concrete.prefill)
    # without the knobs nothing changes (positive control above: it does with them)
    plain = Scenario(tokens=3)
    assert plain.resolve(max_tokens=7, input_words=30) is plain
    # fill without a max_tokens in the request keeps `tokens`
    assert Scenario(fill=True, tokens=4).resolve(None, 0).tokens == 4


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_fill_and_count_input_through_the_sdk(sdk: str) -> None:
    with Simulator(default=Scenario.parse("fill,count_input,tokens=3")) as sim:
        prompt = "one two three four five six"
        if sdk == "anthropic":
            with anthropic.Anthropic(base_url=sim.base_url, api_key="k") as client:
                msg = client.messages.create(model="m", max_tokens=9, messages=[{"role": "user", "content": prompt}])
            assert msg.usage.output_tokens == 9 and msg.stop_reason == "max_tokens"
            assert msg.usage.input_tokens == 6
        else:
            with openai.OpenAI(base_url=sim.base_url + "/v1", api_key="k") as oai:
                chat = oai.chat.completions.create(
                    model="m", max_completion_tokens=9, messages=[{"role": "user", "content": prompt}]
                )
            assert chat.usage is not None and chat.usage.completion_tokens == 9
            assert chat.choices[0].finish_reason == "length"
            assert chat.usage.prompt_tokens == 6
        (served,) = sim.wait_served(1)
        assert served.scenario.tokens == 9 and served.output_tokens == 9 and served.input_tokens == 6


def _schedule_spans() -> list[float]:
    """First delta to the end of the stream, server side, for three streams of 50 deltas 2 ms apart."""
    sc = Scenario(tokens=50, gap=0.002, ttft=0.01)
    with Simulator() as sim, anthropic.Anthropic(base_url=sim.base_url, api_key="k") as client:
        for _ in range(3):
            for _ in client.messages.create(
                model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers=sc.headers(),
            ):  # fmt: skip
                pass
        served = sim.wait_served(3)
    spans = [s.ended_at - s.first_token_sent_at for s in served if s.first_token_sent_at is not None]
    assert len(spans) == 3
    return spans


def test_deltas_never_run_ahead_of_the_schedule() -> None:
    """49 gaps of 2 ms: never faster than the schedule, however loaded the machine (a late thread only
    delays; the first write may itself be up to one gap late without re-anchoring the schedule)."""
    spans = _schedule_spans()
    assert min(spans) >= 0.098 - 0.002, spans


@pytest.mark.budget
def test_deltas_follow_a_schedule() -> None:
    """50 deltas 2 ms apart take 98 ms: sleep overshoot does not accumulate per token (relative
    sleeps would add ~0.1 ms per token). The fastest of three runs is checked against a budget of
    8 ms over the schedule: a quiet machine's figure (make bench)."""
    spans = _schedule_spans()
    assert 0.096 <= min(spans) < 0.098 + 0.008, spans


def test_jitter_and_prefill_land_in_served() -> None:
    sc = Scenario.parse("count_input,ttft=0.005,jitter=0.004,prefill=0.0001,tokens=1")
    with Simulator(default=sc) as sim, anthropic.Anthropic(base_url=sim.base_url, api_key="k") as client:
        for words in (0, 40, 80, 120):
            client.messages.create(
                model="m", max_tokens=4, messages=[{"role": "user", "content": " ".join(["w"] * words) or "x"}]
            )
        served = sim.wait_served(4)
    ttfts = [s.scenario.ttft for s in served]
    inputs = [s.scenario.input for s in served]
    for ttft, n in zip(ttfts, inputs, strict=True):
        assert abs(ttft - (0.005 + 0.0001 * n)) <= 0.004 + 1e-9
    assert len(set(ttfts)) == 4  # the injected TTFTs really differ


def test_verbose_says_how_each_request_ended_and_counts_them(capfd: pytest.CaptureFixture[str]) -> None:
    """``llmtap simulate --verbose``: per request, a running count, the status and how the answer ended, the
    attempt number ``fail`` compares, and the scenario; control: not verbose, nothing is printed."""
    body = {"model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    headers = Scenario(tokens=3, fail=1, fail_status=529).headers()
    with Simulator(verbose=True) as sim, httpx2.Client() as client:
        for retry in ("0", "1"):
            client.post(sim.base_url + "/v1/messages", json=body, headers={**headers, "x-stainless-retry-count": retry})
        sim.wait_served(2)
    err = capfd.readouterr().err
    assert '"POST /v1/messages HTTP/1.1"' not in err, err  # one line a request: no access log beside it
    lines = [line for line in err.splitlines() if line.startswith("llmtap simulate: #")]
    assert lines == [
        "llmtap simulate: #1 POST /v1/messages -> 529 error_status after 0 deltas (attempt 0; "
        "scenario tokens=3,fail=1)",
        "llmtap simulate: #2 POST /v1/messages -> 200 completed after 3 deltas (attempt 1; scenario tokens=3,fail=1)",
    ], lines
    with Simulator() as sim, httpx2.Client() as client:
        client.post(sim.base_url + "/v1/messages", json=body)
        sim.wait_served(1)
    assert "llmtap simulate: #" not in capfd.readouterr().err
