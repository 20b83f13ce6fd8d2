"""The simulator knobs the probe relies on: ``fill``, ``count_input``, ``jitter``, ``prefill`` and the
per-token schedule, checked with the real SDKs against what the simulator says it did."""

from __future__ import annotations

import anthropic
import openai
import pytest

from llmtap.simulator import Scenario, Simulator


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
