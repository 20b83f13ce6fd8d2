""":func:`run_probe`: the phases in order (latency per model, aborts, throttling, the metrics endpoint,
then the claims) through one SDK with llmtap capturing every attempt."""

from __future__ import annotations

import contextlib
import gc
import time
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from llmtap._settings import Settings
from llmtap._version import __version__
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import Capture, capture

from . import _aborts, _latency, _throttle
from ._claims import judge
from ._driver import SdkDriver
from ._headers import HeaderLog
from ._options import KEY_ENV, ProbeOptions, Resolved, clean_url, resolve
from ._report import AbortResult, ModelLatency, ProbeReport, Sample, Target
from ._session import Budget, Progress, Session
from ._unseen import metric_summary, unseen

__all__ = ["run_probe"]


def run_probe(
    options: ProbeOptions | None = None,
    *,
    progress: Progress | None = None,
    registry: CollectorRegistry | None = None,
) -> ProbeReport:
    """Probe an endpoint (or the embedded simulator) with the real SDK, llmtap instrumented.

    Args:
        options: what to probe; default: the simulator with default settings.
        progress: called as ``progress(phase, done, total)``.
        registry: Prometheus registry for llmtap's metrics during the probe (default: a fresh one).

    Raises:
        ImportError: the provider's SDK is not installed (``pip install 'llmtap[probe]'``).
        RuntimeError: llmtap is already instrumented in this process.
        ValueError: invalid options (checked before any request).
    """
    o = options or ProbeOptions()
    target = resolve(o)
    started, t_start = datetime.now(UTC), time.monotonic()
    log = HeaderLog(o.expect_headers)
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(Simulator(default=Scenario.parse(o.sim_scenario))) if target.simulate else None
        base_url, key = _endpoint(o.provider, target, sim)
        driver = SdkDriver(o.provider, base_url, key, log.add)
        s = Session(o, driver, _capture(stack, base_url, registry), Budget(o.timeout), log, sim)
        if progress is not None:
            s.progress = progress
        if sim is None and not target.key:
            s.notes.append(f"no {KEY_ENV[o.provider]}: requests sent without a real key")

        latency, samples, stop = _latency_phase(s, target.models)
        aborts = _abort_phase(s, target.models[0], samples) if o.aborts and stop is None else []
        throttled = o.throttle and stop is None and s.budget.allow("throttle")
        throttle = _throttle.run(s, target.models[0]) if throttled else None
        metrics_endpoint = _ask_metrics_endpoint(s) if stop is None and s.budget.allow("metrics endpoint") else None
        gc.collect()  # streams the abort phase dropped end here at the latest
        records, metrics = list(s.capture.records), metric_summary(s.capture.registry)
    return ProbeReport(
        target=Target(
            provider=o.provider,
            base_url=clean_url(base_url),
            simulated=target.simulate,
            sim_scenario=o.sim_scenario if target.simulate else None,
            models=target.models,
            sdk=driver.sdk_name,
            llmtap_version=__version__,
            started_at=started.isoformat(timespec="seconds"),
            seconds=time.monotonic() - t_start,
            budget_seconds=o.timeout,
            stopped_early=s.budget.exhausted,
        ),
        headers=log.report(),
        latency=tuple(latency),
        claims=judge(o, latency, samples, log, stop),
        aborts=tuple(aborts),
        throttle=throttle,
        unseen=unseen(latency, records, metrics_endpoint),
        metrics=metrics,
        samples=tuple(samples),
        notes=tuple(s.notes),
        expect_latency=o.expect_latency,
        expect_ttft=o.expect_ttft,
        cannot_probe=stop,
    )


def _latency_phase(s: Session, models: tuple[str, ...]) -> tuple[list[ModelLatency], list[Sample], str | None]:
    """Each model in turn; the first one the endpoint refuses (or cannot be reached for) stops the probe."""
    latency: list[ModelLatency] = []
    samples: list[Sample] = []
    for model in models:
        try:
            measured, model_samples = _latency.measure(s, model)
        except _latency.CannotProbe as stop:
            s.notes.append(str(stop))
            return latency, samples, str(stop)
        latency.append(measured)
        samples.extend(model_samples)
    return latency, samples, None


def _endpoint(provider: str, target: Resolved, sim: Simulator | None) -> tuple[str, str]:
    """Base URL and key: the simulator's, or the endpoint's (a placeholder key when none was given)."""
    if sim is not None:
        return (sim.base_url if provider == "anthropic" else sim.base_url + "/v1"), "simulator-key"
    return target.base_url or "", target.key or "no-key"


def _abort_phase(s: Session, model: str, samples: list[Sample]) -> list[AbortResult]:
    ttfts = [x.time_to_first_token for x in samples if x.time_to_first_token is not None]
    return _aborts.run(s, model, min(ttfts) if ttfts else None)


def _ask_metrics_endpoint(s: Session) -> str:
    return s.driver.get_metrics_endpoint(s.budget.request_timeout(10))


def _capture(stack: contextlib.ExitStack, base_url: str, registry: CollectorRegistry | None) -> Capture:
    """llmtap on for ``base_url`` only, every attempt captured; off again when ``stack`` closes."""
    settings = Settings(base_urls=(base_url,), traces=False, otel_metrics=False)
    try:
        return stack.enter_context(capture(settings, registry=registry))
    except RuntimeError as exc:  # capture() raises it only when llmtap is already on in this process
        raise RuntimeError(
            "llmtap is already instrumented in this process; run the probe in its own process (`llmtap probe`)"
        ) from exc
