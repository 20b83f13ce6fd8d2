"""``llmtap.testing``, the public helpers the suite itself is built on: ``capture()`` leaves nothing behind,
``wait`` returns when the records arrive and says what arrived when they do not, ``sample`` sums by labels."""

from __future__ import annotations

import threading

import httpx2
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import llmtap
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import RecordingSink, capture, sample
from tests.support.records import attempt_record

BODY = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}


def test_wait_returns_when_the_records_arrive_from_another_thread() -> None:
    sink = RecordingSink()
    timer = threading.Timer(0.05, sink.end, args=(attempt_record(), True))
    timer.start()
    sink.wait(1, timeout=10)
    timer.join()
    assert len(sink.records) == 1


def test_wait_says_what_arrived_when_it_times_out() -> None:
    sink = RecordingSink()
    sink.end(attempt_record(), True)
    with pytest.raises(TimeoutError, match="expected 2 attempts / 1 calls, got 1 / 0"):
        sink.wait(2, calls=1, timeout=0.05)


def test_sample_sums_the_matching_series_and_capture_leaves_nothing_behind(sim: Simulator) -> None:
    sim.clear()
    with capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap, httpx2.Client() as client:
        for model in ("a", "a", "b"):
            body = {**BODY, "model": model}
            client.post(sim.base_url + "/v1/messages", json=body, headers=Scenario(tokens=1).headers()).read()
        cap.wait(3)
        assert cap.sample("llmtap_attempts_total") == 3
        assert cap.sample("llmtap_attempts_total", gen_ai_request_model="a") == 2
        assert cap.sample("llmtap_attempts_total", gen_ai_request_model="c") == 0.0
        # the same sum over a registry, its families and a scrape's text (what another process exports)
        scraped = generate_latest(cap.registry).decode()
        for source in (cap.registry, cap.registry.collect(), text_string_to_metric_families(scraped), scraped):
            assert sample(source, "llmtap_attempts_total", gen_ai_request_model="a") == 2
        assert sample(scraped, "llmtap_attempts_total") == 3 and sample(scraped, "llmtap_attempts") == 0.0
    with httpx2.Client() as client:  # after the block: nothing observes, and a new capture may start
        client.post(sim.base_url + "/v1/messages", json=BODY, headers=Scenario(tokens=1).headers()).read()
    with capture(llmtap.Settings(base_urls=(sim.base_url,))) as again:
        assert again.records == [] and again.sample("llmtap_attempts_total") == 0
    assert len(sim.wait_served(4)) == 4  # the control: the request after the block was served
    assert len(cap.records) == 3


def test_capture_reads_as_it_is_used(sim: Simulator) -> None:
    """``records``, ``calls`` and ``spans`` are all properties (``print(cap.spans)`` shows spans, not a bound
    method); the repr says what was captured; ``wait`` documents itself for ``help()``."""
    from llmtap.testing import Capture

    with capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap, httpx2.Client() as client:
        assert repr(cap) == "<llmtap.testing.Capture: 0 records, 0 calls, 0 spans>"  # control: before any request
        client.post(sim.base_url + "/v1/messages", json=BODY, headers=Scenario(tokens=1).headers()).read()
        cap.wait(1)
        assert isinstance(cap.spans, tuple) and len(cap.spans) == len(cap.records) == 1
        assert cap.spans[0].name.startswith("chat ") and "bound method" not in str(cap.spans)
        assert repr(cap) == "<llmtap.testing.Capture: 1 records, 1 calls, 1 spans>"
    for name in ("records", "calls", "spans"):
        assert isinstance(getattr(Capture, name), property), name
    assert Capture.wait.__doc__ and "TimeoutError" in Capture.wait.__doc__


def test_sample_takes_labels_named_like_its_own_parameters() -> None:
    """``source`` and ``name`` are positional-only: ``llmtap_server_reported_seconds`` has a ``source`` label."""
    scraped = (
        "# TYPE x_seconds histogram\n"
        'x_seconds_count{source="a",name="n"} 2.0\n'
        'x_seconds_count{source="b",name="n"} 3.0\n'
        'x_seconds_sum{source="a",name="n"} 1.0\n'
    )
    assert sample(scraped, "x_seconds_count", source="b") == 3.0
    assert sample(scraped, "x_seconds_count", name="n") == 5.0  # positive control: both
