"""Exemplars: from a latency histogram to the attempt's trace (issue 17 item 2).

A real Prometheus with exemplar storage scrapes llmtap's ``/metrics`` (OpenMetrics, negotiated by
Prometheus' Accept header) while the real ``anthropic`` SDK streams from the simulator; the trace ids
``/api/v1/query_exemplars`` returns must be ones llmtap exported as spans. The OpenTelemetry path is
checked the same way through the SDK's exemplar filter.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData

import llmtap
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture
from tests.support.deploy import wait_until
from tests.support.prom import require
from tests.support.promlive import http_get, prometheus_command, start, stop_all, wait_for

PARAMS = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def _drive(sim: Simulator, n: int) -> None:
    client = anthropic.Anthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    for _ in range(n):
        for _ in client.messages.create(stream=True, extra_headers=Scenario(tokens=5).headers(), **PARAMS):  # type: ignore[call-overload]
            pass
    client.close()


def _span_trace_ids(cap: Capture) -> set[str]:
    return {format(span.context.trace_id, "032x") for span in cap.spans if span.context is not None}


@pytest.fixture
def tapped(sim: Simulator) -> Iterator[tuple[Capture, InMemoryMetricReader]]:
    sim.clear()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with capture(llmtap.Settings(base_urls=(sim.base_url,), metrics_port=0), meter_provider=provider) as cap:
        yield cap, reader
    provider.shutdown()


def test_openmetrics_exposition_carries_the_spans_trace_ids(
    sim: Simulator, tapped: tuple[Capture, InMemoryMetricReader]
) -> None:
    cap, _ = tapped
    _drive(sim, 3)
    assert cap.tap.metrics_address is not None
    host, port = cap.tap.metrics_address
    request = urllib.request.Request(
        f"http://{host}:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    exemplar_ids = {
        line.split('trace_id="', 1)[1][:32]
        for line in text.splitlines()
        if line.startswith(
            ("gen_ai_client_operation_duration_seconds_bucket", "llmtap_time_to_first_token_seconds_bucket")
        )
        and "# {" in line
    }
    assert exemplar_ids and exemplar_ids <= _span_trace_ids(cap)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:  # the classic format
        assert "trace_id" not in response.read().decode()  # control: exemplars only where the format has them


def test_no_exemplars_without_spans(sim: Simulator) -> None:
    sim.clear()
    with capture(llmtap.Settings(base_urls=(sim.base_url,), traces=False)) as cap:
        _drive(sim, 1)
        assert cap.records[0].span_context is None
        assert cap.sample("llmtap_attempts_total") == 1  # control: the attempt was recorded


def _otel_exemplar_ids(data: MetricsData | None, name: str) -> set[str]:
    assert data is not None
    return {
        format(exemplar.trace_id, "032x")
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
        for exemplar in point.exemplars
        if exemplar.trace_id
    }


def test_the_otel_path_samples_exemplars_from_the_attempts_span(
    sim: Simulator, tapped: tuple[Capture, InMemoryMetricReader]
) -> None:
    cap, reader = tapped
    _drive(sim, 3)
    data = reader.get_metrics_data()
    ids = _otel_exemplar_ids(data, "gen_ai.client.operation.duration")
    assert ids and ids <= _span_trace_ids(cap)
    assert _otel_exemplar_ids(data, "llmtap.call.duration") <= _span_trace_ids(cap)


def test_a_real_prometheus_stores_the_exemplars(
    sim: Simulator, tapped: tuple[Capture, InMemoryMetricReader], tmp_path: Path
) -> None:
    binary = require("prometheus")
    cap, _ = tapped
    assert cap.tap.metrics_address is not None
    target = "{}:{}".format(*cap.tap.metrics_address)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "llmtap", "static_configs": [{"targets": [target]}]}],
    }
    args, url = prometheus_command(binary, config, tmp_path, "--enable-feature=exemplar-storage", "--log.level=warn")
    proc = start("prometheus", args, tmp_path / "prometheus.log")
    since = time.time() - 60

    def exemplars() -> set[str]:
        query = urllib.parse.urlencode(
            {"query": "gen_ai_client_operation_duration_seconds_bucket", "start": since, "end": time.time() + 60}
        )
        with urllib.request.urlopen(f"{url}/api/v1/query_exemplars?{query}", timeout=5) as response:
            body = json.loads(response.read())
        return {e["labels"]["trace_id"] for series in body["data"] for e in series["exemplars"]}

    try:
        wait_for("prometheus to be ready", lambda: http_get(url + "/-/ready")[0] == 200, 60, proc)
        _drive(sim, 3)
        wait_until(lambda: bool(exemplars()), 30, "exemplars in Prometheus")
        assert exemplars() <= _span_trace_ids(cap)
    finally:
        stop_all([proc])
