"""Where llmtap's added time and memory go inside the real SDK (the profile behind benchmarks/README.md).

    python benchmarks/profile_sdk.py request [--config all]   # cProfile of 2,000 anthropic messages.create
    python benchmarks/profile_sdk.py stream [--config all]    # cProfile of 20 anthropic streams x 2,006 events
    python benchmarks/profile_sdk.py bedrock-stream [--config all]  # the same over Bedrock's event-stream
    python benchmarks/profile_sdk.py imports [--config core]  # modules and RSS llmtap adds to the app's
    python benchmarks/profile_sdk.py span-memory --config prom_spans  # bytes a finished span holds
    python benchmarks/profile_sdk.py held-records --config prometheus  # bytes ended records hold until a scrape
    python benchmarks/profile_sdk.py cycle-garbage --config prom_spans  # bytes a request leaves in reference cycles

Start it with the simulator URL in ``LLMTAPTEST_BENCH_URL`` or let it start a child simulator. The profile lists
only functions in llmtap, prometheus_client and opentelemetry (the time llmtap adds), with µs per request or
per event (cProfile's own overhead inflates small functions: read the ranking, then confirm with
``benchmarks/sdk.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import resource
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sdk  # benchmarks/sdk.py: the same configurations and workloads


def ours() -> dict[str, str]:
    """Directory -> package, for the packages whose functions are profiled: by the imported packages' own
    directories, never a name fragment (``/llmtap/`` also matches a virtualenv in a clone named ``llmtap``)."""
    import opentelemetry
    import prometheus_client

    import llmtap

    roots = {os.path.dirname(os.path.abspath(llmtap.__file__)): "llmtap"}
    roots[os.path.dirname(os.path.abspath(prometheus_client.__file__))] = "prometheus_client"
    roots.update({os.path.abspath(path): "opentelemetry" for path in opentelemetry.__path__})
    return {root + os.sep: name for root, name in roots.items()}


def profile(kind: str, config: str, base_url: str, top: int) -> None:
    sdk.configure(config, base_url)
    tokens = 2000
    wl = sdk.Workloads(base_url, tokens)
    if kind == "request":
        fn, loops = wl.anthropic_create, 2000
    elif kind == "bedrock-stream":
        fn, loops = wl.bedrock_stream, 20
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
    roots = ours()
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = short(filename, roots)
        if where is not None:
            rows.append((tottime, cumtime, ncalls, f"{where}:{line}({name})"))
            total_ours += tottime
    rows.sort(reverse=True)
    unit = "request" if kind == "request" else "event"
    print(f"{kind}, configuration {config}: {units} {unit}s; cProfile, functions of llmtap/prometheus/otel only")
    print(f"{'own µs/' + unit:>12} {'cum µs/' + unit:>12} {'calls/' + unit:>10}  function")
    for tottime, cumtime, ncalls, where in rows[:top]:
        print(f"{tottime / units * 1e6:12.2f} {cumtime / units * 1e6:12.2f} {ncalls / units:10.2f}  {where}")
    print(f"{total_ours / units * 1e6:12.2f} µs/{unit} in those functions altogether")


def short(filename: str, roots: dict[str, str]) -> str | None:
    """``package/relative/path.py`` for a file under one of ``roots``; ``None`` for any other file."""
    path = os.path.abspath(filename)
    for root, package in roots.items():
        if path.startswith(root):
            return f"{package}/{path[len(root) :]}"
    return None


def imports(config: str, base_url: str) -> None:
    """What ``config`` loads that its application-only worker does not (``sdk.APP_BASELINES``; the bare
    worker for the others), each in a fresh interpreter that imported both SDKs and made the same two
    requests: the modules, by package, with the RSS each package adds when imported in that order on top of
    the application-only worker, then what ``instrument()`` and the requests add (llmtap's state)."""
    app = sdk.APP_BASELINES.get(config, "baseline")
    mine = _child(["--imports-child", config], base_url)
    theirs = _child(["--imports-child", app], base_url)
    added = sorted(set(mine["modules"]) - set(theirs["modules"]))
    attribution = _child(["--imports-attribution", config, *added], base_url)
    print(
        f"configuration {config} over {app}: {len(added)} modules more, peak RSS "
        f"{(mine['rss'] - theirs['rss']) / 1024:+.1f} MiB (over the bare worker: see benchmarks/sdk.py)"
    )
    print(f"{'modules':>8} {'RSS MiB':>8}  package (imported in this order on top of {app})")
    for name, rss_kib, count in attribution["steps"]:
        print(f"{count or '':>8} {rss_kib / 1024:+8.2f}  {name}")


def _group(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] in ("opentelemetry", "llmtap") else parts[0]


def _child(args: list[str], base_url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        env={**os.environ, "LLMTAPTEST_BENCH_URL": base_url},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _requests(base_url: str) -> None:
    wl = sdk.Workloads(base_url, 5)
    wl.anthropic_create(1)
    wl.openai_create(1)
    wl.close()


def imports_child(config: str, base_url: str) -> None:
    import anthropic  # noqa: F401
    import openai  # noqa: F401

    sdk.configure(config, base_url)
    _requests(base_url)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    json.dump({"modules": sorted(sys.modules), "rss": rss}, sys.stdout)


def _rss_kib() -> float:
    gc.collect()
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def imports_attribution(config: str, base_url: str, added: Sequence[str]) -> None:
    """On top of the application-only worker: each added package's RSS (current, after a collection) as it is
    imported, the non-llmtap ones first, then llmtap's own, then ``instrument()`` and the requests.

    For the configurations with an application-only worker, ``instrument()`` is given that worker's own
    registry and providers and the requests go through the same SDK clients: building those a second time
    (a second TracerProvider and its export thread, new clients with their TLS contexts) would be counted
    as llmtap's state."""
    import importlib

    import anthropic  # noqa: F401
    import openai  # noqa: F401

    app = sdk.configure(sdk.APP_BASELINES.get(config, "baseline"), base_url)
    wl = sdk.Workloads(base_url, 5)
    wl.anthropic_create(1)
    wl.openai_create(1)
    order: dict[str, list[str]] = {}
    for name in added:
        if not name.startswith("llmtap"):
            order.setdefault(_group(name), []).append(name)
    steps: list[tuple[str, float, int]] = []
    before, loaded = _rss_kib(), len(sys.modules)

    def step(name: str) -> None:
        nonlocal before, loaded
        now = _rss_kib()
        steps.append((name, now - before, len(sys.modules) - loaded))
        before, loaded = now, len(sys.modules)

    for group, names in order.items():
        for name in names:
            with contextlib.suppress(Exception):  # a module that only loads as part of another's import
                importlib.import_module(name)
        step(group)
    import llmtap  # llmtap's own modules that ``import llmtap`` loads

    step("llmtap (import llmtap)")
    lazily = [name for name in added if name.startswith("llmtap") and name not in sys.modules]
    for name in lazily:
        importlib.import_module(name)
    step(f"llmtap's modules instrument() loads: {' '.join(n[7:] for n in lazily)}")
    if config in sdk.APP_BASELINES:
        llmtap.instrument(sdk.llmtap_settings(config, base_url), **app.instrument_kwargs)
    else:
        sdk.configure(config, base_url)
    wl.anthropic_create(1)
    wl.openai_create(1)
    step("instrument() + the two requests (llmtap's state)")
    wl.close()
    json.dump({"steps": steps}, sys.stdout)


def span_memory(config: str, base_url: str) -> None:
    """Bytes one finished span holds until the application's span processor exports it (a
    ``BatchSpanProcessor`` holds up to ``max_export_batch_size``, 512 by default, between exports): llmtap's
    span of a non-streaming anthropic request under ``config``, against the Anthropic SDK's own span of
    the same request (``anthropic_tracing``); tracemalloc over 500 requests, spans kept by a processor."""
    for which in (config, "anthropic_tracing"):
        print(json.dumps(_child(["--span-memory-child", which], base_url)))


def span_memory_child(config: str, base_url: str) -> None:
    import tracemalloc

    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    kept: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            kept.append(span)

    configured = sdk.configure(config, base_url)
    for provider in configured.providers:
        if hasattr(provider, "add_span_processor"):
            provider.add_span_processor(Keep())
    wl = sdk.Workloads(base_url, 5)
    wl.anthropic_create(20)  # warm
    for provider in configured.providers:
        if hasattr(provider, "force_flush"):
            provider.force_flush()
    kept.clear()
    gc.collect()
    tracemalloc.start()
    wl.anthropic_create(500)
    for provider in configured.providers:  # the BatchSpanProcessor's own copies let go: only ours remain
        if hasattr(provider, "force_flush"):
            provider.force_flush()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    first = kept[0] if kept else None
    json.dump(
        {
            "config": config,
            "spans": len(kept),
            "bytes_per_span": held // max(len(kept), 1),
            "attributes": len(first.attributes or {}) if first else 0,
        },
        sys.stdout,
    )


def held_records(config: str, base_url: str, requests: int = 300) -> None:
    """KiB llmtap holds after ``requests`` non-stream requests with no scrape or collection since (one ran
    before, so ends wait for the next: ``PENDING_MAX`` / ``ENDED_MAX`` records at most): what a process
    keeps between two scrapes under steady traffic. Use a configuration without spans (``prometheus``,
    ``otel_metrics``): the application's span processor holds spans of its own."""
    import tracemalloc

    configured = sdk.configure(config, base_url)
    wl = sdk.Workloads(base_url, 5, open_telemetry=False)
    collected = sdk.collecting(configured, wl.unit("anthropic_create"))
    collected(5)
    collected(5)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    wl.unit("anthropic_create")(requests)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"configuration {config}: {held / 1024:.0f} KiB held after {requests} requests with no scrape or collection")


CYCLE_SDKS = ("anthropic", "groq", "cohere")
"""The SDKs ``cycle-garbage`` drives: one over httpx2 (no cycle of its own), two over httpx (each response and
its stream refer to each other)."""


def cycle_garbage(config: str, base_url: str) -> None:
    """Bytes a request leaves in reference cycles, until a collection finds them: 50 streams of 20 events per
    SDK of :data:`CYCLE_SDKS` with the collector off, then one collection (tracemalloc before and after it), with
    llmtap in ``config`` and without it (each in a fresh child)."""
    for name in CYCLE_SDKS:
        without = _child(["--cycle-garbage-child", name, "none"], base_url)
        with_llmtap = _child(["--cycle-garbage-child", name, config], base_url)
        extra = with_llmtap["bytes_per_request"] - without["bytes_per_request"]
        print(
            f"{name:10s} without llmtap {without['bytes_per_request']:6d} B, {without['objects_per_request']:5.1f}"
            f" objects a request; with llmtap ({config}) {with_llmtap['bytes_per_request']:6d} B,"
            f" {with_llmtap['objects_per_request']:5.1f} objects: llmtap's {extra:+d} B"
        )


def cycle_garbage_child(name: str, config: str, base_url: str, requests: int = 50) -> None:
    import tracemalloc

    from llmtap import _drive

    if config != "none":
        sdk.configure(config, base_url)
    client = _drive.adapter(name, _drive.Config(base_url=base_url, api_key="bench", max_retries=0))
    headers = {"x-llmtap-sim": "tokens=20"}
    for _ in range(5):  # warm: lazy imports, connections, first-use caches
        _drive.run(client, "stream", "bench-model", headers=headers)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    for _ in range(requests):
        _drive.run(client, "stream", "bench-model", headers=headers)
    before = tracemalloc.get_traced_memory()[0]
    found = gc.collect()
    freed = before - tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gc.enable()
    json.dump({"bytes_per_request": freed // requests, "objects_per_request": found / requests}, sys.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "kind",
        choices=("request", "stream", "bedrock-stream", "imports", "span-memory", "held-records", "cycle-garbage"),
    )
    parser.add_argument("--config", default="all", choices=sdk.CONFIGS)
    parser.add_argument("--top", type=int, default=25)
    if argv is None:
        argv = sys.argv[1:]
    children = ("--imports-child", "--imports-attribution", "--span-memory-child", "--cycle-garbage-child")
    if argv and argv[0] in children:  # a fresh child
        import warnings

        warnings.simplefilter("ignore")
        child_url = os.environ["LLMTAPTEST_BENCH_URL"]
        if argv[0] == "--imports-child":
            imports_child(argv[1], child_url)
        elif argv[0] == "--span-memory-child":
            span_memory_child(argv[1], child_url)
        elif argv[0] == "--cycle-garbage-child":
            cycle_garbage_child(argv[1], argv[2], child_url)
        else:
            imports_attribution(argv[1], child_url, argv[2:])
        return 0
    args = parser.parse_args(argv)
    sdk.ensure_bytecode()  # as installed: no child compiles llmtap from source
    url = os.environ.get("LLMTAPTEST_BENCH_URL")
    if url:
        run(args, url)
        return 0
    with sdk.ChildSimulator() as sim:
        run(args, sim.base_url)
    return 0


def run(args: argparse.Namespace, url: str) -> None:
    if args.kind == "imports":
        imports(args.config, url)
    elif args.kind == "span-memory":
        span_memory(args.config, url)
    elif args.kind == "held-records":
        held_records(args.config, url)
    elif args.kind == "cycle-garbage":
        cycle_garbage(args.config, url)
    else:
        profile(args.kind, args.config, url, args.top)


if __name__ == "__main__":
    sys.exit(main())
