"""``llmtap demo``: the simulator, a realistic traffic mix through the real ``anthropic`` SDK (sync and
async) and ``openai`` SDK (Chat Completions and Responses) with llmtap on, ``/metrics`` served, and a
live terminal view. No API key needed.

The traffic mix exercises every stream outcome, retries with server-advised waits, 429 and 529
responses, in-band error events, stalls, prompt-cache usage, ``max_tokens`` truncation and a
rate-limit budget running low, so every dashboard panel and alert has data.

This module keeps the mix, its workers and the live view together, though it is over 300 lines: each part
serves only the demo and is read with the others; the local Prometheus it starts is ``demo_prometheus.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

import llmtap
from llmtap._cli.demo_prometheus import DEMO_FOR, PrometheusError, prometheus
from llmtap._core.record import FAILED
from llmtap._drive import Action, Config, Mode, Sdk, adapter, arun, run
from llmtap.simulator import Scenario, Simulator

__all__ = ["METRICS_VIA", "MIXES", "MIX_HELP", "DemoError", "next_steps", "run_demo"]

MODELS = ("claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-1")
OPENAI_MODELS = ("gpt-4o-mini", "gpt-5")
PROMPT = "Tell me a story."


@dataclass(frozen=True)
class Kind:
    """One kind of traffic: what the server does and what the app does with the call (a driver action)."""

    name: str
    weight: float
    action: Action
    scenario: Callable[[random.Random], Scenario]
    #: the call goes through a client with a 1 s timeout and no retries
    slow: bool = False


def _normal(rng: random.Random) -> Scenario:
    return Scenario(
        ttft=rng.uniform(0.15, 0.9),
        gap=rng.uniform(0.005, 0.03),
        tokens=rng.randint(10, 60),
        input=rng.randint(200, 3000),
        cache_read=rng.choice((0, 0, 1024, 2048)),
        cache_write=rng.choice((0, 0, 0, 512)),
    )


def _with(**changes: Any) -> Callable[[random.Random], Scenario]:
    return lambda rng: _normal(rng).replace(**changes)


# the default mix is mostly healthy: about 9 in 10 streams not rejected complete, as in a healthy service
KINDS: tuple[Kind, ...] = (
    Kind("stream", 120, "stream", _normal),
    Kind("non_stream", 30, "create", _normal),
    Kind("max_tokens", 4, "stream", _with(stop_reason="max_tokens")),
    Kind("tool_use", 4, "stream", _with(stop_reason="tool_use")),
    Kind("retry_529", 4, "stream", _with(fail=1, fail_status=529, retry_after=0.3)),
    Kind("retry_429", 4, "stream", _with(fail=2, fail_status=429, retry_after=0.2)),
    Kind("overloaded_event", 2, "stream", _with(error_event_at=3)),
    Kind("dropped", 2, "stream", _with(drop_at=4)),
    Kind("incomplete", 2, "stream", _with(no_stop=True)),
    Kind("stall", 2, "stream", _with(stall_at=3, stall=1.2)),
    Kind("timeout", 1, "stream", _with(stall_at=2, stall=3.0), slow=True),
    Kind("client_closed", 4, "close", _with(tokens=80, gap=0.02)),
    Kind("abandoned", 2, "drop_read", _with(tokens=80, gap=0.02)),
    Kind("cancelled", 2, "cancel", _with(tokens=80, gap=0.02)),
    Kind("low_headroom", 2, "stream", _with(ratelimit_remaining=25)),
)
# "faults" weights failures up so a short run shows every outcome and fires the alerts.
MIXES: dict[str, dict[str, float]] = {
    "default": {},
    "faults": {"stream": 12, "non_stream": 4, "retry_529": 8, "retry_429": 8, "overloaded_event": 5, "dropped": 5,
               "incomplete": 4, "timeout": 3, "client_closed": 6, "abandoned": 4, "cancelled": 4, "max_tokens": 6,
               "low_headroom": 4},
}  # fmt: skip
METRICS_VIA: dict[str, str] = {
    "prometheus": "llmtap's Prometheus exporter serves /metrics",
    "otel": "its OpenTelemetry meter does, through opentelemetry-exporter-prometheus (the names a Collector "
    "gives llmtap's OTLP metrics, checked without one)",
    "otlp": "as otel, and the meter also pushes OTLP/HTTP where the standard OTEL_EXPORTER_OTLP_* variables say "
    "(a Collector's endpoint, its histogram aggregation; every OTEL_METRIC_EXPORT_INTERVAL ms)",
}
MIX_HELP: dict[str, str] = {
    "default": "mostly healthy traffic with a little of every fault",
    "faults": "failures weighted up, so a short run shows every outcome and the alert conditions hold",
}

#: the workers: (SDK adapters with their share of the calls, models, async); the openai worker sends
#: Chat Completions (with usage) and the Responses API
_SYNC_ANTHROPIC = ({"anthropic": 1.0}, MODELS)
_OPENAI = ({"openai-chat": 0.7, "openai-responses": 0.3}, OPENAI_MODELS)


class DemoError(Exception):
    """The demo cannot start (a port is taken, Prometheus failed, a package is missing); the message says why."""


def _pick(rng: random.Random, mix: str, is_async: bool) -> Kind:
    """A kind of the mix the worker can do: async workers cancel, sync ones drop streams and time out."""
    weights = MIXES[mix]
    kinds = [k for k in KINDS if (k.action != "drop_read" and not k.slow if is_async else k.action != "cancel")]
    return rng.choices(kinds, [weights.get(k.name, k.weight) for k in kinds])[0]


def _clients(base_url: str, sdks: dict[str, float], mode: Mode) -> tuple[dict[str, Sdk], dict[str, Sdk]]:
    """Per SDK: a client retrying twice, and one with a 1 s timeout and no retries (``slow`` kinds)."""
    normal = {n: adapter(n, Config(base_url, mode, api_key="demo-key", max_retries=2)) for n in sdks}
    slow = {n: adapter(n, Config(base_url, mode, api_key="demo-key", max_retries=0, timeout=1.0)) for n in sdks}
    return normal, slow


def _sync_worker(
    base_url: str, mix: str, stop: threading.Event, seed: int, pace: float, sdks: dict[str, float],
    models: tuple[str, ...],
) -> None:  # fmt: skip
    """Calls through the sync clients until ``stop``; the demo's app ignores its errors (llmtap counts them)."""
    rng = random.Random(seed)
    normal, slow = _clients(base_url, sdks, "sync")
    names, shares = list(sdks), list(sdks.values())
    while not stop.is_set():
        kind = _pick(rng, mix, False)
        sdk = (slow if kind.slow else normal)[rng.choices(names, shares)[0]]
        run(sdk, kind.action, rng.choice(models), headers=kind.scenario(rng).headers(), early=5, prompt=PROMPT)
        stop.wait(rng.expovariate(1 / pace))
    for client in (*normal.values(), *slow.values()):
        client.close()


async def _async_worker(base_url: str, mix: str, stop: threading.Event, seed: int, pace: float) -> None:
    """The async ``anthropic`` client, in one event loop: the kinds an async app adds (cancellation)."""
    rng = random.Random(seed)
    sdk = adapter("anthropic", Config(base_url, "async", api_key="demo-key", max_retries=2))
    while not stop.is_set():
        kind = _pick(rng, mix, True)
        await arun(sdk, kind.action, rng.choice(MODELS), headers=kind.scenario(rng).headers(), early=5, prompt=PROMPT)
        await asyncio.sleep(rng.expovariate(1 / pace))
    await sdk.close()


# -- the live view ----------------------------------------------------------------------------------


class _View:
    """Windowed figures computed from the registry (what a dashboard would show)."""

    def __init__(self, registry: CollectorRegistry, window: float = 30.0) -> None:
        self.registry = registry
        self.window = window
        self.history: list[tuple[float, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = []

    def snapshot(self) -> None:
        values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for metric in self.registry.collect():
            for s in metric.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                values[key] = values.get(key, 0.0) + s.value
        now = time.monotonic()
        self.history.append((now, values))
        while len(self.history) > 2 and now - self.history[1][0] > self.window:
            self.history.pop(0)

    def delta(self, name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
        if not self.history:
            return {}
        first, last = self.history[0][1], self.history[-1][1]
        out: dict[tuple[tuple[str, str], ...], float] = {}
        for (metric, labels), value in last.items():
            if metric != name:
                continue
            d = dict(labels)
            if any(d.get(k) != v for k, v in match.items()):
                continue
            out[labels] = out.get(labels, 0.0) + value - first.get((metric, labels), 0.0)
        return out

    def current(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        if not self.history:
            return {}
        return {labels: v for (metric, labels), v in self.history[-1][1].items() if metric == name}

    def quantile(self, family: str, q: float) -> float | None:
        buckets: dict[float, float] = {}
        for labels, value in self.delta(family + "_bucket").items():
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + value
        if not buckets:
            return None
        bounds = sorted(buckets)
        total = buckets[bounds[-1]]
        if total <= 0:
            return None
        rank = q * total
        prev_bound, prev_count = 0.0, 0.0
        for bound in bounds:
            count = buckets[bound]
            if count >= rank:
                if bound == float("inf"):
                    return prev_bound
                span = count - prev_count
                return prev_bound + (bound - prev_bound) * ((rank - prev_count) / span if span else 1.0)
            prev_bound, prev_count = bound, count
        return None

    def render(
        self,
        url: str,
        elapsed: float,
        alerts: str | None = None,
        *,
        size: tuple[int, int] = (80, 24),
        simulator: str | None = None,
    ) -> str:
        """The live view, at most ``size`` (columns, rows): the title first, so a short terminal cuts the
        bottom (the rate-limit rows), never the ``/metrics`` URL, how to stop or the simulator's URL."""

        def sec(v: float | None) -> str:
            return "   -   " if v is None else f"{v * 1000:6.0f}ms"

        def pair(label: str, family: str) -> str:
            return f"  {label} p50 {sec(self.quantile(family, 0.5))}   p95 {sec(self.quantile(family, 0.95))}"

        streams: dict[str, float] = {}
        for labels, v in self.delta("llmtap_streams_total").items():
            outcome = dict(labels)["outcome"]
            streams[outcome] = streams.get(outcome, 0.0) + v
        total = sum(streams.values())
        retries: dict[str, float] = {}
        for labels, v in self.delta("llmtap_retries_total").items():
            reason = dict(labels)["reason"]
            retries[reason] = retries.get(reason, 0.0) + v
        attempts = sum(self.delta("llmtap_attempts_total").values())
        calls: dict[str, float] = {}
        for labels, v in self.delta("llmtap_call_duration_seconds_count").items():
            outcome = dict(labels)["outcome"]
            calls[outcome] = calls.get(outcome, 0.0) + v
        n_calls = sum(calls.values())
        failed = sum(v for o, v in calls.items() if llmtap.Outcome(o) in FAILED)
        started = total - streams.get(llmtap.Outcome.REJECTED.value, 0.0)
        lines = [f"llmtap demo — {url}/metrics — {elapsed:4.0f}s — last {self.window:.0f}s — Ctrl-C stops"]
        if simulator:
            lines.append(f"  simulator {simulator} (an SDK's base_url can point at it)")
        if alerts:
            lines.append(f"  alerts: {alerts} (demo rules: for: {DEMO_FOR})")
        lines += [
            f"  attempts {attempts:6.0f}   streams {total:6.0f}   in flight "
            f"{sum(self.current('llmtap_streams_in_flight').values()):3.0f}",
            f"  calls    {n_calls:6.0f}   failed after the SDK's retries {failed:5.0f}"
            f"  {failed / n_calls if n_calls else 0.0:6.1%}",
            pair("time to first token  ", "llmtap_time_to_first_token_seconds"),
            pair("per call (w/ retries)", "llmtap_call_time_to_first_token_seconds"),
            "  stream outcomes          share (rejected: of all; others: of those not rejected)",
        ]  # fmt: skip
        for outcome in llmtap.Outcome:
            n = streams.get(outcome.value, 0.0)
            of = total if outcome is llmtap.Outcome.REJECTED else started
            share = n / of if of else 0.0
            bar = "#" * round(share * 40)
            lines.append(f"    {outcome.value:<17} {n:6.0f}  {share:6.1%}  {bar}")
        lines += ["  retries by reason  " + ("  ".join(f"{r}: {n:.0f}" for r, n in sorted(retries.items())) or "-")]
        lines += ["  rate-limit headroom, tightest resource per model (remaining / limit)"]
        limits = {(dict(k).get("gen_ai_request_model", ""), dict(k).get("resource", "")): v
                  for k, v in self.current("llmtap_ratelimit_limit").items()}  # fmt: skip
        tightest: dict[str, tuple[float, str]] = {}
        for labels, remaining in self.current("llmtap_ratelimit_remaining").items():
            d = dict(labels)
            model, resource = d.get("gen_ai_request_model", ""), d.get("resource", "")
            limit = limits.get((model, resource))
            if limit:
                share = remaining / limit
                if model not in tightest or share < tightest[model][0]:
                    tightest[model] = (share, resource)
        for model, (share, resource) in sorted(tightest.items()):
            bar = "#" * round(share * 20)
            lines.append(f"    {model:<20} {share:6.1%}  {resource:<14} {bar}")
        columns, rows = size  # written with no newline after the last line: every row is the view's
        return "\n".join(line[:columns] for line in lines[: max(1, rows)])


# -- running it -------------------------------------------------------------------------------------


def _otel_meter_provider(registry: CollectorRegistry, otlp: bool) -> Any:
    """A meter provider whose metrics are served from ``registry`` in their Prometheus translation, and with
    ``otlp`` also exported by the OTLP/HTTP exporter, configured by the OTEL_* variables alone."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = [PrometheusMetricReader(registry=registry)]
    if otlp:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        except ImportError:
            raise DemoError(
                "--metrics-via otlp needs opentelemetry-exporter-otlp-proto-http: pip install 'llmtap[demo,run]'"
            ) from None
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    return MeterProvider(metric_readers=readers, resource=Resource.create({"service.name": "llmtap-demo"}))


def run_demo(
    *,
    headless: bool = False,
    duration: float | None = None,
    metrics_port: int = 9464,
    mix: str = "default",
    workers: int = 3,
    pace: float = 0.3,
    prometheus_port: int | None = None,
    seed: int = 1,
    metrics_via: str = "prometheus",
) -> int:
    """Run the demo until ``duration`` seconds pass or Ctrl-C; returns an exit code.

    ``metrics_via`` is one of :data:`METRICS_VIA`: ``"otel"`` turns llmtap's Prometheus exporter off and serves
    ``/metrics`` from its OpenTelemetry meter through ``opentelemetry-exporter-prometheus`` (the names a Collector
    would produce from llmtap's OTLP metrics); ``"otlp"`` also pushes them over OTLP/HTTP.

    Raises:
        DemoError: it cannot start (a port is taken, Prometheus failed, a package is missing); nothing
            it started is left running.
    """
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; choose from {sorted(MIXES)}")
    if metrics_via not in METRICS_VIA:
        raise ValueError(f"unknown metrics_via {metrics_via!r}; choose from {sorted(METRICS_VIA)}")
    stop = threading.Event()
    registry = CollectorRegistry()
    meter_provider = None
    if metrics_via != "prometheus":
        try:
            meter_provider = _otel_meter_provider(registry, otlp=metrics_via == "otlp")
        except ImportError:
            raise DemoError(
                f"--metrics-via {metrics_via} needs opentelemetry-exporter-prometheus: pip install 'llmtap[demo]'"
            ) from None
    with contextlib.ExitStack() as cleanup:
        if meter_provider is not None:
            cleanup.callback(meter_provider.shutdown)
        try:
            server, server_thread = start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
        except OSError as exc:
            raise DemoError(
                f"cannot serve /metrics on 127.0.0.1:{metrics_port}: {exc.strerror or exc} "
                "(choose another port: --metrics-port PORT)"
            ) from None
        cleanup.callback(server_thread.join, timeout=2)
        cleanup.callback(server.shutdown)
        metrics_port = int(server.server_address[1])  # --metrics-port 0: the free port taken
        url = f"http://127.0.0.1:{metrics_port}"
        alerts = None
        if prometheus_port is not None:
            try:
                alerts = cleanup.enter_context(prometheus(metrics_port, prometheus_port))
            except PrometheusError as exc:
                raise DemoError(str(exc)) from None
            if alerts is not None:
                print(
                    f"Prometheus with llmtap's alert rules: {alerts}. The demo's copy of the rules fires an alert "
                    f"after for: {DEMO_FOR} (dashboards/alerts.yaml: 2 to 30 minutes); with --mix faults the "
                    "first alerts fire about 1.5-2 minutes after the start.",
                    flush=True,
                )
        sim = cleanup.enter_context(Simulator())
        settings = llmtap.Settings(
            base_urls=(sim.base_url,),
            stall_threshold_seconds=1.0,
            prometheus=meter_provider is None,
            otel_metrics=meter_provider is not None,
            otel_time_per_output_chunk=meter_provider is not None,  # the demo shows every panel on both paths
            cost=importlib.util.find_spec("genai_prices") is not None,  # the cost panels, when the table is installed
        )
        llmtap.instrument(settings, registry=registry, meter_provider=meter_provider)
        cleanup.callback(llmtap.uninstrument)
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        cleanup.callback(signal.signal, signal.SIGTERM, previous)
        threads = [
            threading.Thread(target=_sync_worker, args=(sim.base_url, mix, stop, seed + i, pace, *_SYNC_ANTHROPIC),
                             daemon=True)
            for i in range(workers)
        ]  # fmt: skip
        threads += [
            threading.Thread(
                target=lambda i=i: asyncio.run(_async_worker(sim.base_url, mix, stop, seed + 100 + i, pace)),
                daemon=True,
            )
            for i in range(max(1, workers // 2))
        ]
        threads += [
            threading.Thread(
                target=_sync_worker, args=(sim.base_url, mix, stop, seed + 200 + i, pace, *_OPENAI), daemon=True
            )
            for i in range(max(1, workers // 2))
        ]
        for thread in threads:
            thread.start()
        view = _View(registry)
        started = time.monotonic()
        print(f"llmtap demo: simulator {sim.base_url}, metrics {url}/metrics, mix {mix!r}", flush=True)
        try:
            last_line = 0.0
            while not stop.is_set():
                elapsed = time.monotonic() - started
                if duration is not None and elapsed >= duration:
                    break
                view.snapshot()
                if headless:
                    if elapsed - last_line >= 5:
                        last_line = elapsed
                        ttft = view.quantile("llmtap_time_to_first_token_seconds", 0.95)
                        streams = view.delta("llmtap_streams_total")
                        total = sum(streams.values())
                        done = sum(v for k, v in streams.items() if dict(k)["outcome"] == "completed")
                        rejected = sum(v for k, v in streams.items() if dict(k)["outcome"] == "rejected")
                        not_rejected = total - rejected
                        print(
                            f"{elapsed:5.0f}s streams={total:.0f} rejected={rejected:.0f} "
                            f"completed={done / not_rejected if not_rejected else 0:.0%} of those not rejected "
                            f"ttft_p95={'-' if ttft is None else f'{ttft * 1000:.0f}ms'}",
                            flush=True,
                        )
                else:
                    size = tuple(shutil.get_terminal_size((80, 24)))
                    frame = view.render(url, elapsed, alerts, size=(size[0], size[1]), simulator=sim.base_url)
                    sys.stdout.write("\x1b[H\x1b[2J" + frame)  # no newline after the last row: nothing scrolls
                    sys.stdout.flush()
                stop.wait(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            print("\nstopping…", flush=True)
            for thread in threads:
                thread.join(timeout=5)
            gc.collect()
            print(next_steps(), flush=True)
    return 0


def next_steps(port: int = 9464) -> str:
    """What the demo prints when it stops: where to go from here, in four lines."""
    return "\n".join(
        (
            f"next: instrument your app: llmtap.instrument(llmtap.Settings(metrics_port={port}))",
            f"      or leave it unchanged: llmtap run --metrics-port {port} -- python app.py",
            "      point it at a simulator, no key needed: llmtap simulate (http://127.0.0.1:8787)",
            "      dashboards and alert rules: dashboards/; see alerts fire: "
            'make demo DEMO_ARGS="--mix faults --prometheus"',
        )
    )
