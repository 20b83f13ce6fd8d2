"""LiteLLM as shipped (the SDK most gateways and DSPy sit on), against the simulator: its ``anthropic/`` and
``openai/`` providers, sync and async, streamed and not.

LiteLLM stays on legacy httpx (not httpx2). Its async calls go through an ``httpx.AsyncClient`` whose
transport is LiteLLM's own aiohttp one, so one request passes two hooked layers: the httpx hook above
observes it and the aiohttp hook below passes it through (the shells' "already observing" flag), so each
attempt is counted once (``tests/test_aiohttp.py`` has the control that the aiohttp hook would see it too).
With LiteLLM's aiohttp transport disabled the httpx hook alone sees it. LiteLLM's own retries
(``num_retries``) send a fresh request with no retry header: each is its own attempt. It stops reading an
Anthropic stream at the stop reason (``message_delta``), before ``message_stop``: ``completed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from llmtap import Outcome
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture
from tests.support.layers import every_layer_observes

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price map at import
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    litellm = pytest.importorskip("litellm")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

MODELS = {"anthropic": "anthropic/claude-test", "openai": "openai/gpt-test"}


@pytest.fixture(scope="module", autouse=True)
def _litellm_clients_let_go() -> Iterator[None]:
    """LiteLLM caches its clients (an aiohttp session per event loop) and never closes them; each test's
    ``asyncio.run`` leaves one behind. At the module's end they are dropped and collected here, where their
    unclosed sockets' ``ResourceWarning`` is expected, not in a later test's collection (the suite freezes
    what is alive before each test, so they would otherwise surface in the soak's ``gc.unfreeze()``)."""
    yield
    litellm.in_memory_llm_clients_cache.flush_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.unfreeze()
        gc.collect()


@pytest.fixture(autouse=True)
def _quiet_litellm() -> Iterator[None]:
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    yield
    litellm.disable_aiohttp_transport = False


def _call(sim: Simulator, provider: str, mode: str, stream: bool, scenario: Scenario, **extra: Any) -> None:
    """One LiteLLM call, read to its end (a stream: every chunk)."""
    base = sim.base_url + ("/v1" if provider == "openai" else "")
    kwargs: dict[str, Any] = {
        "model": MODELS[provider], "api_base": base, "api_key": "sk-test", "max_tokens": 16, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}], "extra_headers": scenario.headers(), **extra,
    }  # fmt: skip
    if mode == "sync":
        response = litellm.completion(**kwargs)
        if stream:
            for _ in response:
                pass
        return

    async def go() -> None:
        response = await litellm.acompletion(**kwargs)
        if stream:
            async for _ in response:
                pass

    asyncio.run(go())


PATHS = [("sync", "httpx"), ("async", "aiohttp"), ("async", "httpx")]
"""LiteLLM's HTTP paths: sync over httpx; async over its aiohttp transport under httpx (the default), or
over httpx alone (``litellm.disable_aiohttp_transport``)."""


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize(("mode", "transport"), PATHS, ids=["-".join(p) for p in PATHS])
@pytest.mark.parametrize("provider", list(MODELS))
def test_each_attempt_is_counted_once_and_read_right(
    sim: Simulator, cap: Capture, provider: str, mode: str, stream: bool, transport: str
) -> None:
    litellm.disable_aiohttp_transport = transport == "httpx"
    _call(sim, provider, mode, stream, Scenario(tokens=4, ttft=0.02, gap=0.002, input=30))
    (served,) = sim.wait_served(1)
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome is Outcome.COMPLETED
    assert record.request_id == served.request_id
    assert record.usage.input_tokens == 30 or (provider == "openai" and stream)  # no usage unless asked
    if not (provider == "openai" and stream):
        assert record.usage.output_tokens == 4
    assert record.stop_reason == ("end_turn" if provider == "anthropic" else "stop")
    if stream:
        assert record.streamed and record.time_to_first_token is not None
        assert served.first_token_sent_at is not None
        assert record.time_to_first_token >= served.first_token_sent_at - served.received_at  # causal


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_litellm_retries_are_attempts_of_their_own(sim: Simulator, cap: Capture, mode: str) -> None:
    """``num_retries=2`` against a server that refuses every attempt: three attempts served, three
    ``rejected`` recorded."""
    with pytest.raises(Exception):  # noqa: B017 (LiteLLM's own exception classes, whatever it wraps)
        _call(sim, "anthropic", mode, False, Scenario(fail=9, fail_status=500), num_retries=2)
    served = sim.wait_served(3)
    cap.wait(3)
    assert len(served) == 3
    assert [r.outcome for r in cap.records] == [Outcome.REJECTED] * 3
    assert [r.status_code for r in cap.records] == [500] * 3


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_litellm_retries_get_past_the_simulators_failures(sim: Simulator, cap: Capture, mode: str) -> None:
    """LiteLLM numbers no attempt in a header, so the simulator counts them: ``fail=1`` with ``num_retries=2``
    is one 500, then the answer (the new-user trial's 3 x 529)."""
    _call(sim, "anthropic", mode, False, Scenario(fail=1, fail_status=500), num_retries=2)
    cap.wait(2)
    assert [s.status for s in sim.wait_served(2)] == [500, 200]
    assert [r.outcome for r in cap.records] == [Outcome.REJECTED, Outcome.COMPLETED]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_cut_before_its_stop_reason_stays_a_service_failure(sim: Simulator, cap: Capture, mode: str) -> None:
    """The server drops the connection after two deltas: whatever error LiteLLM wraps it in (or none), the
    attempt is a connection error or incomplete, never ``completed`` or a client abort."""
    with contextlib.suppress(Exception):
        _call(sim, "anthropic", mode, True, Scenario(tokens=6, drop_at=2))
    cap.wait(1)
    (record,) = cap.records
    assert record.outcome in (Outcome.CONNECTION_ERROR, Outcome.INCOMPLETE)
    assert record.stop_reason is None


@pytest.mark.parametrize(("transport", "layers"), [("aiohttp", 2), ("httpx", 1)])
def test_the_async_path_passes_two_hooked_layers_and_the_outer_one_owns_it(
    sim: Simulator, cap: Capture, monkeypatch: pytest.MonkeyPatch, transport: str, layers: int
) -> None:
    """The control of the counts above: without the flag, LiteLLM's default async path is observed by both
    the httpx hook and the aiohttp hook under it (two records for one request served), its httpx-only path
    by one."""
    every_layer_observes(monkeypatch)
    litellm.disable_aiohttp_transport = transport == "httpx"
    _call(sim, "anthropic", "async", False, Scenario(tokens=2))
    assert len(sim.wait_served(1)) == 1
    cap.wait(layers)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED] * layers
