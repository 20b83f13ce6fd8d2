"""The OTel metrics exporter of this tree against another's, inside the real ``anthropic`` SDK, in one process.

Interleaved blocks of ``messages.create`` (random order per round): llmtap's core with a no-op sink, this
tree's ``OtelMetricsExporter`` and the one of ``--old-src`` (another commit's ``src``, e.g. from
``git archive main src | tar -x -C /tmp/old``), each on its own meter provider. Every block ends with a
collection of its provider (llmtap defers work to it), minus a collection with nothing new (the part paid
once per export interval, not per request). Prints CPU µs per request over the core, median and IQR of
the per-round differences, and how much of it the collection took.

    python benchmarks/otel_ab.py --old-src /tmp/old/src [--requests 128] [--rounds 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from pathlib import Path
from typing import Any

import sdk  # benchmarks/sdk.py: the workloads, the child simulator, the counting sink


def _old_exporter(src: Path) -> Any:
    spec = importlib.util.spec_from_file_location("old_otel_metrics", src / "llmtap/_exporters/otel_metrics.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no llmtap/_exporters/otel_metrics.py under {src}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OtelMetricsExporter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-src", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=128, help="requests per block")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import llmtap
    from llmtap._core.metrics import switched_off
    from llmtap._exporters.otel_metrics import OtelMetricsExporter

    n = args.requests
    with sdk.ChildSimulator() as sim:
        settings = llmtap.Settings(prometheus=False, traces=False, otel_metrics=False, base_urls=(sim.base_url,))
        tap = llmtap.instrument(settings)
        exclude = tuple(sorted(switched_off(llmtap.Settings())))
        wl = sdk.Workloads(sim.base_url, 300)
        arms: dict[str, tuple[Any, Any]] = {"core": (sdk._CountingSink(), None)}
        for name, cls in (("new", OtelMetricsExporter), ("old", _old_exporter(args.old_src))):
            reader = InMemoryMetricReader()
            arms[name] = (cls(MeterProvider(metric_readers=[reader]), exclude=exclude), reader)
        cpu: dict[str, list[float]] = {k: [] for k in arms}
        collected: dict[str, list[float]] = {k: [] for k in arms}
        for r in range(args.rounds + 3):  # 3 warm-up rounds
            order = list(arms)
            random.shuffle(order)
            for k in order:
                sink, reader = arms[k]
                tap.sinks = (sink,)
                c0 = time.process_time()
                wl.anthropic_create(n)
                c1 = time.process_time()
                if reader is not None:
                    reader.get_metrics_data()
                c2 = time.process_time()
                if reader is not None:
                    reader.get_metrics_data()
                floor = time.process_time() - c2
                if r >= 3:
                    cpu[k].append((c2 - c0 - floor) / n * 1e6)
                    collected[k].append((c2 - c1 - floor) / n * 1e6)
        llmtap.uninstrument()
    print(f"{args.rounds} rounds of {n} requests; core {statistics.median(cpu['core']):.0f} µs/request")
    for k in ("old", "new"):
        diffs = [a - b for a, b in zip(cpu[k], cpu["core"], strict=True)]
        q1, q2, q3 = statistics.quantiles(diffs, n=4)
        print(f"  {k}: +{q2:.1f} µs/request over the core (IQR {q1:.1f}..{q3:.1f}), of which at collection "
              f"{statistics.median(collected[k]):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
