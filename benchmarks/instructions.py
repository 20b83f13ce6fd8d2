"""Instructions per request and per stream event, counted by valgrind: issue 15's CPU targets read exactly.

CPU time on a shared 2-core machine moves by several per cent between two runs of one configuration (the
A/A row of ``sdk.py``), more than the margins the targets are about. An instruction count hardly moves
(``PYTHONHASHSEED=0``: the same dict layouts in every run; only the span exporter's thread, which wakes on the
wall clock, adds a few thousand instructions a wake-up) and needs no quiet machine, so this script gives the
same ratios as counts: the real SDKs against the same local simulator as ``sdk.py``, one process per run under
``valgrind --tool=callgrind``, every thread of it counted (the span exporter's thread too). It counts work, not
time: a cache miss or a stall costs one instruction here, so it complements ``sdk.py``'s CPU time, it does not
replace it.

Each configuration runs in two kinds of process, the same up to their last step:

- *base*: one unit of every workload to warm up, then :data:`SETTLE` more (each followed by the collection
  ``sdk.py`` makes: a scrape, a metric reader's collect), then ``gc.freeze()``;
- *extra W*: the same, then ``--units`` more units of workload ``W``, each followed by its collection;
- *floor*: the same, then ``--units`` collections with nothing new (none where the configuration collects
  nothing: :func:`sdk.collecting` decides).

So ``extra W`` minus *floor* is what ``--units`` units of ``W`` cost,
the work they defer to their collections included and the collections' fixed part (every series reported
again) left out, as ``sdk.py`` subtracts it (:func:`sdk.collection_floor`). Per event: divided by the stream
events the units read.

Usage: ``python benchmarks/instructions.py [--configs ...] [--workloads ...] [--units N] [--jobs J]``
(``make bench`` runs it: the non-stream request, about 9 minutes on 2 cores; streams on request, coarse:
see :data:`DEFAULT_WORKLOADS`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sdk  # benchmarks/sdk.py: the configurations, workloads and simulator

CONFIGS = ("baseline", "prom_spans", "otlp", "anthropic_tracing")
WORKLOADS = ("anthropic_create", "anthropic_stream", "bedrock_stream")
"""The workloads the Anthropic SDK's own tracing covers (the issue's comparison); every process warms up on all."""
DEFAULT_WORKLOADS = ("anthropic_create",)
"""What ``make bench`` counts: a stream's count depends on how the socket hands its events over (several per
read when the client, slowed ~50x by valgrind, falls behind the simulator), so two runs of one stream
workload differ by up to ~45k instructions an event (benchmarks/README.md); a request's do not."""
SETTLE = 1
"""Units of each workload after the warm-up one, in every process, before what differs."""
LOOPS = {"anthropic_create": 32}
"""Requests (or streams) per unit, each unit followed by one collection: non-stream units of 32 requests
(``sdk.py`` collects after each value of 64), streams one at a time."""
TOKENS = 200
"""Output tokens per stream (~205 events)."""
_COLLECTED = re.compile(r"==\d+== Collected : (\d+)")


def worker(config: str, base_url: str, extra: str | None, units: int) -> dict[str, int]:
    """One process's work (see the module docstring): ``extra W``, or the floor when ``extra`` is None; returns
    the events (or requests) of the extra units."""
    configured = sdk.configure(config, base_url)
    plan = sdk.Plan(base_url, TOKENS, {}, 1, 0, WORKLOADS)
    wl = sdk.Workloads(base_url, TOKENS, open_telemetry=sdk.sdk_option(config, plan))
    runs = {name: sdk.collecting(configured, wl.unit(name)) for name in WORKLOADS}
    for name, run in runs.items():
        run(LOOPS.get(name, 1))
    for name, run in runs.items():
        for _ in range(SETTLE):
            run(LOOPS.get(name, 1))
    # What every process made so far is out of the collector's reach: a full collection (whose cost grows
    # with the whole heap) falling inside one process's counted units but not another's would be counted
    # as theirs. What the counted units allocate is still collected.
    gc.collect()
    gc.freeze()
    seen = 0
    if extra is not None:
        for _ in range(units):
            seen += runs[extra](LOOPS.get(extra, 1))
    else:
        nothing = sdk.collecting(configured, lambda loops: 0)
        for _ in range(units):
            nothing(1)
    for provider in configured.providers:  # what the application's exit would export, in every process alike
        provider.shutdown()
    return {"seen": seen}


def count(config: str, base_url: str, extra: str | None, units: int) -> tuple[int, int]:
    """(instructions, events or requests of the extra units) of one worker process under callgrind."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        config,
        "--base-url",
        base_url,
        "--units",
        str(units),
    ]
    if extra is not None:
        command += ["--extra", extra]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    match = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"{config} {extra or 'floor'}: {done.stderr[-2000:]}")
    return int(match.group(1)), json.loads(done.stdout.strip().splitlines()[-1])["seen"]


def measure(configs: tuple[str, ...], workloads: tuple[str, ...], units: int, jobs: int) -> dict[str, dict[str, float]]:
    """Instructions per request or event, by configuration and workload."""
    sdk.ensure_bytecode()
    with sdk.ChildSimulator() as sim, ThreadPoolExecutor(jobs) as pool:
        runs: dict[tuple[str, str], Any] = {}
        for config in configs:
            runs[(config, "")] = pool.submit(count, config, sim.base_url, None, units)
            for name in workloads:
                runs[(config, name)] = pool.submit(count, config, sim.base_url, name, units)
        out: dict[str, dict[str, float]] = {}
        for config in configs:
            reference, _ = runs[(config, "")].result()
            out[config] = {}
            for name in workloads:
                total, seen = runs[(config, name)].result()
                out[config][name] = (total - reference) / seen
            print(f"  {config}: done", file=sys.stderr, flush=True)
    return out


def report(per: dict[str, dict[str, float]], workloads: tuple[str, ...]) -> list[str]:
    """Print the table and the targets; returns the targets missed."""
    base = per.get("baseline")
    sdk_tracing = per.get("anthropic_tracing")
    print(f"{'workload':38s} {'configuration':40s} {'instructions':>14s} {'ratio':>8s} {'over none':>12s}")
    for name in workloads:
        unit = "per event" if sdk.WORKLOADS[name][1] else "per request"
        for config, values in per.items():
            value = values[name]
            ratio_text = f"x{value / base[name]:.3f}" if base else ""
            over = f"{value - base[name]:+,.0f}" if base else ""
            title = sdk.CONFIG_TITLES.get(config, "none")
            workload = sdk.WORKLOAD_TITLES[name].split(",")[0] + ", " + unit
            print(f"{workload:38s} {title:40s} {value:14,.0f} {ratio_text:>8s} {over:>12s}")
    missed: list[str] = []
    if base is None or sdk_tracing is None:
        print("\n(the targets need the baseline and anthropic_tracing configurations)")
        return missed
    print("\nTargets (issue 15), in instructions: at or under the ratio target, or not above the Anthropic SDK's")
    print("own tracing in the same run (one span, as llmtap's):")
    for name in workloads:
        target = sdk.TARGETS[name]
        sdk_ratio = sdk_tracing[name] / base[name]
        for config in sdk.TARGET_CONFIGS:
            if config not in per:
                continue
            ratio = per[config][name] / base[name]
            ok = ratio <= target or ratio <= sdk_ratio
            print(
                f"  {sdk.WORKLOAD_TITLES[name]:38s} {config:11s} x{ratio:.3f} (target x{target:.2f}, "
                f"SDK tracing x{sdk_ratio:.3f})  {'PASS' if ok else 'FAIL'}"
            )
            if not ok:
                missed.append(f"{name} {config}")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=sdk.CONFIGS)
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=list(DEFAULT_WORKLOADS),
        choices=WORKLOADS,
        help="streams: see DEFAULT_WORKLOADS",
    )
    parser.add_argument("--units", type=int, default=10, help="units of each workload counted (default 10)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes at once")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--worker", metavar="CONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--extra", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.units < 1 or args.jobs < 1:
        parser.error("--units and --jobs must be at least 1")
    if args.worker:
        print(json.dumps(worker(args.worker, args.base_url, args.extra, args.units)))
        return 0
    if shutil.which("valgrind") is None:
        print("instructions.py: valgrind is not installed (apt-get install valgrind); skipped", file=sys.stderr)
        return 2
    configs, workloads = tuple(args.configs), tuple(args.workloads)
    print(
        f"Instructions per unit (valgrind callgrind, PYTHONHASHSEED=0, {args.units} units, streams of ~{TOKENS} events)"
    )
    per = measure(configs, workloads, args.units, args.jobs)
    missed = report(per, workloads)
    print(f"\n{len(missed)} target(s) missed" + (f": {', '.join(missed)}" if missed else ""))
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
