"""examples/collector: what can be checked without a Collector binary.

* The Collector configs parse as YAML and are wired: every pipeline component is defined, every
  defined component is used, metrics go OTLP in -> ``prometheus`` / ``prometheusremotewrite`` out with
  the name-suffix and label settings the dashboards rely on, traces go to an OTLP exporter, and the
  OTLP/HTTP port is the one the app sends to. (No Collector, and no schema for its configuration,
  is available here: the names the Collector would produce are what tests/test_prometheus_live.py
  proves through the same translation rules.)
* ``prometheus.yml`` passes ``promtool check config`` (which also checks the rule file it loads).
* The app side runs for real: ``examples/collector/app.py``'s ``setup()`` against an OTLP/HTTP
  receiver on 127.0.0.1 delivers llmtap's metrics and spans, with the resource that becomes the
  ``job`` and ``instance`` labels.
"""

from __future__ import annotations

import subprocess
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import anthropic
import pytest
import yaml

import llmtap
from llmtap.simulator import Simulator
from tests.support.otlp import Receiver, receiver, value_of
from tests.support.prom import ROOT, require
from tests.support.scripts import load_script

__all__ = ["receiver"]  # the fixture

EXAMPLE = ROOT / "examples" / "collector"
CONFIGS = ("otelcol.yaml", "otelcol-remote-write.yaml")
METRICS_EXPORTERS = {"prometheus", "prometheusremotewrite"}
TRACE_EXPORTERS = {"otlp", "otlphttp"}


def load_app() -> ModuleType:
    return load_script("examples/collector/app.py", "llmtap_example_collector_app")


def kind(component_id: str) -> str:
    """``otlp/traces`` -> ``otlp`` (the Collector's ``type[/name]`` ids)."""
    return component_id.split("/", 1)[0]


@pytest.mark.parametrize("name", CONFIGS)
def test_collector_config_is_wired(name: str) -> None:
    config: dict[str, Any] = yaml.safe_load((EXAMPLE / name).read_text())
    sections = ("receivers", "processors", "exporters")
    pipelines: dict[str, dict[str, list[str]]] = config["service"]["pipelines"]
    used: dict[str, set[str]] = {s: set() for s in sections}
    for pipeline_id, pipeline in pipelines.items():
        assert kind(pipeline_id) in ("metrics", "traces", "logs"), pipeline_id
        assert pipeline.get("receivers") and pipeline.get("exporters"), pipeline_id
        for section in sections:
            for component in pipeline.get(section, []):
                assert component in config[section], f"{pipeline_id}: {section} {component} is not defined"
                used[section].add(component)
    for section in sections:
        assert set(config.get(section) or {}) == used[section], f"{section} defined but unused"

    metrics, traces = pipelines["metrics"], pipelines["traces"]
    assert [kind(r) for r in metrics["receivers"]] == ["otlp"]
    assert [kind(r) for r in traces["receivers"]] == ["otlp"]
    (metrics_exporter,) = metrics["exporters"]
    assert kind(metrics_exporter) in METRICS_EXPORTERS
    assert all(kind(e) in TRACE_EXPORTERS for e in traces["exporters"])
    exporter = config["exporters"][metrics_exporter]
    # what the dashboards rely on: suffixed names, job/instance from the resource, no extra labels
    assert exporter.get("add_metric_suffixes", True) is True
    assert not (exporter.get("resource_to_telemetry_conversion") or {}).get("enabled", False)
    # the batch processor comes last, after the memory limiter (the Collector's recommendation)
    for pipeline in pipelines.values():
        processors = [kind(p) for p in pipeline.get("processors", [])]
        assert processors == ["memory_limiter", "batch"]
    # the app's default endpoint is the receiver's OTLP/HTTP port
    http_endpoint = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    default_endpoint = load_app().setup.__defaults__[0]
    assert http_endpoint.rsplit(":", 1)[1] == str(urlsplit(default_endpoint).port) == "4318"


def test_prometheus_config_passes_promtool() -> None:
    tool = require("promtool")
    result = subprocess.run(
        [tool, "check", "config", str(EXAMPLE / "prometheus.yml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "alerts.yaml" in result.stdout + result.stderr  # it checked the rule file too
    config = yaml.safe_load((EXAMPLE / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["honor_labels"] is True  # keeps the Collector's job / instance labels
    collector = yaml.safe_load((EXAMPLE / "otelcol.yaml").read_text())
    port = collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert job["static_configs"][0]["targets"][0].endswith(":" + port)


def test_app_side_sends_metrics_and_spans(sim: Simulator, receiver: Receiver) -> None:
    app = load_app()
    sim.clear()
    meter_provider, tracer_provider = app.setup(
        receiver.endpoint, service="example-app", settings=llmtap.Settings(base_urls=(sim.base_url,))
    )
    try:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="not-needed", max_retries=0)
        for _ in client.messages.create(
            model="claude-example", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass
        client.close()
        sim.wait_served(1)
    finally:
        llmtap.uninstrument()
        meter_provider.shutdown()
        tracer_provider.shutdown()
    (metrics, *_) = receiver.metrics()[-1:] or pytest.fail("no metrics received")
    (rm,) = metrics.resource_metrics
    resource = {kv.key: value_of(kv.value) for kv in rm.resource.attributes}
    assert resource["service.name"] == "example-app" and resource["service.instance.id"]
    names = {m.name for sm in rm.scope_metrics for m in sm.metrics}
    assert {"llmtap.attempts", "llmtap.streams", "gen_ai.client.operation.duration"} <= names
    spans = [s for r in receiver.traces() for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert [s.name for s in spans] == ["chat claude-example"]
