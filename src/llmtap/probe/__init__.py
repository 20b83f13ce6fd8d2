"""``llmtap probe``: measure what an LLM endpoint really does, from your side of the wire.

The probe drives the official ``anthropic`` / ``openai`` SDK with llmtap instrumented, so every
number in the report comes from llmtap's own attempt records (the same ones behind the metrics):
response headers, time to headers / first body bytes / first content token, output tokens per second,
a least-squares latency model with confidence intervals, what aborts really produce, and the SDK's
backoff against the server's ``retry-after``. Published claims (a header, a TTFT, a latency formula)
are tested against the measurements. With no API key it probes the embedded simulator::

    from llmtap.probe import ProbeOptions, render_text, run_probe

    report = run_probe(ProbeOptions(expect_ttft="0.42±0.03", expect_headers=("X-Anthropic-RRSM",)))
    print(render_text(report))
    raise SystemExit(report.exit_status)  # what ``llmtap probe`` exits with (see ExitStatus)

Needs the SDKs: ``pip install 'llmtap[probe]'``.
"""

from ._formula import ClaimError
from ._options import DEFAULT_SIM_SCENARIO, PROVIDERS, ProbeOptions
from ._render import render_html, render_svgs, render_text
from ._report import (
    SCHEMA_VERSION,
    AbortResult,
    ClaimResult,
    ExitStatus,
    HeaderInfo,
    HeaderReport,
    ModelLatency,
    ProbeReport,
    RetryStep,
    Sample,
    SimTruth,
    Target,
    ThrottleReport,
    Unseen,
)
from ._run import run_probe
from ._session import Progress
from ._stats import LinearFit, Summary

__all__ = [
    "DEFAULT_SIM_SCENARIO",
    "PROVIDERS",
    "SCHEMA_VERSION",
    "AbortResult",
    "ClaimError",
    "ClaimResult",
    "ExitStatus",
    "HeaderInfo",
    "HeaderReport",
    "LinearFit",
    "ModelLatency",
    "ProbeOptions",
    "ProbeReport",
    "Progress",
    "RetryStep",
    "Sample",
    "SimTruth",
    "Summary",
    "Target",
    "ThrottleReport",
    "Unseen",
    "render_html",
    "render_svgs",
    "render_text",
    "run_probe",
]
