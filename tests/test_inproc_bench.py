"""``benchmarks/inproc.py`` (run in full by ``make bench``), reduced to a few tiny blocks: it runs and its
positive controls pass. No timing is asserted here: the figures belong to ``make bench``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import load_script


def _load_inproc() -> ModuleType:
    """benchmarks/inproc.py, loaded as a module."""
    return load_script("benchmarks/inproc.py", "llmtap_bench_inproc")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_inproc_runs_and_its_positive_controls_pass() -> None:
    inproc = _load_inproc()
    configs = (*inproc.CONFIGS, inproc.SDK_DEFAULT)
    report = inproc.run(rounds=2, requests=3, streams=1, tokens=10, warmup_rounds=1, seed=0, configs=configs)

    assert report.failed == []
    assert "anthropic_async_stream" in inproc.WORKLOADS and set(report.us) == set(inproc.WORKLOADS)
    for workload in inproc.WORKLOADS:
        for config in configs:
            assert len(report.us[workload][config]) == 2 and all(v > 0 for v in report.us[workload][config])
    # what the controls compared is not empty: every configuration ran, llmtap's hook was in the path of
    # its own blocks only, the registries and the collections saw the requests
    controls = report.controls
    assert set(controls.units) == set(configs)
    assert controls.hooked == {c: {report.configured[c].settings is not None} for c in configs}
    assert controls.tracers == {"off": True, "traced": True, "default": True}
    assert controls.hooked["prom_spans"] == {True} and controls.hooked["bare"] == {False}
    assert controls.attempts["prom_spans"] and all(seen == timed > 0 for seen, timed in controls.attempts["prom_spans"])
    assert controls.points["otlp"][-1] > 0
    spans = {c: conf.span_exporter.spans for c, conf in report.configured.items() if conf.span_exporter is not None}
    assert set(spans) == {"prom_spans", "otlp", "anthropic_tracing"}
    assert all(n == controls.units[c] > 0 for c, n in spans.items())
    text = "\n".join(inproc.markdown(report))
    assert all(f"- {c}: " in text for c in ("prom_spans", "otlp"))

    # the checks can fail: one span too few, llmtap's hook in a bare block, a foreign span, a registry miss
    spoilers: list[tuple[Callable[[Any], None], str]] = [
        (lambda c: c.units.__setitem__("otlp", c.units["otlp"] + 1), "otlp"),
        (lambda c: c.hooked["bare"].add(True), "bare"),
        (lambda c: c.foreign_spans.append("core block: spans of prom_spans"), "core block"),
        (lambda c: c.attempts["prom_spans"].append((0, 3)), "prom_spans"),
    ]
    for spoil, named in spoilers:
        spoiled = copy.deepcopy(controls)
        spoil(spoiled)
        failed = inproc.check_controls(report.configured, spoiled)
        assert len(failed) == 1 and named in failed[0], failed


def test_the_hook_control_reads_the_workloads_client() -> None:
    """``hooked`` reads the sync client's hook for the sync workloads and the async client's for the async
    stream: each is False uninstrumented (the bare blocks) and True instrumented (llmtap's blocks)."""
    import llmtap

    inproc = _load_inproc()
    workloads = ("anthropic_create", "anthropic_async_stream")
    assert [inproc.hooked(w) for w in workloads] == [False, False]
    llmtap.instrument(llmtap.Settings(prometheus=False, traces=False))
    try:
        assert [inproc.hooked(w) for w in workloads] == [True, True]
    finally:
        llmtap.uninstrument()
    assert [inproc.hooked(w) for w in workloads] == [False, False]


def test_workloads_option(capsys: pytest.CaptureFixture[str]) -> None:
    inproc = _load_inproc()
    args = inproc.parse_args(["--workloads", "anthropic_async_stream,anthropic_stream"])
    assert args.workloads == ("anthropic_async_stream", "anthropic_stream")
    assert inproc.parse_args([]).workloads is None
    with pytest.raises(SystemExit) as exited:
        inproc.parse_args(["--workloads", "anthropic_async_stream,nope"])
    assert exited.value.code == 2
    assert "unknown workload ['nope']" in capsys.readouterr().err


def test_sdk_py_turns_the_sdks_tracing_off_but_where_it_is_measured(tmp_path: Any) -> None:
    """benchmarks/sdk.py's workers: the anthropic clients' ``open_telemetry`` option off in every configuration
    but ``anthropic_tracing`` (unset there: its global provider turns the SDK's tracing on), unset everywhere
    with ``--sdk-default``; the worker's plan carries the choice."""
    import json

    sdk = load_script("benchmarks/sdk.py", "llmtap_bench_sdk")
    plan = sdk.Plan("http://127.0.0.1:1", 10, {}, 1, 0)
    assert {c: sdk.sdk_option(c, plan) for c in sdk.CONFIGS} == {
        c: None if c == "anthropic_tracing" else False for c in sdk.CONFIGS
    }
    default = sdk.Plan("http://127.0.0.1:1", 10, {}, 1, 0, sdk_default=True)
    assert {sdk.sdk_option(c, default) for c in sdk.CONFIGS} == {None}  # control: the former method
    path = tmp_path / "plan.json"
    for sent in (plan, default):
        path.write_text(json.dumps(sdk.plan_payload(sent)))
        assert sdk._load_plan(str(path)) == sent
    assert sdk.parse_args(["--sdk-default"]).sdk_default and not sdk.parse_args([]).sdk_default


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_sdk_py_boto3_stream_workers_run_and_their_controls_can_fail(sim: Any) -> None:
    """benchmarks/sdk.py's boto3 ConverseStream workload in real workers (tiny: one value of one stream): llmtap's
    worker recorded the probe stream's attempt, OpenInference's Bedrock instrumentation wrapped the client and
    exported spans in its own worker only; each control fails when its fact is false. The peer runs only its
    SDK's workloads. No timing asserted."""
    sdk = load_script("benchmarks/sdk.py", "llmtap_bench_sdk")
    plan = sdk.Plan(sim.base_url, 10, {"boto3_stream": 1}, 1, 0, ("boto3_stream",))
    results = {
        c: sdk.run_worker(["--worker", c], sdk.plan_payload(plan))
        for c in ("baseline", "core", "openinference_bedrock")
    }
    units = {c: r["workloads"]["boto3_stream"]["units_per_value"] for c, r in results.items()}
    assert units == dict.fromkeys(results, 14)  # messageStart, 10 deltas, contentBlockStop, messageStop, metadata
    assert results["core"]["checks"]["llmtap_boto3_attempts_seen"] == 1
    assert results["openinference_bedrock"]["checks"]["bedrock_peer_wrapped"] is True
    assert results["openinference_bedrock"]["checks"]["spans_exported"] >= 1
    sdk.check_controls([results])
    rows = {(r.workload, r.config) for r in sdk.rows_from([results])}
    assert rows == {("boto3_stream", "core"), ("boto3_stream", "openinference_bedrock")}
    assert [(r.workload, r.config) for r in sdk.versus_peers([results])] == [("boto3_stream", "core")]
    assert "openinference_bedrock" not in sdk.rss_deltas([results])  # one workload: no like-for-like peak

    for config, key, value in (
        ("core", "llmtap_boto3_attempts_seen", 0),
        ("core", "bedrock_peer_wrapped", True),
        ("openinference_bedrock", "bedrock_peer_wrapped", False),
        ("openinference_bedrock", "spans_exported", 0),
    ):
        broken = copy.deepcopy(results)
        broken[config]["checks"][key] = value
        with pytest.raises(SystemExit):
            sdk.check_controls([broken])
    assert sdk.PEERS["openinference_bedrock"] == "boto3" and sdk.WORKLOADS["boto3_stream"] == ("boto3", True)
