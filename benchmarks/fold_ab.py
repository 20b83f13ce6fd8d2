"""The Prometheus exporter with its queue full (a registry scraped seldom, traffic high), inside the real
``anthropic`` SDK, in one process: an end past the cap folds the oldest queued record alone (``--batch 1``,
how it was first built) or the oldest 64 in one batch (how it is). Blocks of requests alternate in a random
order per round; CPU time per request, the paired per-round difference, and every attempt counted once.

    python benchmarks/fold_ab.py [--rounds 24] [--requests 256]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import warnings

import sdk  # benchmarks/sdk.py: the child simulator

MESSAGES = [{"role": "user", "content": "hi"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--requests", type=int, default=256, help="requests per block")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import anthropic
    from prometheus_client import CollectorRegistry, generate_latest

    import llmtap
    from llmtap._exporters import prometheus

    with sdk.ChildSimulator() as sim:
        registry = CollectorRegistry()
        llmtap.instrument(
            llmtap.Settings(prometheus=True, traces=False, otel_metrics=False, base_urls=(sim.base_url,)),
            registry=registry,
        )
        client = anthropic.Anthropic(
            base_url=sim.base_url,
            api_key="bench",
            max_retries=0,
            default_headers={"x-llmtap-sim": "tokens=5"},
            open_telemetry=False,
        )

        def create(n: int) -> None:
            for _ in range(n):
                client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=MESSAGES)  # type: ignore[arg-type]

        generate_latest(registry)  # a reader exists: ends queue from now on
        warm = prometheus.PENDING_MAX + 44
        create(warm)  # the queue is full from here on: every block runs past the cap
        original = prometheus._DRAIN_BATCH
        cpu: dict[int, list[float]] = {1: [], original: []}
        try:
            for _ in range(args.rounds):
                for batch in random.sample(list(cpu), len(cpu)):
                    prometheus._DRAIN_BATCH = batch
                    gc.collect()
                    t0 = time.process_time()
                    create(args.requests)
                    cpu[batch].append((time.process_time() - t0) / args.requests * 1e6)
        finally:
            prometheus._DRAIN_BATCH = original
        diffs = [a - b for a, b in zip(cpu[original], cpu[1], strict=True)]
        q1, _, q3 = statistics.quantiles(diffs, n=4)
        print(
            f"past the cap: one record per end {statistics.median(cpu[1]):.1f} µs/request, {original} per batch "
            f"{statistics.median(cpu[original]):.1f}; paired difference {statistics.median(diffs):+.2f} µs "
            f"(IQR {q1:+.2f}..{q3:+.2f}) over {args.rounds} rounds"
        )
        labels = {
            "gen_ai_provider_name": "anthropic",
            "gen_ai_operation_name": "chat",
            "gen_ai_request_model": "claude-sonnet-4-6",
            "status_code": "200",
            "error_type": "",
        }
        counted = registry.get_sample_value("llmtap_attempts_total", labels)
        sent = warm + args.rounds * len(cpu) * args.requests
        print(f"attempts counted: {counted:g} of {sent} sent")
        llmtap.uninstrument()
        if counted != sent:
            raise SystemExit("positive control failed: not every attempt was counted once")


if __name__ == "__main__":
    main()
