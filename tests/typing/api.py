"""Real usage of the public API, checked by mypy --strict (never run by pytest: no ``test_`` prefix)."""

from __future__ import annotations

import httpx2
from prometheus_client import CollectorRegistry

import llmtap
from llmtap.testing import capture


def configure() -> llmtap.Tap:
    settings = llmtap.Settings(
        base_urls=("http://vllm.internal:8000/v1",),
        provider_names={"http://vllm.internal:8000/v1": "vllm"},
        stall_threshold_seconds=2.0,
    )
    return llmtap.instrument(settings, registry=CollectorRegistry())


def serve_metrics() -> tuple[str, int] | None:
    tap = llmtap.instrument(llmtap.Settings(metrics_port=9464, metrics_addr="0.0.0.0"))
    address: tuple[str, int] | None = tap.metrics_address
    llmtap.uninstrument()
    return address


def from_environment() -> llmtap.Settings:
    return llmtap.Settings.from_env({"LLMTAP_METRICS_PORT": "9464", "LLMTAP_TRACES": "off"})


def explicit_transport() -> httpx2.Client:
    transport = llmtap.wrap_transport(httpx2.HTTPTransport())
    return httpx2.Client(transport=transport)


def explicit_tap() -> httpx2.Client:
    from llmtap.testing import RecordingSink

    sink = RecordingSink()
    tap = llmtap.Tap(llmtap.Settings(span_detail=True, excluded_urls=(r"/health$",)), [sink])
    return httpx2.Client(transport=llmtap.wrap_transport(httpx2.HTTPTransport(), tap))


def read_records() -> list[tuple[llmtap.Outcome, float | None, int | None]]:
    with capture() as cap:
        pass
    out: list[tuple[llmtap.Outcome, float | None, int | None]] = []
    for record in cap.records:
        usage: llmtap.Usage = record.usage
        limits: tuple[llmtap.RateLimit, ...] = record.rate_limits
        assert all(isinstance(rl.resource, str) for rl in limits)
        out.append((record.outcome, record.time_to_first_token, usage.output_tokens))
    for call in cap.calls:
        assert isinstance(call, llmtap.CallRecord) and call.attempts >= 1
    return out


def is_service_fault(record: llmtap.AttemptRecord) -> bool:
    return record.is_error and record.outcome is not llmtap.Outcome.CLIENT_CLOSED


def probe_the_simulator() -> tuple[str, list[bool | None]]:
    from llmtap.probe import ExitStatus, ProbeOptions, ProbeReport, render_text, run_probe

    def progress(phase: str, done: int, total: int) -> None:
        pass

    options = ProbeOptions(requests=8, expect_ttft="0.42±0.03", expect_headers=("X-Anthropic-RRSM",))
    report: ProbeReport = run_probe(options, progress=progress)
    for model in report.latency:
        if model.duration_fit is not None:
            low, high = model.duration_fit.b_ci
            assert low <= model.duration_fit.b <= high
    if report.exit_status is ExitStatus.CANNOT_PROBE:
        raise SystemExit(f"{report.cannot_probe}")
    return render_text(report), [claim.holds for claim in report.claims]
