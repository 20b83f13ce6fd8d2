"""What each metrics sink costs per attempt, at the attempt's end (not per chunk).

    .venv/bin/python benchmarks/sinks.py [--repeat 7]

For one realistic streamed attempt (usage, stop reason, 4 rate-limit resources) with G gaps between
chunks, it times ``end()`` of the native Prometheus exporter and of the OpenTelemetry exporter (SDK
meter provider, in-memory reader): what the application's thread pays when an attempt ends. Both
only merge the pre-bucketed gap counts there. The OpenTelemetry exporter then records one value per
gap when the reader collects (``otel_metrics.spread``): the last column is that cost per gap, paid on
the reader's thread. Median of ``--repeat`` runs, GC off.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import random
import statistics
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from llmtap._exporters.otel_metrics import OtelMetricsExporter
from llmtap._exporters.prometheus import PrometheusExporter
from llmtap._metrics import CHUNK_GAP_BUCKETS
from llmtap._record import AttemptRecord, Outcome, RateLimit, Usage


def record(gaps: int, seed: int = 1) -> AttemptRecord:
    rng = random.Random(seed)
    values = [rng.expovariate(1 / 0.02) for _ in range(gaps)]
    counts = [0] * (len(CHUNK_GAP_BUCKETS) + 1)
    for v in values:
        counts[bisect.bisect_left(CHUNK_GAP_BUCKETS, v)] += 1
    fields: dict[str, object] = dict.fromkeys(AttemptRecord._fields)
    fields.update(attributes=(), attribute_labels=())
    fields.update(
        provider="anthropic", operation="chat", request_model="claude-sonnet-4-5", server_address="api.anthropic.com",
        server_port=443, url_path="/v1/messages", method="POST", request_stream=True, resend_count=0,
        started_at=0.0, start_unix_ns=0, outcome=Outcome.COMPLETED, status_code=200, streamed=True,
        headers_at=0.2, first_chunk_at=0.3, first_token_at=0.35, ended_at=0.3 + sum(values), chunks=gaps + 1,
        max_gap=max(values, default=0.0), stalls=0, gap_bucket_counts=tuple(counts), gap_sum=sum(values),
        usage=Usage(1200, gaps, 1024, 0, None), stop_reasons=("end_turn",), response_model="claude-sonnet-4-5",
        rate_limits=tuple(RateLimit(r, 1000.0, 900.0, 30.0) for r in ("requests", "tokens", "input_tokens",
                                                                         "output_tokens")),
        parse_errors=0,
    )  # fmt: skip
    return AttemptRecord._make(fields[f] for f in AttemptRecord._fields)


def per_call_us(sink: PrometheusExporter | OtelMetricsExporter, rec: AttemptRecord, loops: int, repeat: int) -> float:
    end = sink.end
    runs = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        t0 = time.perf_counter_ns()
        for _ in range(loops):
            end(rec, None)
        runs.append((time.perf_counter_ns() - t0) / loops / 1000)
        gc.enable()
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    native = PrometheusExporter(CollectorRegistry())
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    otel = OtelMetricsExporter(provider)
    print("end() per attempt, on the application's thread; then the collection's cost per gap (reader thread)")
    print(f"{'gaps':>6} {'native µs':>10} {'otel µs':>10} {'collect µs/gap':>15}")
    for gaps in (0, 50, 500, 2000):
        rec = record(gaps)
        loops = 200
        a = per_call_us(native, rec, loops, args.repeat)
        b = per_call_us(otel, rec, loops, args.repeat)
        otel._flush_gaps()  # drop what the timing loops queued
        runs = []
        for _ in range(args.repeat if gaps else 0):
            for _ in range(10):
                otel.end(rec, None)
            gc.collect()
            gc.disable()
            t0 = time.perf_counter_ns()
            otel._flush_gaps()
            runs.append((time.perf_counter_ns() - t0) / (10 * gaps) / 1000)
            gc.enable()
        per_gap = statistics.median(runs) if runs else 0.0
        print(f"{gaps:>6} {a:>10.1f} {b:>10.1f} {per_gap:>15.2f}")
    provider.shutdown()


if __name__ == "__main__":
    main()
