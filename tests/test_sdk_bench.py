"""``benchmarks/sdk.py`` (run in full by ``make bench``), reduced to tiny plans: its workers' settings and its
boto3 workers with their positive controls, each of which can fail. No timing is asserted here: the figures
belong to ``make bench``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.scripts import load_script


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


def test_sdk_py_profile_ranks_llmtaps_functions_where_llmtap_runs(sim: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``sdk.py --profile``: a few requests under cProfile list llmtap's own functions in an llmtap configuration
    and none of them without instrumentation (the control). No timing asserted."""
    sdk = load_script("benchmarks/sdk.py", "llmtap_bench_sdk")
    import llmtap

    try:
        sdk.profile("anthropic_create", "prom_spans", sim.base_url, top=200, loops=3)
    finally:
        llmtap.uninstrument()
    out = capsys.readouterr().out
    assert out.startswith("anthropic_create, prom_spans: 3 requests") and "  llmtap/" in out
    sdk.profile("anthropic_create", "baseline", sim.base_url, top=200, loops=3)
    out = capsys.readouterr().out
    assert out.startswith("anthropic_create, baseline: 3 requests") and "  llmtap/" not in out
