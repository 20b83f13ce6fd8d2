"""The real ``groq``, ``mistralai`` and ``cohere`` SDKs against the simulator, sync and async, streaming
and not: usage, stop reasons, TTFT and how each links its retries. Every outcome class, for these SDKs
too, is in ``test_sdk_cases.py``; both drive them through ``llmtap._drive``.

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

import pytest

from llmtap import Outcome, _drive
from llmtap._core.record import FAILED
from llmtap._drive import Action, Mode, fresh_model, served_for
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture

SECRET = "sk-llmtap-test-secret-0123456789"
SDKS = ["groq", "mistral", "cohere"]
MODES = ["sync", "async"]
PROVIDER = {"groq": "openai", "mistral": "openai", "cohere": "cohere"}  # the wire format's (simulator host)
API = {"groq": "openai-chat", "mistral": "openai-chat", "cohere": "cohere-chat"}
PATH = {"groq": "/openai/v1/chat/completions", "mistral": "/v1/chat/completions", "cohere": "/v2/chat"}
STOP = {"groq": "stop", "mistral": "stop", "cohere": "COMPLETE"}


def drive(
    sim: Simulator, sdk: str, mode: Mode, action: Action, scenario: Scenario, *, retries: int = 0,
    timeout: float = 10.0,
) -> tuple[str, list[str], BaseException | None]:  # fmt: skip
    """One SDK call; returns the model name (unique to it), the text pieces and the exception seen."""
    model = fresh_model(f"{sdk}-test")
    result = _drive.drive(sdk, sim.base_url, action, mode=mode, model=model, api_key=SECRET, max_retries=retries,
                          timeout=timeout, headers=scenario.headers())  # fmt: skip
    return model, result.pieces, result.error


def check(cap: Capture, sim: Simulator, sdk: str, model: str, expected: list[Outcome], calls: int = 1) -> list[Served]:
    """What every call must satisfy: one record per served attempt, the truth of the simulator."""
    cap.wait(len(expected), calls=calls)
    served = served_for(sim, model, len(expected))
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
    spans = sorted(cap.spans, key=lambda s: s.start_time or 0)
    assert [s.attributes["llmtap.outcome"] if s.attributes else None for s in spans] == [o.value for o in expected]
    assert [s.status.status_code.name == "ERROR" for s in spans] == [o in FAILED for o in expected]
    assert cap.sample("llmtap_streams_in_flight") == 0
    return served


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize("action", ["create", "stream"])
def test_completed_tokens_stop_reason_and_ttft(
    sim: Simulator, cap: Capture, sdk: str, mode: Mode, action: Action
) -> None:
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
        # causal, and within the attempt (no fixed tolerance: `make test` runs on busy machines; the lag's
        # budget is a `budget` test, tests/test_ttft_accuracy.py)
        assert served.first_token_sent_at <= record.first_token_at <= record.ended_at
    else:
        assert record.first_token_at is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
def test_retries_are_one_call(sim: Simulator, cap: Capture, sdk: str, mode: Mode) -> None:
    """Each SDK's retries are attempts of one logical call (its retry method is hooked): the simulator's
    ``fail=1`` fails the first (Groq numbers it in ``x-stainless-retry-count``; for Mistral and Cohere,
    which do not, the simulator counts the requests of the call's model), the retry is answered."""
    scenario = Scenario(tokens=3, fail=1, fail_status=503, retry_after=0.01)
    action: Action = "stream" if sdk != "cohere" else "create"  # Cohere's stream() never retries
    model, _, error = drive(sim, sdk, mode, action, scenario, retries=1)
    assert error is None
    check(cap, sim, sdk, model, [Outcome.REJECTED, Outcome.COMPLETED])
    attempts = 2
    assert [r.resend_count for r in cap.records] == list(range(attempts))
    (call,) = cap.calls
    assert call.attempts == attempts
    assert cap.sample("llmtap_retries_total", reason="503") == attempts - 1
