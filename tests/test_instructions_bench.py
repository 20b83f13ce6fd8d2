"""``benchmarks/instructions.py`` (run in full by ``make bench``, under valgrind): its worker runs what it says
against the simulator, its report tells a missed target from a met one, and its regression gate fails a figure
grown past the tolerance (synthetic figures). No count is asserted here."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import pytest

from llmtap.simulator import Simulator
from tests.support.paths import ROOT
from tests.support.scripts import load_script


def _load() -> ModuleType:
    return load_script("benchmarks/instructions.py", "llmtap_bench_instructions")


def _worker(base_url: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/instructions.py"),
            "--worker",
            "prom_spans",
            "--base-url",
            base_url,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_the_worker_counts_the_units_of_each_region_and_the_floor_reads_none(sim: Simulator) -> None:
    bench = _load()
    out = _worker(sim.base_url, "--units", "2", "--workloads", "anthropic_create", "bedrock_stream")
    assert out["seen"][""] == 0  # the floor: collections with nothing new
    assert out["seen"]["anthropic_create"] == 2 * bench.LOOPS["anthropic_create"]
    assert out["seen"]["bedrock_stream"] > 2 * 100  # two streams of ~TOKENS deltas, each an event-stream message
    # the warm-up recorded each stream (three: sync and async anthropic, Bedrock) and its settling unit replayed
    # them; the region, Bedrock's twice more
    assert out["replayed"] == 3 + 2


def test_the_regions_are_read_from_callgrinds_dumps_in_order(tmp_path: Path) -> None:
    bench = _load()
    for index, total in ((2, 500), (10, 9_000), (1, 40)):  # dump 10 after dump 2: by number, not by name
        dump = f"version: 1\ncmd: python\nsummary: {total}\ntotals: {total}\n"
        (tmp_path / f"callgrind.out.{index}").write_text(dump)
    (tmp_path / "callgrind.out").write_text("summary: 7\n")  # the final dump at exit: outside every region
    assert bench.dumps(str(tmp_path)) == [40, 500, 9_000]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replayed_stream_is_the_recorded_one_read_one_event_at_a_time(sim: Simulator, mode: str) -> None:
    replay = load_script("benchmarks/replay.py", "llmtap_bench_replay")
    sdk = load_script("benchmarks/sdk.py", "llmtap_bench_sdk")
    transports = replay.ReplayTransport(), replay.AsyncReplayTransport()
    transport = transports[mode == "async"]
    workloads = sdk.Workloads(sim.base_url, 20, open_telemetry=False, stream_transport=transports)
    plain = sdk.Workloads(sim.base_url, 20, open_telemetry=False)
    streams = (
        (("anthropic_stream", "/v1/messages"), ("bedrock_stream", None))
        if mode == "sync"
        else (("anthropic_async_stream", "/v1/messages"),)
    )
    try:
        for name, path in streams:
            seen = [workloads.unit(name)(1) for _ in range(3)]
            assert seen[0] == seen[1] == seen[2] == plain.unit(name)(1) > 20  # the same events as over the socket
            recorded = (
                transport._recorded[path]
                if path
                else next(v for k, v in transport._recorded.items() if k.startswith("/model/"))
            )
            status, _headers, chunks = recorded
            assert status == 200 and len(chunks) > 20
            if path:  # Server-Sent Events: each read one whole event
                assert all(chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1 for chunk in chunks)
            else:  # the AWS event stream: each read one whole message, as its length prefix says
                assert all(int.from_bytes(chunk[:4], "big") == len(chunk) for chunk in chunks)
        assert transport.replayed == 2 * len(streams)  # each recorded once, then replayed: the counts ran on replays
        assert transports[mode != "async"].replayed == 0  # the other mode's clients were not used
    finally:
        workloads.close()
        plain.close()


def test_an_async_replayed_read_waits_for_the_event_loop_as_a_sockets_does() -> None:
    replay = load_script("benchmarks/replay.py", "llmtap_bench_replay")
    chunks = [b"a: 1\n\n", b"b: 2\n\n", b"c: 3\n\n"]
    passes = 0

    async def ticking() -> None:  # one tick a pass of the loop
        nonlocal passes
        while True:
            passes += 1
            await asyncio.sleep(0)

    async def read(stream: Any) -> list[bytes]:
        ticker = asyncio.create_task(ticking())
        await asyncio.sleep(0)
        before = passes
        out = [chunk async for chunk in stream]
        ticker.cancel()
        reads.append(passes - before)
        return out

    reads: list[int] = []
    assert asyncio.run(read(replay._Chunks(chunks))) == chunks
    assert reads == [2 * len(chunks)]  # each read: the loop's callback hands it over, the next pass resumes it
    assert asyncio.run(read(httpx2.ByteStream(b"".join(chunks)))) == [b"".join(chunks)]
    assert reads[1] == 0  # the control: a body that never waits leaves the loop no pass


def test_events_cuts_each_format_where_its_reads_end() -> None:
    replay = load_script("benchmarks/replay.py", "llmtap_bench_replay")
    assert replay.events("text/event-stream; charset=utf-8", b"a: 1\n\nb: 2\n\nrest") == [
        b"a: 1\n\n",
        b"b: 2\n\n",
        b"rest",
    ]
    message = (20).to_bytes(4, "big") + bytes(16)
    assert replay.events("application/vnd.amazon.eventstream", message * 2 + b"xy") == [message, message, b"xy"]
    assert replay.events("application/json", b'{"a": 1}') == [b'{"a": 1}']


def test_the_report_fails_a_configuration_above_both_its_target_and_the_sdks_tracing() -> None:
    bench = _load()
    per = {
        "baseline": {"anthropic_create": 100.0, "anthropic_stream": 10.0},
        "anthropic_tracing": {"anthropic_create": 120.0, "anthropic_stream": 11.0},
        "prom_spans": {"anthropic_create": 119.0, "anthropic_stream": 12.0},  # under the SDK / above it
        "otlp": {"anthropic_create": 104.0, "anthropic_stream": 10.05},  # under both targets
    }
    missed = bench.report(per, ("anthropic_create", "anthropic_stream"))
    assert missed == ["anthropic_stream prom_spans"]
    per["prom_spans"]["anthropic_stream"] = 11.0  # level with the SDK's tracing: met
    assert bench.report(per, ("anthropic_create", "anthropic_stream")) == []


def _figures(scale: float = 1.0, control: float = 1.0) -> dict[str, dict[str, float]]:
    """Synthetic figures of the four configurations: llmtap's scaled by ``scale``, the uninstrumented ones by
    ``control``."""
    base = {
        "anthropic_create": 4_000_000.0,
        "anthropic_stream": 170_000.0,
        "anthropic_async_stream": 180_000.0,
        "bedrock_stream": 320_000.0,
    }
    return {
        "baseline": {name: value * control for name, value in base.items()},
        "anthropic_tracing": {name: value * 1.2 * control for name, value in base.items()},
        "prom_spans": {name: value * 1.1 * scale for name, value in base.items()},
        "otlp": {name: value * 1.12 * scale for name, value in base.items()},
    }


def test_the_gate_fails_each_of_llmtaps_figures_grown_past_the_tolerance_and_only_those() -> None:
    bench = _load()
    reference = _figures()
    assert bench.regressions(reference, _figures()) == []  # the same figures: held
    assert bench.regressions(reference, _figures(scale=0.9)) == []  # fewer instructions: held
    within = 1 + 0.9 * bench.TOLERANCE / 100
    assert bench.regressions(reference, _figures(scale=within)) == []
    # the control: the same growth past the tolerance fails all eight of llmtap's figures, one line each
    past = 1 + 1.1 * bench.TOLERANCE / 100
    lines = bench.regressions(reference, _figures(scale=past))
    assert len(lines) == 8 and all(line.startswith(("prom_spans ", "otlp ")) for line in lines), lines
    grown = copy.deepcopy(reference)
    grown["otlp"]["anthropic_stream"] *= past
    (line,) = bench.regressions(reference, grown)
    assert line.startswith("otlp anthropic_stream: ") and "per event" in line and "over the reference" in line
    grown = copy.deepcopy(reference)
    grown["prom_spans"]["anthropic_create"] *= past
    assert "per request" in bench.regressions(reference, grown)[0]
    # what is not llmtap's is not gated: the uninstrumented run and the SDK's own tracing
    grown = copy.deepcopy(reference)
    grown["anthropic_tracing"]["anthropic_stream"] *= 2
    grown["baseline"]["anthropic_stream"] *= 2
    assert bench.regressions(reference, grown) == []


def test_the_gate_gives_no_verdict_against_another_environments_reference(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    reference = {"environment": bench.environment(), "units": 5, "figures": _figures()}
    assert bench.check(_figures(), reference) == 0  # the control: the same environment and figures
    assert "8 of 8 figures within" in capsys.readouterr().out
    regressed = _figures(scale=1.05)
    assert bench.check(regressed, reference) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 8 and all(line.startswith("instructions.py --check: regression: ") for line in err)
    # the uninstrumented figures moved as much: not llmtap's doing, no verdict
    assert bench.check(_figures(scale=1.05, control=1.05), reference) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "not comparable" in line and "anthropic_create +5.00 %" in line and "--record" in line
    # another package version: no verdict either, and the line names it
    other = {**reference, "environment": {**reference["environment"], "anthropic": "0.0.1"}}
    assert bench.check(_figures(), other) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "anthropic 0.0.1 -> " in line


def test_a_recorded_reference_is_what_the_gate_reads(tmp_path: Path) -> None:
    bench = _load()
    bench.record(_figures(), 5, str(tmp_path / "instructions.json"))
    reference = json.loads((tmp_path / "instructions.json").read_text())
    assert reference["units"] == 5 and reference["environment"] == bench.environment()
    assert bench.check(_figures(), reference) == 0
    assert bench.check(_figures(scale=1.05), reference) == 1


def test_the_committed_reference_holds_what_the_gate_compares() -> None:
    bench = _load()
    reference = json.loads((ROOT / "benchmarks/instructions.json").read_text())
    assert set(reference["environment"]) == set(bench.environment())
    assert {bench.CONTROL, *bench.GATED} <= set(reference["figures"])
    workloads = set(reference["figures"][bench.CONTROL])
    assert workloads and all(set(reference["figures"][c]) == workloads for c in bench.GATED)


def test_the_gates_options_say_what_is_wrong_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load()
    monkeypatch.setattr(bench.shutil, "which", lambda name: "/usr/bin/valgrind")  # nothing is counted below
    monkeypatch.setattr(bench, "REFERENCE", str(tmp_path / "missing.json"))
    assert bench.main(["--check"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("instructions.py --check: cannot read the reference ")
    for argv in (["--record", "--configs", "baseline", "otlp"], ["--check", "--record"]):
        with pytest.raises(SystemExit) as exited:
            bench.main(argv)
        assert exited.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith("instructions.py: error: ")
