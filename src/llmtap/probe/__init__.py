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

The API is the command; from Python, :func:`run_probe` takes :class:`ProbeOptions` (the command's
options) and returns a :class:`ProbeReport` (``to_json()`` is what ``llmtap probe --json`` prints),
:func:`render_text` prints it as the command does. Needs the SDKs: ``pip install 'llmtap[probe]'``.
"""

from ._options import ProbeOptions
from ._report import ExitStatus, ProbeReport
from ._run import run_probe
from ._text import render_text

__all__ = ["ExitStatus", "ProbeOptions", "ProbeReport", "render_text", "run_probe"]
