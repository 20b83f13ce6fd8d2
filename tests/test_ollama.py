"""ollama's native API (``/api/chat``, ``/api/generate``): the parsers, and the real ``ollama`` client against
the simulator, sync and async, streamed and not.

The simulator's frames are checked by the client's own decoder (``ollama/_client.py``: one JSON object per
line, each validated as a ``ChatResponse`` / ``GenerateResponse``): the text and counts the app reads are
the ones llmtap records. The case table (``llmtap._drive``) runs the ``ollama`` adapter through
``tests/test_sdk_cases.py``; here are what it does not cover: ``/api/generate``, server time, the wire
details the parser relies on.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import ollama
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmtap
from llmtap import Outcome
from llmtap._core.observer import AttemptObserver, Ending
from llmtap._core.record import AttemptRecord
from llmtap._drive import fresh_model, served_for
from llmtap._log import internal_errors
from llmtap._providers import ollama_chat, ollama_generate
from llmtap._providers._base import Facts, Output, Provider
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture
from tests.support.replay import CONFIG, START

NDJSON = [(b"content-type", b"application/x-ndjson")]
CHAT, GENERATE = ollama_chat.PROVIDER, ollama_generate.PROVIDER


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _chat(content: str, **extra: Any) -> bytes:
    return _line({"model": "m", "message": {"role": "assistant", "content": content}, "done": False, **extra})


FINAL = {
    "done": True, "done_reason": "length", "total_duration": 2_500_000_000, "load_duration": 1,
    "prompt_eval_count": 11, "prompt_eval_duration": 1, "eval_count": 7, "eval_duration": 1,
}  # fmt: skip


def _observe(provider: Provider, chunks: list[bytes], ending: Ending = Ending.EOF) -> AttemptRecord:
    observer = AttemptObserver(START, provider, CONFIG)
    observer.on_response(200, NDJSON, 0.0)
    for n, chunk in enumerate(chunks, 1):
        observer.on_chunk(chunk, float(n))
    record = observer.end(ending, 100.0)
    assert record is not None
    return record


# -- the parsers ------------------------------------------------------------------------------------


def test_a_whole_chat_stream() -> None:
    """Tokens, stop reason, response model and server time from the last line; TTFT at the first line with
    content (the first line carries none: the positive control that it is not the first line)."""
    record = _observe(CHAT, [_chat(""), _chat("Hi"), _chat(" there"), _chat("", **FINAL)])
    assert record.outcome is Outcome.COMPLETED and record.streamed
    assert (record.usage.input_tokens, record.usage.output_tokens) == (11, 7)
    assert record.stop_reasons == ("length",) and record.response_model == "m"
    assert record.server_time == 2.5
    assert [s[:2] for s in record.server_times] == [("total_duration", 2.5)]  # paired with the whole attempt
    assert record.server_times[0][2] == record.ended_at - record.started_at
    assert record.first_chunk_at == 1.0 and record.first_token_at == 2.0
    assert record.parse_errors == 0


def test_generate_output_kinds() -> None:
    none = GENERATE.on_event(Facts(), None, b'{"model":"m","response":"","done":false}')
    assert none is None
    assert GENERATE.on_event(Facts(), None, b'{"response":"Hi","done":false}') is Output.TEXT
    assert GENERATE.on_event(Facts(), None, b'{"response":"","thinking":"hmm","done":false}') is Output.REASONING
    assert GENERATE.on_event(Facts(), None, b'{"image":"aGk=","done":false}') is Output.OTHER
    assert CHAT.on_event(Facts(), None, b'{"response":"Hi","done":false}') is None  # chat reads message only


def test_a_stream_without_its_last_line_is_incomplete() -> None:
    record = _observe(CHAT, [_chat("Hi"), _chat(" there")])
    assert record.outcome is Outcome.INCOMPLETE and record.first_token_at == 1.0
    assert record.usage.output_tokens is None and record.stop_reasons == ()
    complete = _observe(CHAT, [_chat("Hi"), _chat(" there"), _chat("", **FINAL)])
    assert complete.outcome is Outcome.COMPLETED  # the positive control


def test_an_error_line_is_a_server_error_and_its_message_is_not_recorded() -> None:
    secret = "prompt text sk-do-not-record"
    record = _observe(CHAT, [_chat("Hi"), _line({"error": secret})], Ending.TERMINAL)
    assert record.outcome is Outcome.SERVER_ERROR and record.error_type == "error"
    assert secret not in repr(record)


def test_bad_lines_are_counted_never_raised() -> None:
    """Before the first output every line is parsed (after it, only the lines with a marker: the last one)."""
    bad = [b"not json\n", b'{"message":{"content":"x"},"done":false\n', b"[1,2]\n"]
    refused = _chat("", **{**FINAL, "eval_count": -3})
    record = _observe(CHAT, [*bad, _chat("Hi"), refused])
    assert record.parse_errors == 3  # two unreadable lines, one refused count (an array is no chunk: ignored)
    assert record.outcome is Outcome.COMPLETED and record.usage.output_tokens is None
    assert record.usage.input_tokens == 11  # the rest of the last line still counts
    assert record.first_token_at == 4.0


_PIECES = st.sampled_from(
    [_chat("Hi"), _chat("", **FINAL), b'{"error":"x"}\n', b"\n", b"\r\n", b'{"done":true,"eval_count":1e400}\n',
     b"\xff\xfe\n", b"[" * 5000 + b"\n", b'{"message":{"content":["x"]},"done":"yes"}\n', b'{"done_reason":7}\n']
) | st.binary(max_size=64)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.integers(1, 97), st.sampled_from(list(Ending)))
def test_any_bytes_end_in_one_record_and_no_internal_error(pieces: list[bytes], size: int, ending: Ending) -> None:
    """Whatever the body (lines valid or not, split anywhere, however it ends): one record, nothing raised,
    no internal error (what could not be read is a parse error of the attempt)."""
    body = b"".join(pieces)
    before = internal_errors()
    observer = AttemptObserver(START, CHAT, CONFIG._replace(max_event_bytes=1024))
    observer.on_response(200, NDJSON, 0.0)
    for n in range(0, len(body), size):
        observer.on_chunk(body[n : n + size], 1.0 + n)
    record = observer.end(ending, 1e6)
    assert record is not None and observer.end(Ending.EOF, 1e6) is None
    assert internal_errors() == before


def test_a_whole_body() -> None:
    facts = Facts()
    CHAT.on_body(facts, {"model": "m", "message": {"role": "assistant", "content": "Hi"}, **FINAL}, 200)
    assert facts.final and (facts.input_tokens, facts.output_tokens, facts.stop_reasons) == (11, 7, {0: "length"})
    refused = Facts()
    CHAT.on_body(refused, {"error": "model 'x' not found"}, 404)
    assert not refused.final and refused.error_type is None  # the status says it; the message is free text


# -- the real client against the simulator ----------------------------------------------------------

Mode = str


def _client_call(sim: Simulator, mode: Mode, api: str, stream: bool, scenario: Scenario, model: str) -> list[Any]:
    """What the app reads: the client's decoded chunks (one item for a non-streamed call)."""
    headers = scenario.headers()
    kwargs: dict[str, Any] = {"model": model, "stream": stream}
    if api == "chat":
        kwargs["messages"] = [{"role": "user", "content": "hi"}]
    else:
        kwargs["prompt"] = "hi"

    if mode == "sync":
        with ollama.Client(host=sim.base_url, headers=headers) as client:
            result = getattr(client, api)(**kwargs)
            return list(result) if stream else [result]

    async def call() -> list[Any]:
        client = ollama.AsyncClient(host=sim.base_url, headers=headers)
        try:
            result = await getattr(client, api)(**kwargs)
            return [part async for part in result] if stream else [result]
        finally:
            await client.close()  # type: ignore[no-untyped-call]

    return asyncio.run(call())


def _text(api: str, parts: list[Any]) -> str:
    return "".join((p.message.content or "") if api == "chat" else (p.response or "") for p in parts)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("api", ["chat", "generate"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_client_reads_what_llmtap_records(sim: Simulator, cap: Capture, mode: Mode, api: str, stream: bool) -> None:
    model = fresh_model("llama-test")
    scenario = Scenario(tokens=5, input=13, gap=0.002)
    parts = _client_call(sim, mode, api, stream, scenario, model)
    cap.wait(1)
    (served,) = served_for(sim, model, 1)
    (record,) = cap.records
    last = parts[-1]
    assert _text(api, parts) == scenario.expected_text()  # the client decoded every frame
    assert last.done is True and last.done_reason == "stop"
    assert (record.usage.input_tokens, record.usage.output_tokens) == (last.prompt_eval_count, last.eval_count)
    assert (last.prompt_eval_count, last.eval_count) == (served.input_tokens, served.output_tokens) == (13, 5)
    assert record.stop_reasons == (last.done_reason,)
    assert record.server_time == last.total_duration / 1e9
    assert record.outcome is Outcome.COMPLETED and record.parse_errors == 0
    assert record.provider == "ollama" and record.operation == ("chat" if api == "chat" else "text_completion")
    assert record.request_model == record.response_model == model == last.model
    assert record.streamed is stream and record.request_stream is stream and served.stream is stream
    assert record.url_path == f"/api/{api}" and served.api == f"ollama-{api}"
    assert (record.first_token_at is not None) is stream
    if stream:  # the first content line, not the headers
        assert record.headers_at is not None and record.first_token_at is not None
        assert record.first_token_at >= record.headers_at


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_line_is_raised_by_the_client_and_recorded_as_a_server_error(
    sim: Simulator, cap: Capture, mode: Mode
) -> None:
    model = fresh_model("llama-test")
    with pytest.raises(ollama.ResponseError) as raised:
        _client_call(sim, mode, "chat", True, Scenario(tokens=5, error_event_at=2), model)
    assert raised.value.status_code == -1  # in-band: no status of its own
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.SERVER_ERROR and record.error_type == "error" and record.status_code == 200
    assert record.first_token_at is not None and record.usage.output_tokens is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_status_is_raised_by_the_client_and_recorded_as_rejected(
    sim: Simulator, cap: Capture, mode: Mode
) -> None:
    model = fresh_model("llama-test")
    with pytest.raises(ollama.ResponseError) as raised:
        _client_call(sim, mode, "generate", True, Scenario(fail=1, fail_status=404), model)
    assert raised.value.status_code == 404 and raised.value.error == "Not found (simulated)"
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.REJECTED and record.error_type == "404" and record.status_code == 404
    assert "Not found" not in repr(record)


class _ToSimulator(httpx.HTTPTransport):
    """Sends every request to the simulator's port whatever its URL's port: the client (and llmtap's hook,
    above the transport) see the URL the app gave, the bytes are the simulator's."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self._port = port

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(port=self._port)
        return super().handle_request(request)


def test_ollamas_default_port_is_observed_without_configuration(sim: Simulator) -> None:
    """``http://127.0.0.1:11434`` (the client's default host) needs no ``base_urls``; the same client on
    another port is not observed (the control: configuration, not the client, decides)."""
    port = int(sim.base_url.rsplit(":", 1)[1])
    sim.clear()
    with capture(llmtap.Settings()) as cap:
        # the port not observed first: had it been, its record would have come before the other's
        for host in (sim.base_url, "http://127.0.0.1:11434"):
            with ollama.Client(host=host, transport=_ToSimulator(port)) as client:
                parts = list(client.chat(model=fresh_model("llama-test"), stream=True))
                assert "".join(p.message.content or "" for p in parts) == Scenario().expected_text()
        assert len(sim.wait_served(2)) == 2  # both were served, one was observed
        cap.wait(1)
        (record,) = cap.records
    assert record.server_port == 11434 and record.provider == "ollama" and record.outcome is Outcome.COMPLETED
