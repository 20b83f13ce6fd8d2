"""The real ``groq``, ``mistralai`` and ``cohere`` SDKs against the simulator, sync and async, streaming
and not, through every outcome class.

How each sends and retries (read in the installed packages):

* ``groq`` (Stainless, like the OpenAI SDK): ``httpx``; Chat Completions at ``/openai/v1/chat/completions``
  on ``https://api.groq.com``; retries inside ``SyncAPIClient.request()`` (hooked: one logical call)
  with ``x-stainless-retry-count``; a stream's usage in its last chunk's ``x_groq.usage``.
* ``mistralai`` (Speakeasy, 3.x): ``httpx2``; ``/v1/chat/completions`` on ``https://api.mistral.ai``;
  retries only with a ``retry_config``, inside ``BaseSDK.do_request()`` (hooked); no retry header; a
  stream's usage in its finishing chunk, unasked.
* ``cohere`` (Fern, 7.x): ``httpx``; Chat v2 at ``/v2/chat`` on ``https://api.cohere.com``, its own SSE
  events (``_providers/cohere.py``); ``HttpClient.request()`` retries by calling itself (hooked: the outer
  call is the logical call), ``stream()`` never retries; no retry header.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from typing import Any

import cohere
import groq
import httpx
import httpx2
import pytest
from mistralai.client import Mistral
from mistralai.client.utils import BackoffStrategy, RetryConfig

from llmtap import Outcome
from llmtap._core.record import FAILED
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture

SECRET = "sk-llmtap-test-secret-0123456789"
SDKS = ["groq", "mistral", "cohere"]
MODES = ["sync", "async"]
PROVIDER = {"groq": "openai", "mistral": "openai", "cohere": "cohere"}  # the wire format's (simulator host)
API = {"groq": "openai-chat", "mistral": "openai-chat", "cohere": "cohere-chat"}
PATH = {"groq": "/openai/v1/chat/completions", "mistral": "/v1/chat/completions", "cohere": "/v2/chat"}
STOP = {"groq": "stop", "mistral": "stop", "cohere": "COMPLETE"}
_serial = itertools.count()
MESSAGES = [{"role": "user", "content": "hi"}]


class Driver:
    """One SDK client, sync or async: create / stream / break-and-close, with the scenario's header."""

    def __init__(self, sdk: str, mode: str, sim: Simulator, scenario: Scenario, retries: int, timeout: float) -> None:
        self.sdk, self.mode, self.headers = sdk, mode, scenario.headers()
        self.retries = retries
        # each SDK's own HTTP client package, made here and closed by :meth:`close` / :meth:`_aclose`
        package = httpx2 if sdk == "mistral" else httpx
        self.http: Any = (package.AsyncClient if mode == "async" else package.Client)(timeout=timeout)
        if sdk == "groq":
            cls: Any = groq.AsyncGroq if mode == "async" else groq.Groq
            self.client = cls(
                api_key=SECRET,
                base_url=sim.base_url,
                max_retries=retries,
                timeout=timeout,
                default_headers=self.headers,
                http_client=self.http,
            )
        elif sdk == "mistral":
            retry = (
                RetryConfig("backoff", BackoffStrategy(5, 10, 1.5, 100), retry_connection_errors=False)
                if retries
                else None
            )
            clients = {"async_client": self.http} if mode == "async" else {"client": self.http}
            self.client = Mistral(
                api_key=SECRET,
                server_url=sim.base_url,
                timeout_ms=int(timeout * 1000),
                retry_config=retry,
                **clients,
            )
        else:
            cls = cohere.AsyncClientV2 if mode == "async" else cohere.ClientV2
            self.client = cls(api_key=SECRET, base_url=sim.base_url, timeout=timeout, httpx_client=self.http)

    # each returns the text pieces the app received
    def run(self, action: str, model: str) -> list[str]:
        if self.mode == "sync":
            return self._sync(action, model)
        return asyncio.run(self._async(action, model))

    def _sync(self, action: str, model: str) -> list[str]:
        got: list[str] = []
        if action == "create":
            return [self._text(self._create(model))]
        stream = self._open_stream(model)
        for event in self._iterate(stream):
            piece = self._piece(event)
            if piece is not None:
                got.append(piece)
            if action == "close" and len(got) == 2:
                break
        if action == "close":
            stream.close() if self.sdk != "mistral" else stream.__exit__(None, None, None)
        return got

    async def _async(self, action: str, model: str) -> list[str]:
        got: list[str] = []
        try:
            if action == "create":
                return [self._text(await self._create(model))]
            stream = await self._open_stream(model) if self.sdk != "cohere" else self._open_stream(model)
            async for event in stream:
                piece = self._piece(event)
                if piece is not None:
                    got.append(piece)
                if action == "close" and len(got) == 2:
                    break
            if action == "close":
                await (stream.aclose() if self.sdk == "cohere" else stream.close())
            return got
        finally:
            await self._aclose()

    def _create(self, model: str) -> Any:
        async_ = self.mode == "async"
        if self.sdk == "groq":
            return self.client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=64)
        if self.sdk == "mistral":
            call = self.client.chat.complete_async if async_ else self.client.chat.complete
            return call(model=model, messages=MESSAGES, max_tokens=64, http_headers=self.headers)
        return self.client.chat(model=model, messages=MESSAGES, max_tokens=64, request_options=self._cohere_options())

    def _open_stream(self, model: str) -> Any:
        async_ = self.mode == "async"
        if self.sdk == "groq":
            return self.client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=64, stream=True)
        if self.sdk == "mistral":
            call = self.client.chat.stream_async if async_ else self.client.chat.stream
            return call(model=model, messages=MESSAGES, max_tokens=64, http_headers=self.headers)
        return self.client.chat_stream(
            model=model, messages=MESSAGES, max_tokens=64, request_options=self._cohere_options()
        )

    def _cohere_options(self) -> Any:
        return {"additional_headers": self.headers, "max_retries": self.retries}

    def _iterate(self, stream: Any) -> Any:
        return stream

    def _piece(self, event: Any) -> str | None:
        if self.sdk == "groq":
            return (event.choices[0].delta.content or None) if event.choices else None
        if self.sdk == "mistral":
            choices = event.data.choices
            return choices[0].delta.content or None if choices else None
        if event.type == "content-delta":
            return str(event.delta.message.content.text)
        return None

    def _text(self, response: Any) -> str:
        if self.sdk == "cohere":
            return str(response.message.content[0].text)
        return str(response.choices[0].message.content)

    def close(self) -> None:
        if self.mode == "sync":
            self.http.close()

    async def _aclose(self) -> None:
        await self.http.aclose()


def drive(
    sim: Simulator,
    sdk: str,
    mode: str,
    action: str,
    scenario: Scenario,
    *,
    retries: int = 0,
    timeout: float = 10.0,
) -> tuple[str, list[str], BaseException | None]:
    """One SDK call; returns the model name (unique to it), the text pieces and the exception seen."""
    model = f"{sdk}-test-{next(_serial)}"
    driver = Driver(sdk, mode, sim, scenario, retries, timeout)
    try:
        return model, driver.run(action, model), None
    except Exception as exc:
        return model, [], exc
    finally:
        driver.close()
        gc.collect()


def _served(sim: Simulator, model: str, count: int) -> list[Served]:
    total = count
    while True:
        snapshot = sim.wait_served(total)
        mine = [s for s in snapshot if s.model == model]
        if len(mine) >= count:
            return mine
        total = len(snapshot) + 1


def check(cap: Capture, sim: Simulator, sdk: str, model: str, expected: list[Outcome], calls: int = 1) -> list[Served]:
    """What every call must satisfy: one record per served attempt, the truth of the simulator."""
    cap.wait(len(expected), calls=calls)
    served = _served(sim, model, len(expected))
    assert [r.outcome for r in cap.records] == expected
    assert len(served) == len(expected)
    assert len(cap.calls) == calls
    for record, seen in zip(cap.records, served, strict=True):
        assert record.provider == PROVIDER[sdk]
        assert record.request_model == model
        assert record.request_stream is seen.stream or (record.request_stream is None and not seen.stream)
        assert record.status_code == seen.status
        assert record.url_path == PATH[sdk] == seen.path
        assert seen.api == API[sdk] and seen.auth_present
        assert SECRET not in repr(record)
    spans = sorted(cap.spans(), key=lambda s: s.start_time or 0)
    assert [s.attributes["llmtap.outcome"] if s.attributes else None for s in spans] == [o.value for o in expected]
    assert [s.status.status_code.name == "ERROR" for s in spans] == [o in FAILED for o in expected]
    assert cap.sample("llmtap_streams_in_flight") == 0
    return served


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize("action", ["create", "stream"])
def test_completed_tokens_stop_reason_and_ttft(sim: Simulator, cap: Capture, sdk: str, mode: str, action: str) -> None:
    scenario = Scenario(tokens=6, ttft=0.03, gap=0.003, input=40, cache_read=10)
    model, got, error = drive(sim, sdk, mode, action, scenario)
    assert error is None, repr(error)
    assert "".join(got) == scenario.expected_text()
    (served,) = check(cap, sim, sdk, model, [Outcome.COMPLETED])
    (record,) = cap.records
    assert record.usage.input_tokens == served.input_tokens == 50  # the input includes the cached tokens
    assert record.usage.output_tokens == served.output_tokens == 6
    assert record.usage.cache_read_tokens == 10
    assert record.stop_reasons == (STOP[sdk],)
    assert record.response_id is not None
    if action == "stream":
        assert served.first_token_sent_at is not None and record.first_token_at is not None
        assert 0 <= record.first_token_at - served.first_token_sent_at < 0.02  # causal and close
    else:
        assert record.first_token_at is None


CASES: list[tuple[str, str, Scenario, Outcome]] = [
    ("error_event", "stream", Scenario(tokens=5, error_event_at=2), Outcome.SERVER_ERROR),
    ("503", "stream", Scenario(fail=1, fail_status=503), Outcome.REJECTED),
    ("429_unary", "create", Scenario(fail=1, fail_status=429), Outcome.REJECTED),
    ("dropped", "stream", Scenario(tokens=5, drop_at=2), Outcome.CONNECTION_ERROR),
    ("incomplete", "stream", Scenario(tokens=4, no_stop=True), Outcome.INCOMPLETE),
    ("timeout", "stream", Scenario(tokens=4, stall_at=1, stall=1.0), Outcome.TIMEOUT),
    ("close", "close", Scenario(tokens=40, gap=0.002), Outcome.CLIENT_CLOSED),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize(("name", "action", "scenario", "expected"), CASES, ids=[c[0] for c in CASES])
def test_outcome(
    sim: Simulator, cap: Capture, sdk: str, mode: str, name: str, action: str, scenario: Scenario, expected: Outcome
) -> None:
    model, got, error = drive(sim, sdk, mode, action, scenario, timeout=0.3 if name == "timeout" else 10.0)
    if expected is Outcome.CLIENT_CLOSED:
        assert error is None and got == ["tok0 ", "tok1 "], repr(error)
    elif name in ("incomplete", "error_event") and error is None:
        assert name == "incomplete" or sdk in ("cohere", "mistral"), f"{sdk} raised nothing on an error event"
    else:
        assert error is not None or name == "incomplete"
    check(cap, sim, sdk, model, [expected])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
def test_retries_are_one_call(sim: Simulator, cap: Capture, sdk: str, mode: str) -> None:
    """Each SDK's retries are attempts of one logical call (its retry method is hooked). Groq says
    which attempt it sends (``x-stainless-retry-count``), so the simulator's ``fail=1`` fails the first
    only; Mistral and Cohere send no such header, so every attempt fails."""
    scenario = Scenario(tokens=3, fail=1, fail_status=503, retry_after=0.01)
    action = "stream" if sdk != "cohere" else "create"  # Cohere's stream() never retries
    model, got, error = drive(sim, sdk, mode, action, scenario, retries=1)
    if sdk == "groq":
        assert error is None and "".join(got) == "tok0 tok1 tok2 "
        check(cap, sim, sdk, model, [Outcome.REJECTED, Outcome.COMPLETED])
        attempts = 2
    elif sdk == "cohere":
        assert error is not None
        check(cap, sim, sdk, model, [Outcome.REJECTED] * 2)
        attempts = 2
    else:  # Mistral retries until its max_elapsed_time (100 ms), each wait the server's retry-after-ms
        assert error is not None
        cap.wait(1, calls=1)
        attempts = len(cap.records)
        assert attempts >= 2
        check(cap, sim, sdk, model, [Outcome.REJECTED] * attempts)
    assert [r.resend_count for r in cap.records] == list(range(attempts))
    (call,) = cap.calls
    assert call.attempts == attempts
    assert cap.sample("llmtap_retries_total", reason="503") == attempts - 1
