"""Where llmtap's added time and memory go inside the real SDK (the profile behind benchmarks/README.md).

    python benchmarks/profile_sdk.py request [--config all]   # cProfile of 2,000 anthropic messages.create
    python benchmarks/profile_sdk.py stream [--config all]    # cProfile of 20 anthropic streams x 2,006 events
    python benchmarks/profile_sdk.py imports [--config core]  # modules and peak RSS a configuration adds

Start it with the simulator URL in ``LLMTAP_BENCH_URL`` or let it start a child simulator. The profile lists
only functions in llmtap, prometheus_client and opentelemetry (the time llmtap adds), with µs per request or
per event (cProfile's own overhead inflates small functions: read the ranking, then confirm with
``benchmarks/sdk.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sdk  # benchmarks/sdk.py: the same configurations and workloads

OURS = ("/llmtap/", "/prometheus_client/", "/opentelemetry/")


def profile(kind: str, config: str, base_url: str, top: int) -> None:
    sdk.configure(config, base_url)
    tokens = 2000
    wl = sdk.Workloads(base_url, tokens)
    if kind == "request":
        fn, loops = wl.anthropic_create, 2000
    else:
        fn, loops = wl.anthropic_stream, 20
    fn(5)  # warm: connections, label children, first-use caches
    profiler = cProfile.Profile()
    profiler.enable()
    units = fn(loops)
    profiler.disable()
    wl.close()
    stats = pstats.Stats(profiler)
    rows = []
    total_ours = 0.0
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if any(part in filename for part in OURS):
            rows.append((tottime, cumtime, ncalls, f"{short(filename)}:{line}({name})"))
            total_ours += tottime
    rows.sort(reverse=True)
    unit = "request" if kind == "request" else "event"
    print(f"{kind}, configuration {config}: {units} {unit}s; cProfile, functions of llmtap/prometheus/otel only")
    print(f"{'own µs/' + unit:>12} {'cum µs/' + unit:>12} {'calls/' + unit:>10}  function")
    for tottime, cumtime, ncalls, where in rows[:top]:
        print(f"{tottime / units * 1e6:12.2f} {cumtime / units * 1e6:12.2f} {ncalls / units:10.2f}  {where}")
    print(f"{total_ours / units * 1e6:12.2f} µs/{unit} in those functions altogether")


def short(filename: str) -> str:
    for part in OURS:
        if part in filename:
            return part.strip("/") + "/" + filename.split(part, 1)[1]
    return filename


def imports(config: str, base_url: str) -> None:
    import anthropic  # noqa: F401
    import openai  # noqa: F401

    before = set(sys.modules)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sdk.configure(config, base_url)
    wl = sdk.Workloads(base_url, 5)
    wl.anthropic_create(1)
    wl.openai_create(1)
    wl.close()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    added = sorted(set(sys.modules) - before)
    groups: dict[str, int] = {}
    for name in added:
        top = ".".join(name.split(".")[:2]) if name.startswith("opentelemetry") else name.split(".")[0]
        groups[top] = groups.get(top, 0) + 1
    print(f"configuration {config}: {len(added)} modules imported, peak RSS +{(rss1 - rss0) / 1024:.1f} MiB")
    for top, count in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {count:4d}  {top}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("request", "stream", "imports"))
    parser.add_argument("--config", default="all", choices=sdk.CONFIGS)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    url = os.environ.get("LLMTAP_BENCH_URL")
    if url:
        run(args, url)
        return 0
    with sdk.ChildSimulator() as sim:
        run(args, sim.base_url)
    return 0


def run(args: argparse.Namespace, url: str) -> None:
    if args.kind == "imports":
        imports(args.config, url)
    else:
        profile(args.kind, args.config, url, args.top)


if __name__ == "__main__":
    sys.exit(main())
