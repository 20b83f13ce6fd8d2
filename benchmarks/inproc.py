"""llmtap against the Anthropic SDK's own tracing, in one process, inside the real ``anthropic`` SDK.

``benchmarks/sdk.py`` runs each configuration in its own worker process; between processes its per-request
noise (IQR ±20-40 µs) is as large as the differences issue 15 asks about. Here every configuration runs in
ONE process, in blocks of N requests (or streams), in a random order in every round, over many rounds;
each block's figure is taken against the block without instrumentation (``bare``) of the same round, and
llmtap's configurations against the SDK's tracing of the same round. Method, caveat and results:
``benchmarks/README.md`` ("In one process").

    python benchmarks/inproc.py                    # 60 rounds x 5 configurations, 4 workloads
    python benchmarks/inproc.py --rounds 20 --no-stream
    python benchmarks/inproc.py --workloads anthropic_async_stream   # only the async stream
    python benchmarks/inproc.py --sdk-default      # + the clients with the SDK's option unset (sdk.py's setting)
    python benchmarks/inproc.py --no-scrape        # without the timed scrape that ends each Prometheus block
    python benchmarks/inproc.py -o blocks.json     # + every block's µs per unit

Configurations, all on the same simulator (a child process) and clients:

- ``bare``: llmtap not installed, the SDK's tracing off (``open_telemetry=False``);
- ``core``, ``prom_spans``, ``otlp``: llmtap as ``sdk.py`` builds them (:func:`sdk.prepare`: the
  application-owned registry and providers built once), ``llmtap.instrument()`` before each block and
  ``llmtap.uninstrument()`` after it, the SDK's tracing off;
- ``anthropic_tracing``: llmtap not installed; the SDK's own tracing on through one client's
  ``open_telemetry={"tracer_provider": ...}`` (its own ``TracerProvider``, never a global one).

Positive controls after the run (a failure exits 1 naming it): see :func:`check_controls`.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llmtap._cli.main import positive_int  # the CLI's check: one clear line and exit 2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdk import (  # benchmarks/sdk.py: the simulator, the clients, the configurations, the collection
    CONFIG_TITLES,
    TARGET_CONFIGS,
    WORKLOAD_TITLES,
    ChildSimulator,
    Configured,
    Workloads,
    activate,
    collecting,
    collection_floor,
    machine_line,
    prepare,
    quartiles,
)

BARE = "bare"
REFERENCE = "anthropic_tracing"
CONFIGS: tuple[str, ...] = (BARE, "core", *TARGET_CONFIGS, REFERENCE)
SDK_DEFAULT = "sdk_default"
"""``--sdk-default``: llmtap not installed, the clients' ``open_telemetry`` option unset and no global SDK
provider, as in every configuration of ``sdk.py``: the SDK builds and drops a non-recording span per call."""
TITLES: dict[str, str] = {
    BARE: "none (llmtap not installed, SDK tracing off)",
    SDK_DEFAULT: "none, SDK option unset (non-recording spans)",
    **CONFIG_TITLES,
}
WORKLOADS: tuple[str, ...] = ("anthropic_create", "anthropic_stream", "anthropic_async_stream", "bedrock_stream")
"""Non-stream first: the issue's open question. The async stream: ``AsyncAnthropic``, ``async for`` over
``messages.create(stream=True)``, the same tokens, on the clients' one ``asyncio.Runner`` (``sdk.Workloads``).
The Bedrock stream: ``AnthropicBedrock`` (requests signed by botocore, the AWS event stream decoded by it)."""
ASYNC_WORKLOADS = frozenset({"anthropic_async_stream"})
WARM = 2
"""Untimed units at the start of every block, after ``instrument()``: the first-use work a process pays
once (a new label set's series, the tracer's first span) is not charged to the block."""


@dataclass
class Block:
    """One timed block: CPU seconds (the collection floor subtracted) and the units (requests or events)."""

    cpu: float
    units: int
    floor: float


@dataclass
class Controls:
    """What the run saw, for :func:`check_controls`."""

    units: dict[str, int] = field(default_factory=dict)
    """configuration -> SDK calls it made (timed and warm-up): one span each where spans are on."""
    hooked: dict[str, set[bool]] = field(default_factory=dict)
    """configuration -> whether llmtap's hook was in the client's path, before and after each block."""
    attempts: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """llmtap configuration with Prometheus -> (attempts its registry counted during the timed part of a
    block, the requests or streams timed), per block."""
    points: dict[str, list[int]] = field(default_factory=dict)
    """llmtap configuration with OTel metrics -> duration points collected, after each block."""
    foreign_spans: list[str] = field(default_factory=list)
    """Blocks during which another configuration's span exporter grew."""
    tracers: dict[str, bool] = field(default_factory=dict)


def hooked(workload: str = "anthropic_create") -> bool:
    """llmtap's hook is in the workload's path: ``httpx2.Client._send_single_request`` is wrapped (what
    ``instrument()`` patches and ``uninstrument()`` restores), or ``httpx2.AsyncClient``'s for an async one."""
    import httpx2

    client = httpx2.AsyncClient if workload in ASYNC_WORKLOADS else httpx2.Client
    return hasattr(client.__dict__["_send_single_request"], "__wrapped__")


def attempts_counted(configured: Configured) -> int:
    """The attempts llmtap's Prometheus exporter holds in the configuration's registry (a scrape)."""
    from llmtap._core.metrics import by_key

    registry = configured.instrument_kwargs.get("registry")
    if registry is None:
        return 0
    name = by_key()["attempts"].prometheus()
    return int(sum(s.value for metric in registry.collect() for s in metric.samples if s.name == name))


def flush(configured: Configured) -> None:
    for provider in configured.providers:
        if hasattr(provider, "force_flush"):
            provider.force_flush()


class Bench:
    """The configurations (built once) and two sets of clients: the SDK's tracing off, and on into
    ``anthropic_tracing``'s own provider."""

    def __init__(
        self,
        base_url: str,
        tokens: int,
        collect_garbage: bool = True,
        configs: Sequence[str] = CONFIGS,
        scrape: bool = True,
    ) -> None:
        self.configured = {c: prepare("baseline" if c in (BARE, SDK_DEFAULT) else c, base_url) for c in configs}
        self.off = Workloads(base_url, tokens, open_telemetry=False)
        self.default: Workloads | None = None
        if SDK_DEFAULT in configs:
            self.default = Workloads(base_url, tokens)
        provider = self.configured[REFERENCE].tracer_provider
        self.traced = Workloads(base_url, tokens, open_telemetry={"tracer_provider": provider})
        self.collect_garbage = collect_garbage
        self.scrape = scrape
        self.controls = Controls()
        self.controls.tracers = {
            "off": all(c._tracer is None for c in (self.off.a, self.off.a_short, self.off.aa)),
            "traced": all(c._tracer is not None for c in (self.traced.a, self.traced.a_short, self.traced.aa)),
        }
        if self.default is not None:  # the SDK's default without a global SDK provider: spans not recorded
            tracers = [self.default.a_short._tracer, self.default.aa._tracer]
            self.controls.tracers["default"] = all(
                tracer is not None and not tracer.start_span("probe").is_recording() for tracer in tracers
            )

    def close(self) -> None:
        self.off.close()
        self.traced.close()
        if self.default is not None:
            self.default.close()
        for configured in self.configured.values():
            for provider in configured.providers:
                provider.shutdown()

    def _spans(self) -> dict[str, int]:
        return {c: conf.span_exporter.spans for c, conf in self.configured.items() if conf.span_exporter is not None}

    def block(self, config: str, workload: str, n: int) -> Block:
        """``n`` units of ``workload`` under ``config``, timed (CPU), between untimed set-up and checks."""
        configured = self.configured[config]
        clients = self.traced if config == REFERENCE else self.off
        if config == SDK_DEFAULT and self.default is not None:
            clients = self.default
        unit = clients.unit(workload)
        fn = collecting(configured, unit, self.scrape)
        controls = self.controls
        spans_before = self._spans()
        activate(configured)  # llmtap.instrument(...) for llmtap's configurations, nothing otherwise
        try:
            controls.hooked.setdefault(config, set()).add(hooked(workload))
            unit(WARM)
            if configured.metric_reader is not None:  # the warm-up's deferred work, not the block's
                configured.metric_reader.get_metrics_data()
            flush(configured)
            attempts = attempts_counted(configured)
            if self.collect_garbage:
                gc.collect()
            c0 = time.process_time()
            units = fn(n)  # and the collection / scrape of what the block deferred to it
            cpu = time.process_time() - c0
            floor = collection_floor(configured, self.scrape)[0]  # one with nothing new: not the block's
            controls.hooked[config].add(hooked(workload))
            if configured.instrument_kwargs.get("registry") is not None:
                counted = attempts_counted(configured) - attempts
                controls.attempts.setdefault(config, []).append((counted, n))
            if configured.metric_reader is not None:
                controls.points.setdefault(config, []).append(configured.histogram_points)
        finally:
            if configured.settings is not None:
                import llmtap

                llmtap.uninstrument()
        # this block's spans exported now, not during another configuration's block
        flush(configured)
        controls.units[config] = controls.units.get(config, 0) + WARM + n
        spans_after = self._spans()
        grew = sorted(c for c in spans_after if c != config and spans_after[c] != spans_before[c])
        if grew:
            controls.foreign_spans.append(f"{config} block: spans of {', '.join(grew)}")
        return Block(cpu - floor, units, floor)


def check_controls(configured: dict[str, Configured], c: Controls) -> list[str]:
    """Each configuration measured what it claims; returns what failed (empty: all passed).

    llmtap's hook was in the path in llmtap's blocks only; its span exporters counted one span per request
    of their blocks (and the SDK's exporter one per request of its blocks), no exporter grew during
    another configuration's block; the registry counted every timed request of each Prometheus block; every
    OTel block's collection held duration points; the SDK's tracing was off in the clients of every other
    configuration and on in its own."""
    failed: list[str] = []
    if not c.tracers.get("off"):
        failed.append("the SDK's tracing is on in the clients meant to have it off")
    if not c.tracers.get("traced"):
        failed.append("the SDK's tracing is off in anthropic_tracing's clients")
    if c.tracers.get("default") is False:
        failed.append("the SDK's default clients are not making non-recording spans")
    for config, seen in c.hooked.items():
        want = configured[config].settings is not None
        if seen != {want}:
            failed.append(f"{config}: llmtap's hook in the path before/after its blocks: {sorted(seen)}, want {want}")
    for config, conf in configured.items():
        exporter = conf.span_exporter
        if exporter is not None and exporter.spans != c.units.get(config, 0):
            failed.append(f"{config}: {exporter.spans} spans exported for {c.units.get(config, 0)} calls")
    for config, counted in c.attempts.items():
        if any(seen != timed for seen, timed in counted):
            failed.append(f"{config}: attempts in the registry / timed per block: {counted}")
    for config, conf in configured.items():
        if conf.instrument_kwargs.get("registry") is not None and not c.attempts.get(config):
            failed.append(f"{config}: its registry was never read")
    for config, points in c.points.items():
        if not points or points[0] <= 0 or any(b <= a for a, b in itertools.pairwise(points)):
            failed.append(f"{config}: a collection held no new duration point: {points}")
    failed += c.foreign_spans
    return failed


@dataclass
class Report:
    """Per workload and configuration: µs per unit of each round's block (timed rounds only)."""

    us: dict[str, dict[str, list[float]]]
    floor_us: dict[str, dict[str, list[float]]]
    units: dict[str, int]
    failed: list[str]
    configured: dict[str, Configured]
    controls: Controls


def run(
    rounds: int,
    requests: int,
    streams: int,
    tokens: int,
    warmup_rounds: int = 2,
    workloads: Sequence[str] = WORKLOADS,
    seed: int | None = None,
    collect_garbage: bool = True,
    progress: Callable[[str], None] | None = None,
    configs: Sequence[str] = CONFIGS,
    scrape: bool = True,
) -> Report:
    rng = random.Random(seed)
    sizes = {name: streams for name in WORKLOADS} | {"anthropic_create": requests}
    us: dict[str, dict[str, list[float]]] = {w: {c: [] for c in configs} for w in workloads}
    floor_us: dict[str, dict[str, list[float]]] = {w: {c: [] for c in configs} for w in workloads}
    units: dict[str, int] = {}
    started = time.monotonic()
    with ChildSimulator() as sim:
        bench = Bench(sim.base_url, tokens, collect_garbage, configs, scrape)
        try:
            for workload in workloads:
                for index in range(warmup_rounds + rounds):
                    order = list(configs)
                    rng.shuffle(order)
                    for config in order:
                        block = bench.block(config, workload, sizes[workload])
                        if index >= warmup_rounds:
                            us[workload][config].append(block.cpu / block.units * 1e6)
                            floor_us[workload][config].append(block.floor / block.units * 1e6)
                            units[workload] = block.units
                    if progress is not None and (index + 1) % 10 == 0:
                        elapsed = time.monotonic() - started
                        progress(f"  {workload}: round {index + 1}/{warmup_rounds + rounds}, {elapsed:.0f} s")
            failed = check_controls(bench.configured, bench.controls)
        finally:
            bench.close()
    return Report(us, floor_us, units, failed, bench.configured, bench.controls)


def _q(values: Sequence[float]) -> tuple[float, float, float]:
    return quartiles(sorted(values))


def median_ci(values: Sequence[float]) -> tuple[float, float]:
    """A distribution-free ~95 % confidence interval of the median: the order statistics ``k`` and
    ``n - k + 1`` around it (the binomial's normal approximation; ``(min, max)`` for very few values)."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(int(n / 2 - 1.96 * n**0.5 / 2), 1)
    return ordered[k - 1], ordered[n - k]


def verdict(report: Report, workload: str, config: str) -> str:
    """Whether ``config`` is below the SDK's tracing: the per-round difference ``config`` - SDK tracing
    (same round, same process), "below" only when its upper quartile is < 0 (three rounds in four)."""
    mine, sdk = report.us[workload][config], report.us[workload][REFERENCE]
    diffs = [a - b for a, b in zip(mine, sdk, strict=True)]
    q1, med, q3 = _q(diffs)
    lo, hi = median_ci(diffs)
    spread = (
        f"IQR of the per-round difference {config} - {REFERENCE} {q1:+.2f}..{q3:+.2f} µs; "
        f"~95 % CI of its median {lo:+.2f}..{hi:+.2f}"
    )
    if q3 < 0:
        return f"below the SDK's tracing by {-med:.2f} µs ({spread})"
    if q1 > 0:
        return f"above the SDK's tracing by {med:.2f} µs ({spread})"
    return f"not resolved from the SDK's tracing: median {med:+.2f} µs ({spread}; the IQR straddles 0)"


def markdown(report: Report) -> list[str]:
    lines: list[str] = []
    for workload, per_config in report.us.items():
        unit = "request" if workload == "anthropic_create" else "event"
        bare = per_config[BARE]
        n = len(bare)
        lines += [
            "",
            f"**{WORKLOAD_TITLES[workload]}** ({n} rounds, {report.units.get(workload, 0)} {unit}s per block; "
            f"bare {statistics.median(bare):.2f} µs per {unit})",
            "",
            f"| configuration | µs/{unit} added (median) | IQR | ratio to bare (of medians) |",
            "|---|---:|---:|---:|",
        ]
        for config in [c for c in (SDK_DEFAULT, *CONFIGS) if c in per_config and c != BARE]:
            values = per_config[config]
            q1, med, q3 = _q([a - b for a, b in zip(values, bare, strict=True)])
            ratio = statistics.median(values) / statistics.median(bare)
            floor = statistics.median(report.floor_us[workload][config])
            note = f" (collection / scrape floor {floor:.2f} µs/{unit} subtracted)" if floor else ""
            lines.append(f"| {TITLES[config]}{note} | {med:+.2f} | {q1:+.2f}..{q3:+.2f} | x{ratio:.3f} |")
        lines.append("")
        lines += [f"- {config}: {verdict(report, workload, config)}" for config in TARGET_CONFIGS]
    return lines


def _workloads(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload {unknown or text!r}; known: {', '.join(WORKLOADS)}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=positive_int, default=60, help="timed rounds per workload (default 60)")
    parser.add_argument("--warmup-rounds", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--requests", type=positive_int, default=64, help="non-stream requests per block (64)")
    parser.add_argument("--streams", type=positive_int, default=8, help="streams per block (8)")
    parser.add_argument("--tokens", type=positive_int, default=200, help="content deltas per stream (200)")
    parser.add_argument("--no-stream", action="store_true", help="the non-stream workload only")
    parser.add_argument(
        "--workloads",
        type=_workloads,
        help=f"comma-separated, in this order (default all: {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--sdk-default",
        action="store_true",
        help="also the clients with the SDK's option unset (sdk.py's setting: non-recording spans)",
    )
    parser.add_argument(
        "--no-scrape",
        dest="scrape",
        action="store_false",
        help="do not end each Prometheus block with a timed scrape of its registry (minus one with nothing "
        "new); the exporter folds ended records at scrape, so without it the figure leaves that work out",
    )
    parser.add_argument("--scrape", action="store_true", default=True, help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--seed", type=int, help="the order of the configurations in each round")
    parser.add_argument("-o", "--output", metavar="JSON", help="also write every block's µs per unit")
    parser.add_argument(
        "--no-gc-collect", action="store_true", help="no gc.collect() before each block (default: one, untimed)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workloads = args.workloads or WORKLOADS
    if args.no_stream:
        workloads = tuple(w for w in workloads if w == "anthropic_create")
    configs = (*CONFIGS, SDK_DEFAULT) if args.sdk_default else CONFIGS
    load = os.getloadavg()[0]
    print(f"llmtap in one process: {machine_line()}; 1-min load {load:.2f}")
    print(
        f"  {args.rounds} rounds (+{args.warmup_rounds} warm-up) x {len(configs)} configurations in random order; "
        f"blocks of {args.requests} requests / {args.streams} streams of {args.tokens} deltas; CPU time "
        f"(time.process_time); gc.collect() before each block: {not args.no_gc_collect}",
        flush=True,
    )
    started = time.monotonic()
    report = run(
        args.rounds,
        args.requests,
        args.streams,
        args.tokens,
        warmup_rounds=args.warmup_rounds,
        workloads=workloads,
        seed=args.seed,
        collect_garbage=not args.no_gc_collect,
        progress=lambda line: print(line, flush=True),
        configs=configs,
        scrape=args.scrape,
    )
    print("\n".join(markdown(report)))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"us": report.us, "collection_floor_us": report.floor_us, "units": report.units}, f)
        print(f"\nevery block's µs per unit written to {args.output}")
    print(f"\n{time.monotonic() - started:.0f} s; 1-min load {load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    if report.failed:
        print("\nPOSITIVE CONTROLS FAILED (the figures above do not measure what they claim):", file=sys.stderr)
        for line in report.failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("positive controls: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
