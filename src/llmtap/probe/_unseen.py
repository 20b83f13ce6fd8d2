"""What a client cannot see, and what stands in for it: the report's last sections, llmtap's own
metrics of the probe's traffic among them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from llmtap._core.record import AttemptRecord

from ._report import ModelLatency, Unseen

__all__ = ["metric_summary", "unseen"]


def unseen(
    latency: Sequence[ModelLatency], records: Sequence[AttemptRecord], metrics_endpoint: str | None
) -> tuple[Unseen, ...]:
    """What a client cannot see (GPU, kernels, queueing, provider metrics), each with its stand-in measured."""
    total = len(records)
    overloaded = sum(
        1
        for r in records
        if r.status_code in (503, 529) or (r.error_type or "").startswith("overloaded") or r.error_type == "529"
    )
    limited = sum(1 for r in records if r.status_code == 429)
    rate = f"{overloaded}/{total} attempts overloaded (503/529/overloaded_error), {limited} rate-limited (429)"
    drift = None
    tps = None
    server = None
    for m in latency:
        if m.ttft_drift is not None and drift is None:
            span = m.ttft_drift.x_max - m.ttft_drift.x_min
            lo, hi = m.ttft_drift.b_ci
            drift = (
                f"TTFT changed by {m.ttft_drift.b * span * 1000:+.1f} ms over the {_seconds(span)} of the latency "
                f"phase (95% CI {lo * span * 1000:+.1f} to {hi * span * 1000:+.1f} ms; input-token effect removed; "
                f"{m.model})"
            )
        if m.tokens_per_second is not None and tps is None:
            tps_s = m.tokens_per_second
            tps = f"{tps_s.p50:.0f} output tokens/s median, jitter {tps_s.jitter:.0f} ({m.model})"
    # each reported time against the client's own time over the interval it covers (AttemptRecord.server_times)
    pairs = [(source, srv, cli) for r in records for source, srv, cli in r.server_times]
    if pairs:
        sources = ", ".join(sorted({source for source, _, _ in pairs}))
        server = (
            f"provider says {statistics.median(srv for _, srv, _ in pairs) * 1000:.1f} ms, the client saw "
            f"{statistics.median(cli for _, _, cli in pairs) * 1000:.1f} ms over the same interval (medians; "
            f"{sources}): the path between took {statistics.median(cli - srv for _, srv, cli in pairs) * 1000:.1f} ms"
        )
    return (
        Unseen(
            "GPU utilisation, batch size, KV-cache pressure",
            "these live inside the provider's serving stack; no response header or API reports them",
            "overloaded / rate-limited rate, and output tokens per second over time",
            f"{rate}; {tps}" if tps else rate,
        ),
        Unseen(
            "kernel launch latency, per-layer or per-token GPU time",
            "a client sees bytes, not kernels: token timing mixes compute, batching, network and buffering",
            "time to first token and its drift; gaps between chunks",
            drift,
        ),
        Unseen(
            "queueing and processing time inside the provider",
            "only if the server reports it (openai-processing-ms, x-envoy-upstream-service-time, Bedrock's latencies)",
            "the client's time over the interval each reported time covers, minus it (llmtap_client_observed_seconds)",
            server,
        ),
        Unseen(
            "a /v1/metrics endpoint with the provider's internal numbers",
            "the public APIs document none; the probe asked for it",
            "llmtap's own client-side metrics (this report's metrics section)",
            metrics_endpoint,
        ),
    )


def metric_summary(registry: CollectorRegistry) -> dict[str, float]:
    """The probe's own traffic as llmtap's Prometheus metrics counted it: sample name{labels} → value."""
    wanted = {"llmtap_attempts_total", "llmtap_streams_total", "llmtap_retries_total"}
    out: dict[str, float] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name not in wanted or not sample.value:
                continue
            keep = {k: v for k, v in sample.labels.items() if k in ("status_code", "outcome", "reason", "error_type")}
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(keep.items()) if v)
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            out[key] = out.get(key, 0.0) + sample.value
    return dict(sorted(out.items()))


def _seconds(span: float) -> str:
    """``0.35 s``, ``4.2 s``, ``63 s``: a short phase is not "0 s"."""
    return f"{span:.2f} s" if span < 1 else f"{span:.1f} s" if span < 10 else f"{span:.0f} s"
