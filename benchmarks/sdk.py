"""What llmtap costs inside the real ``anthropic``, ``openai`` and ``boto3`` SDKs (the default of ``make bench``).

Every configuration (no instrumentation, llmtap with each exporter, the Anthropic SDK's own tracing, OpenInference's
Bedrock instrumentation on the boto3 stream) runs in
its own worker process, in interleaved rounds, against one ``llmtap.simulator`` in a separate process. Each
figure is the ratio to the baseline worker of the same round, for the client process's CPU time and for
wall time, per stream event / chunk or per request; the table shows the median over rounds and the
interquartile range. Method and results: ``benchmarks/README.md``.

    python benchmarks/sdk.py              # ~4-5 min on 2 cores
    python benchmarks/sdk.py --quick      # ~1 min, rough
    python benchmarks/sdk.py --rigorous   # twice the rounds and values
    python benchmarks/sdk.py -o out.json  # every value as a pyperf suite (python -m pyperf stats/compare_to)
    python benchmarks/sdk.py --profile anthropic_stream --configs otlp  # where the time goes (cProfile)

The worker (``--worker CONFIG``) imports nothing of llmtap unless its configuration uses it, so the peak-RSS
deltas show what each configuration loads: in total (over the bare worker) and, for the issue's two
configurations, llmtap's own share (over a worker building the same application-owned registry and
providers without llmtap).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import httpx2
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

# Worker imports stay minimal at module level: anything imported here is in the baseline's RSS too.

CONFIGS: tuple[str, ...] = (
    "baseline",
    "baseline_again",
    "core",
    "prometheus",
    "spans",
    "otel_metrics",
    "prom_spans",
    "otlp",
    "all",
    "anthropic_tracing",
    "openinference_bedrock",
    "prom_spans_app",
    "otlp_app",
)
APP_BASELINES: dict[str, str] = {"prom_spans": "prom_spans_app", "otlp": "otlp_app"}
"""llmtap configuration -> the worker that builds the same application-owned objects without llmtap (the
Prometheus registry, the tracer and meter providers the application hands to ``instrument()``, or that
``llmtap run``'s OpenTelemetry distro builds): peak RSS over it is llmtap's own share (its modules, its
exporters and their state, what the OTel SDK loads only when llmtap uses the providers). These workers are
for peak RSS only: the CPU tables leave them out."""
RSS_ONLY: frozenset[str] = frozenset(APP_BASELINES.values())
CONFIG_TITLES: dict[str, str] = {
    "baseline_again": "none again (A/A: the noise floor)",
    "core": "llmtap core only",
    "prometheus": "+ Prometheus",
    "spans": "+ spans (BatchSpanProcessor)",
    "otel_metrics": "+ OTel metrics",
    "prom_spans": "Prometheus + spans (as most apps run it)",
    "otlp": "OTel metrics + spans (the OTLP path)",
    "all": "all (Prometheus + spans + OTel metrics)",
    "anthropic_tracing": "Anthropic SDK's own tracing",
    "openinference_bedrock": "OpenInference Bedrock instrumentation",
    "prom_spans_app": "registry + TracerProvider, no llmtap",
    "otlp_app": "MeterProvider + TracerProvider, no llmtap",
}
# name -> (SDK, streams?)
WORKLOADS: dict[str, tuple[str, bool]] = {
    "anthropic_stream": ("anthropic", True),
    "anthropic_async_stream": ("anthropic", True),
    "anthropic_create": ("anthropic", False),
    "bedrock_stream": ("anthropic", True),
    "openai_stream": ("openai", True),
    "openai_async_stream": ("openai", True),
    "openai_create": ("openai", False),
    "boto3_stream": ("boto3", True),
}
WORKLOAD_TITLES: dict[str, str] = {
    "anthropic_stream": "anthropic stream (sync), per event",
    "anthropic_async_stream": "anthropic stream (async), per event",
    "anthropic_create": "anthropic non-stream, per request",
    "bedrock_stream": "bedrock stream (sync), per event",
    "openai_stream": "openai chat stream (sync), per chunk",
    "openai_async_stream": "openai chat stream (async), per chunk",
    "openai_create": "openai chat non-stream, per request",
    "boto3_stream": "boto3 ConverseStream (sync), per event",
}
# The targets, as ratios to the baseline (CPU time).
TARGETS: dict[str, float] = {
    "anthropic_stream": 1.01,
    "anthropic_async_stream": 1.01,
    "anthropic_create": 1.05,
    "bedrock_stream": 1.01,
    "openai_stream": 1.01,
    "openai_async_stream": 1.01,
    "openai_create": 1.05,
    "boto3_stream": 1.01,
}
PEERS: dict[str, str] = {"anthropic_tracing": "anthropic", "openinference_bedrock": "boto3"}
"""The configurations without llmtap that trace one SDK's calls (a peer of llmtap), and that SDK: their workers run
only its workloads, the tables set llmtap beside them on those. The Anthropic SDK's own tracing is issue 15's
comparison (a configuration under it meets its target); OpenInference's Bedrock instrumentation
(``openinference-instrumentation-bedrock``: one span per call, the stream wrapped) is the peer of botocore
available on the package index (OpenTelemetry's ``opentelemetry-instrumentation-botocore`` is not), shown beside
llmtap on the boto3 stream (issue 33), not a pass rule."""
PER_REQUEST: tuple[str, ...] = ("boto3_stream",)
"""Stream workloads whose figures the table gives per request too (a stream read to its end)."""
RSS_TARGET_BYTES = 2 << 20
# Issue 15: the two configurations apps run, each at or under its ratio target or, where the Anthropic SDK
# traces the same workload, not above the SDK's own tracing in the same run (one span, as llmtap's).
TARGET_CONFIGS = ("prom_spans", "otlp")

MESSAGES: list[MessageParam] = [{"role": "user", "content": "Write a haiku about telemetry."}]
CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a haiku about telemetry."}]
CONVERSE: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "Write a haiku about telemetry."}]}]


@dataclass(frozen=True)
class Plan:
    """How one worker measures: per workload, loops per value (calibrated), values and warm-ups."""

    base_url: str
    tokens: int
    loops: dict[str, int]
    values: int
    warmups: int
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    sdk_default: bool = False
    """The anthropic clients of every worker leave the SDK's ``open_telemetry`` option unset (``--sdk-default``);
    otherwise only ``anthropic_tracing``'s do (its global provider turns the SDK's tracing on) and every other
    worker's are off (``open_telemetry=False``): see :func:`sdk_option`."""


# ------------------------------------------------------------------------------------------------
# worker


class _CountingSpanExporter:
    """A span exporter that only counts (what a no-op exporter costs, with a positive control)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _CountingSink:
    """Appended to llmtap's sinks after the timed runs: proves llmtap saw the traffic."""

    name = "bench-count"

    def __init__(self) -> None:
        self.ended = 0

    def start(self, attempt: object) -> object:
        return None

    def end(self, record: object, state: object) -> None:
        self.ended += 1

    def call_end(self, record: object) -> None:
        pass


@dataclass
class Configured:
    tap: Any = None
    span_exporter: _CountingSpanExporter | None = None
    providers: list[Any] = field(default_factory=list)
    metric_reader: Any = None
    """The OTel configurations' reader: collected at the end of every timed value (:func:`collecting`)."""
    collections: int = 0
    histogram_points: int = 0
    settings: Any = None
    """llmtap's configurations: the ``llmtap.Settings`` that :func:`activate` instruments with."""
    instrument_kwargs: dict[str, Any] = field(default_factory=dict)
    """llmtap's configurations: the application-owned registry / providers handed to ``instrument()``."""
    tracer_provider: Any = None
    """``anthropic_tracing``: the provider of the Anthropic SDK's own spans (made global by :func:`configure`,
    or handed to one client by its ``open_telemetry`` option)."""
    peer: Any = None
    """``openinference_bedrock``: (its ``BedrockInstrumentor``, the tracer provider it is handed), instrumented by
    :func:`activate` (it wraps the botocore clients made after it)."""


def configure(config: str, base_url: str) -> Configured:
    """Switch ``config`` on in this process, importing only what it uses."""
    out = prepare(config, base_url)
    if out.tracer_provider is not None:
        # The Anthropic SDK traces every API call when a global tracer provider exists (anthropic/_tracing.py:
        # get_tracer(); ANTHROPIC_OPEN_TELEMETRY=false or open_telemetry=False turn it off).
        from opentelemetry import trace

        trace.set_tracer_provider(out.tracer_provider)
    activate(out)
    return out


def activate(out: Configured) -> None:
    """``llmtap.instrument()`` with ``out``'s settings and application-owned objects (nothing for the
    configurations without llmtap); ``llmtap.uninstrument()`` undoes it and the objects stay reusable."""
    if out.peer is not None:
        instrumentor, provider = out.peer
        instrumentor.instrument(tracer_provider=provider)
    if out.settings is None:
        return
    import llmtap

    out.tap = llmtap.instrument(out.settings, **out.instrument_kwargs)


def prepare(config: str, base_url: str) -> Configured:
    """What ``config`` needs, built but not switched on (nothing made global, nothing instrumented),
    importing only what it uses."""
    out = Configured()
    if config in ("baseline", "baseline_again"):
        return out
    if config == "anthropic_tracing":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        out.span_exporter = _CountingSpanExporter()
        out.tracer_provider = TracerProvider()
        out.tracer_provider.add_span_processor(BatchSpanProcessor(out.span_exporter))  # type: ignore[arg-type]
        out.providers.append(out.tracer_provider)
        return out
    if config == "openinference_bedrock":
        from openinference.instrumentation.bedrock import BedrockInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        out.span_exporter = _CountingSpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(out.span_exporter))  # type: ignore[arg-type]
        out.providers.append(provider)
        out.peer = (BedrockInstrumentor(), provider)  # handed its provider, never made global
        return out
    app_only = config in RSS_ONLY
    if app_only:  # the application's objects of this llmtap configuration, without llmtap
        config = next(mine for mine, app in APP_BASELINES.items() if app == config)
    metrics = config in ("prometheus", "prom_spans", "all")
    traces = config in ("spans", "prom_spans", "otlp", "all")
    otel_metrics = config in ("otel_metrics", "otlp", "all")
    if config not in ("core", "prometheus", "spans", "otel_metrics", "prom_spans", "otlp", "all"):
        raise SystemExit(f"unknown configuration {config!r}")
    kwargs = out.instrument_kwargs
    if metrics:
        from prometheus_client import CollectorRegistry

        kwargs["registry"] = CollectorRegistry()
    if traces:
        # Handed to llmtap, never made global: a global provider would switch the Anthropic SDK's own
        # tracing on as well (see the "anthropic_tracing" configuration).
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        out.span_exporter = _CountingSpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(out.span_exporter))  # type: ignore[arg-type]
        kwargs["tracer_provider"] = provider
        out.providers.append(provider)
    if otel_metrics:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        out.metric_reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[out.metric_reader])
        kwargs["meter_provider"] = meter_provider
        out.providers.append(meter_provider)
    if app_only:
        out.span_exporter = None  # nothing uses the provider: no span to expect
        return out
    out.settings = llmtap_settings(config, base_url)
    return out


def llmtap_settings(config: str, base_url: str) -> Any:
    """The ``llmtap.Settings`` of the llmtap configuration ``config`` (with the ``LLMTAP_*`` variables set:
    ``LLMTAP_SLIM_SPANS=true`` measures the slimmed spans)."""
    import llmtap

    return llmtap.Settings.from_env(
        prometheus=config in ("prometheus", "prom_spans", "all"),
        traces=config in ("spans", "prom_spans", "otlp", "all"),
        otel_metrics=config in ("otel_metrics", "otlp", "all"),
        base_urls=(base_url,),
    )


class Workloads:
    """The SDK calls; one unit is one stream read to its end, or one request."""

    def __init__(
        self,
        base_url: str,
        tokens: int,
        open_telemetry: Any = None,
        stream_transport: tuple[httpx2.BaseTransport, httpx2.AsyncBaseTransport] | None = None,
    ) -> None:
        """``open_telemetry``: the anthropic clients' option of that name (``None``, the SDK's default: its
        tracing on whenever a global tracer provider exists; ``False``: off; ``{"tracer_provider": p}``: on,
        into ``p``). ``stream_transport``: a sync and an async ``httpx2`` transport for the clients of the
        anthropic streams, the sync one for ``anthropic_stream`` and ``bedrock_stream``, the async one for
        ``anthropic_async_stream`` (``instructions.py``'s ``replay.ReplayTransport`` and
        ``replay.AsyncReplayTransport``); the SDK's own clients otherwise."""
        import anthropic
        import openai

        scenario = {"x-llmtap-sim": f"tokens={tokens}"}
        short = {"x-llmtap-sim": "tokens=5"}
        a: dict[str, Any] = {
            "base_url": base_url,
            "api_key": "bench",
            "max_retries": 0,
            "open_telemetry": open_telemetry,
        }
        streams: dict[str, Any] = {}
        async_streams: dict[str, Any] = {}
        if stream_transport is not None:
            import httpx2

            sync_transport, async_transport = stream_transport
            streams["http_client"] = httpx2.Client(transport=sync_transport)
            async_streams["http_client"] = httpx2.AsyncClient(transport=async_transport)
        self.a = anthropic.Anthropic(**a, default_headers=scenario, **streams)
        self.aa = anthropic.AsyncAnthropic(**a, default_headers=scenario, **async_streams)
        self.a_short = anthropic.Anthropic(**a, default_headers=short)
        self.b = anthropic.AnthropicBedrock(
            base_url=base_url,
            aws_region="us-east-1",
            aws_access_key="bench",
            aws_secret_key="bench",
            max_retries=0,
            default_headers=scenario,
            open_telemetry=open_telemetry,
            **streams,
        )
        self.o = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", max_retries=0, default_headers=scenario)
        self.oa = openai.AsyncOpenAI(
            base_url=base_url + "/v1", api_key="bench", max_retries=0, default_headers=scenario
        )
        self.o_short = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", max_retries=0, default_headers=short)
        self.loop = asyncio.Runner()
        self.base_url, self.scenario = base_url, scenario
        self._boto3: Any = None

    @property
    def boto3(self) -> Any:
        """The boto3 ``bedrock-runtime`` client, made at its first use: a worker without the boto3 workload does not
        import boto3 (~20 MiB of modules in every worker's peak RSS otherwise). botocore takes no per-call headers:
        the scenario rides on a ``before-sign`` handler (returning nothing: the request is sent), as the driver's
        boto3 adapter does."""
        if self._boto3 is None:
            import boto3
            from botocore.config import Config

            client = boto3.client(
                "bedrock-runtime",
                endpoint_url=self.base_url,
                region_name="us-east-1",
                aws_access_key_id="x",
                aws_secret_access_key="x",
                config=Config(retries={"max_attempts": 1}),
            )

            def add_scenario(request: Any, **kwargs: Any) -> None:
                for name, value in self.scenario.items():
                    request.headers[name] = value

            client.meta.events.register("before-sign.bedrock-runtime.*", add_scenario)
            self._boto3 = client
        return self._boto3

    def close(self) -> None:
        self.loop.run(self.aa.close())
        self.loop.run(self.oa.close())
        self.loop.close()
        for client in (self.a, self.a_short, self.b, self.o, self.o_short):
            client.close()
        if self._boto3 is not None:
            self._boto3.close()

    def unit(self, name: str) -> Callable[[int], int]:
        """A function running ``loops`` units and returning the events (or requests) it saw."""
        return getattr(self, name)  # type: ignore[no-any-return]

    def anthropic_stream(self, loops: int) -> int:
        n = 0
        for _ in range(loops):
            for _event in self.a.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=4096,
                messages=MESSAGES,
                stream=True,
            ):
                n += 1
        return n

    def anthropic_async_stream(self, loops: int) -> int:
        async def run() -> int:
            n = 0
            for _ in range(loops):
                stream = await self.aa.messages.create(
                    model="claude-sonnet-4-6",
                    max_tokens=4096,
                    messages=MESSAGES,
                    stream=True,
                )
                async for _event in stream:
                    n += 1
            return n

        return self.loop.run(run())

    def bedrock_stream(self, loops: int) -> int:
        n = 0
        for _ in range(loops):
            for _event in self.b.messages.create(
                model="anthropic.claude-sonnet-4-5",
                max_tokens=4096,
                messages=MESSAGES,
                stream=True,
            ):
                n += 1
        return n

    def boto3_stream(self, loops: int) -> int:
        n = 0
        for _ in range(loops):
            response = self.boto3.converse_stream(
                modelId="amazon.nova-pro-v1:0",
                messages=CONVERSE,
                inferenceConfig={"maxTokens": 4096},
            )
            for _event in response["stream"]:
                n += 1
        return n

    def anthropic_create(self, loops: int) -> int:
        for _ in range(loops):
            self.a_short.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=MESSAGES)
        return loops

    def openai_stream(self, loops: int) -> int:
        n = 0
        for _ in range(loops):
            for _chunk in self.o.chat.completions.create(
                model="gpt-4o-mini",
                messages=CHAT,
                stream=True,
                stream_options={"include_usage": True},
            ):
                n += 1
        return n

    def openai_async_stream(self, loops: int) -> int:
        async def run() -> int:
            n = 0
            for _ in range(loops):
                stream = await self.oa.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=CHAT,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async for _chunk in stream:
                    n += 1
            return n

        return self.loop.run(run())

    def openai_create(self, loops: int) -> int:
        for _ in range(loops):
            self.o_short.chat.completions.create(model="gpt-4o-mini", messages=CHAT)
        return loops


def timed(fn: Callable[[int], int], loops: int) -> tuple[float, float, int]:
    """(process CPU seconds, wall seconds, units seen) for ``fn(loops)``.

    Process CPU time counts every thread of the client process (the BatchSpanProcessor's worker included)
    and nothing of the simulator's.
    """
    c0 = time.process_time()
    w0 = time.perf_counter()
    n = fn(loops)
    w1 = time.perf_counter()
    c1 = time.process_time()
    return c1 - c0, w1 - w0, n


def collecting(configured: Configured, fn: Callable[[int], int], scrape: bool = True) -> Callable[[int], int]:
    """``fn``, then one collection of what llmtap defers to it: in the OTel metric configurations, of the
    meter provider (histogram values recorded on the reader's thread, counters observed); in the Prometheus
    ones (``scrape``), a scrape of the registry in text format (ended records are folded at scrape). So each
    timed value pays for the collection of its own requests (see :func:`collection_floor`)."""
    reader = configured.metric_reader
    registry = configured.instrument_kwargs.get("registry") if scrape else None
    if reader is None and registry is None:
        return fn

    def run(loops: int) -> int:
        n = fn(loops)
        if registry is not None:
            scrape_registry(registry)
        if reader is None:
            return n
        data = reader.get_metrics_data()
        configured.collections += 1
        configured.histogram_points += sum(
            point.count
            for rm in (data.resource_metrics if data is not None else ())
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == "gen_ai.client.operation.duration"
            for point in metric.data.data_points
        )
        return n

    return run


def scrape_registry(registry: Any) -> None:
    """What Prometheus' scrape of ``/metrics`` makes llmtap do: the registry in text format."""
    from prometheus_client import generate_latest

    generate_latest(registry)


def collection_floor(configured: Configured, scrape: bool = True) -> tuple[float, float]:
    """(CPU, wall) seconds of a collection (and a scrape, with ``scrape``) with nothing new: the part that
    does not depend on the requests since the last one (every series reported again, ~0.4 ms with llmtap's),
    paid once per export or scrape interval (60 s / 15 s by default) rather than once per timed value, so
    subtracted from each value. What is left of the value's collection is the work its requests deferred
    to it."""
    reader = configured.metric_reader
    registry = configured.instrument_kwargs.get("registry") if scrape else None
    if reader is None and registry is None:
        return 0.0, 0.0
    c0 = time.process_time()
    w0 = time.perf_counter()
    if registry is not None:
        scrape_registry(registry)
    if reader is not None:
        reader.get_metrics_data()
    return time.process_time() - c0, time.perf_counter() - w0


def ensure_bytecode() -> None:
    """Write llmtap's bytecode caches (``__pycache__``), as installing its wheel does (pip compiles every module
    at install), before any worker starts: the other packages' caches were written when they were installed,
    and a worker compiling llmtap from source (an editable checkout under ``PYTHONDONTWRITEBYTECODE=1``
    compiles at every start) would count the compiler's transient memory (~0.9 MiB of tracemalloc peak,
    ~0.3 MiB that stays in RSS) as llmtap's."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("llmtap")  # finds, does not import
    if spec is not None and spec.origin is not None:
        compileall.compile_dir(os.path.dirname(spec.origin), quiet=1)


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def sdk_option(config: str, plan: Plan) -> Any:
    """The anthropic clients' ``open_telemetry`` option in ``config``'s worker. Left unset, the SDK builds and
    drops a non-recording span per call even with no tracer provider (~33 µs, ``--sdk-default``):
    part of its tracing's cost, which the option turns off (as llmtap's README advises who runs llmtap without the
    SDK's spans). So the baseline and llmtap's workers turn it off, and the SDK's tracing is measured whole
    (unset, with a global provider); ``--sdk-default`` leaves it unset everywhere (the method before
    2026-12-01: every worker pays the non-recording span, and the SDK's figure leaves it out)."""
    return None if plan.sdk_default or config == "anthropic_tracing" else False


def worker(config: str, plan: Plan) -> dict[str, Any]:
    """Measure every workload of ``plan`` under ``config``; returns the raw values."""
    import anthropic
    import openai

    imported_rss = max_rss_bytes()
    configured = configure(config, plan.base_url)
    wl = Workloads(plan.base_url, plan.tokens, open_telemetry=sdk_option(config, plan))
    for name in plan.workloads:  # one unit each: every module loaded, every state made, few spans pending
        wl.unit(name)(1)
    rss_warm = max_rss_bytes()
    results: dict[str, Any] = {}
    rss_after_anthropic = 0
    for name in plan.workloads:
        fn = collecting(configured, wl.unit(name))
        loops = plan.loops.get(name, 1)
        for _ in range(plan.warmups):
            timed(fn, loops)
        cpu: list[float] = []
        wall: list[float] = []
        units = 0
        for _ in range(plan.values):
            c, w, units = timed(fn, loops)
            floor_cpu, floor_wall = collection_floor(configured)
            c, w = c - floor_cpu, w - floor_wall
            cpu.append(c / units)
            wall.append(w / units)
        results[name] = {"cpu": cpu, "wall": wall, "loops": loops, "units_per_value": units}
        if WORKLOADS[name][0] == "anthropic":
            rss_after_anthropic = max_rss_bytes()
    rss_end = max_rss_bytes()
    checks = positive_controls(config, configured, wl)
    wl.close()
    for provider in configured.providers:
        provider.shutdown()
    return {
        "config": config,
        "workloads": results,
        "rss_imported": imported_rss,
        "rss_warm": rss_warm,
        "rss_after_anthropic": rss_after_anthropic,
        "rss_end": rss_end,
        "checks": checks,
        "versions": {"anthropic": anthropic.__version__, "openai": openai.__version__},
    }


def positive_controls(config: str, configured: Configured, wl: Workloads) -> dict[str, Any]:
    """After the timed runs: llmtap saw the traffic; the SDK's own tracing is on only where meant."""
    from opentelemetry import trace

    checks: dict[str, Any] = {
        "global_tracer_provider": type(trace.get_tracer_provider()).__name__,
        "llmtap_imported": "llmtap" in sys.modules,
    }
    sdk_tracing = wl.a._tracer is not None and wl.a._tracer.start_span("probe").is_recording()
    checks["anthropic_sdk_tracing"] = bool(sdk_tracing)
    boto3_used = wl._boto3 is not None
    if boto3_used:  # OpenInference wraps the methods of the clients made after its instrument()
        checks["bedrock_peer_wrapped"] = hasattr(wl.boto3, "_unwrapped_converse_stream")
    if configured.tap is not None:
        sink = _CountingSink()
        configured.tap.sinks = (*configured.tap.sinks, sink)
        wl.anthropic_create(1)
        wl.openai_create(1)
        checks["llmtap_attempts_seen"] = sink.ended
        if boto3_used:
            before = sink.ended
            wl.boto3_stream(1)
            checks["llmtap_boto3_attempts_seen"] = sink.ended - before
    if configured.span_exporter is not None:
        for provider in configured.providers:
            if hasattr(provider, "force_flush"):
                provider.force_flush()
        checks["spans_exported"] = configured.span_exporter.spans
    if configured.metric_reader is not None:
        checks["metric_collections"] = configured.collections
        checks["durations_collected"] = configured.histogram_points
    return checks


def calibrate(plan: Plan, min_time: float) -> dict[str, int]:
    """pyperf's rule: double the loops until one value takes at least ``min_time`` (wall)."""
    wl = Workloads(plan.base_url, plan.tokens)
    loops: dict[str, int] = {}
    for name in plan.workloads:
        fn = wl.unit(name)
        n = 1
        timed(fn, 1)  # connection, first-use work
        while True:
            _, w, _ = timed(fn, n)
            if w >= min_time or n >= 1 << 16:
                break
            n *= 2
        loops[name] = n
    wl.close()
    return loops


def own_code_filters() -> list[tracemalloc.Filter]:
    """tracemalloc filters for allocations made by llmtap's own code: files under the imported package's
    directory, its simulator and SDK driver (tools, not the observing library) excluded. By directory, not
    by a name pattern: ``*/llmtap/*`` also matches a virtualenv inside a clone whose folder is named
    ``llmtap`` (the default), and the SDKs' bytes."""
    import llmtap

    package = os.path.dirname(os.path.abspath(llmtap.__file__))
    return [
        tracemalloc.Filter(True, os.path.join(glob.escape(package), "*")),
        tracemalloc.Filter(False, os.path.join(glob.escape(package), "simulator", "*")),
        tracemalloc.Filter(False, os.path.join(glob.escape(package), "_drive", "*")),
    ]


def stream_memory(base_url: str, sizes: Sequence[int], gzip: bool) -> dict[int, int]:
    """Bytes held by allocations made in llmtap's own code while one stream is open, after ``n`` content
    events, for each ``n`` in ``sizes`` (all exporters on; raw httpx2, which llmtap patches, so that 100k
    events take seconds rather than the SDK's minute)."""
    import tracemalloc

    import httpx2
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    import llmtap

    llmtap.instrument(
        llmtap.Settings(base_urls=(base_url,)),
        registry=CollectorRegistry(),
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(),
    )
    only_llmtap = own_code_filters()
    out: dict[int, int] = {}
    body = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": MESSAGES, "stream": True}
    with httpx2.Client(timeout=60) as client:
        for n in sizes:
            scenario = f"tokens={n + 10}" + (",gzip" if gzip else "")
            tracemalloc.start()
            try:
                with client.stream(
                    "POST", base_url + "/v1/messages", json=body, headers={"x-llmtap-sim": scenario}
                ) as response:
                    chunks = response.iter_raw()
                    for _ in range(3 + n):  # the preamble, then n deltas: one HTTP chunk each
                        next(chunks)
                    snapshot = tracemalloc.take_snapshot().filter_traces(only_llmtap)
                    out[n] = sum(stat.size for stat in snapshot.statistics("filename"))
                    for _ in chunks:
                        pass
            finally:
                tracemalloc.stop()
    llmtap.uninstrument()
    return out


# ------------------------------------------------------------------------------------------------
# master


_SIM_CHILD = """
import resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
from llmtap.simulator import Simulator
sim = Simulator().start()
print(sim.base_url, flush=True)
sys.stdin.read()
sim.stop()
"""


class ChildSimulator:
    """``llmtap.simulator.Simulator`` served from a child process (its own GIL); ``code`` is the child's
    program: it prints the base URL, then serves until its stdin closes."""

    def __init__(self, code: str = _SIM_CHILD) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self.base_url = self._proc.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            self.close()
            raise RuntimeError("the child simulator did not start")

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_worker(args: list[str], payload: dict[str, Any]) -> dict[str, Any]:
    """Run this script as a worker in a fresh interpreter; the plan goes in and the result comes back as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "plan.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(payload, f)
        proc = subprocess.run(
            [sys.executable, __file__, *args, "--plan", path],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": str(random.randrange(1 << 31))},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


@dataclass
class Row:
    workload: str
    config: str
    cpu_ratio: list[float]
    wall_ratio: list[float]
    base_cpu: list[float]
    added_cpu: list[float]
    request_cpu_ratio: list[float] = field(default_factory=list)
    """Per request (a stream read to its end): the per-event CPU times times the events per request of each."""
    base_request_cpu: list[float] = field(default_factory=list)
    added_request_cpu: list[float] = field(default_factory=list)


def _per_request(data: dict[str, Any]) -> float:
    """Units (events, or requests) per request of a workload's values: ``units_per_value`` over ``loops``."""
    return float(data["units_per_value"]) / float(data["loops"])


def rows_from(rounds: list[dict[str, dict[str, Any]]], over: str = "baseline") -> list[Row]:
    """Each configuration's figures as ratios to ``over``'s worker of the same round (the baseline; or a peer:
    then only the rows of the workloads the peer ran)."""
    rows: list[Row] = []
    for workload in WORKLOADS:
        for config in CONFIGS[1:]:
            if config in RSS_ONLY or config == over:
                continue
            row = Row(workload, config, [], [], [], [])
            for results in rounds:
                base = results.get(over, {}).get("workloads", {}).get(workload)
                mine = results.get(config, {}).get("workloads", {}).get(workload)
                if base is None or mine is None:
                    continue
                b_cpu, m_cpu = statistics.median(base["cpu"]), statistics.median(mine["cpu"])
                b_wall, m_wall = statistics.median(base["wall"]), statistics.median(mine["wall"])
                row.cpu_ratio.append(m_cpu / b_cpu)
                row.wall_ratio.append(m_wall / b_wall)
                row.base_cpu.append(b_cpu)
                row.added_cpu.append(m_cpu - b_cpu)
                b_req, m_req = b_cpu * _per_request(base), m_cpu * _per_request(mine)
                row.request_cpu_ratio.append(m_req / b_req)
                row.base_request_cpu.append(b_req)
                row.added_request_cpu.append(m_req - b_req)
            if row.cpu_ratio:
                rows.append(row)
    return rows


def rss_deltas(
    rounds: list[dict[str, dict[str, Any]]], over: str = "baseline", warm: bool = False
) -> dict[str, list[float]]:
    """Peak RSS of each configuration's worker minus the bare baseline worker's of the same round (the total
    it loads); ``over=APP``: minus its application-only worker's (:data:`APP_BASELINES`), llmtap's share.
    ``warm``: the peak after one unit of each workload, before the timed runs: what the configuration loads
    and keeps, without the spans the application's ``BatchSpanProcessor`` holds between two exports at
    the timed runs' request rate (up to 512, ~4 KiB each: ``profile_sdk.py span-memory``)."""
    out: dict[str, list[float]] = {}
    for config in CONFIGS[1:]:
        if config == "openinference_bedrock":  # its worker runs the boto3 workload alone: no like-for-like peak
            continue
        key = "rss_after_anthropic" if config == "anthropic_tracing" else "rss_end"
        if warm:
            key = "rss_warm"
        base = over if over != APP else APP_BASELINES.get(config)
        if base is None:
            continue
        out[config] = [
            float(r[config][key] - r[base][key]) for r in rounds if key in r.get(config, {}) and key in r.get(base, {})
        ]
    return out


def versus_peers(rounds: list[dict[str, dict[str, Any]]]) -> list[Row]:
    """llmtap's configurations over the peer of each SDK (:data:`PEERS`) in the same round, on the workloads the
    peer ran: the issue's two and llmtap's core."""
    rows: list[Row] = []
    for peer in PEERS:
        rows += [r for r in rows_from(rounds, over=peer) if r.config in ("core", *TARGET_CONFIGS)]
    return rows


APP = "app"
RSS_TARGET_CONFIGS = ("prom_spans", "otlp")
"""The issue's two configurations, whose peak RSS is held to :data:`RSS_TARGET_BYTES` (llmtap's share)."""


def _mib(deltas: Sequence[float]) -> str:
    return f"{statistics.median(deltas) / 2**20:+.1f} MiB" if deltas else "n/a"


def _ratio(values: Sequence[float]) -> str:
    lo, mid, hi = quartiles(values)
    return f"x{mid:.3f} ({lo:.3f}..{hi:.3f})"


def _us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:,.2f}" if abs(us) < 100 else f"{us:,.0f}"


def _row_line(row: Row) -> str:
    """One row of the table: CPU and wall ratios, the baseline's and the added CPU µs per event or request."""
    return (
        f"{WORKLOAD_TITLES[row.workload]:<40} {CONFIG_TITLES[row.config]:<40} {_ratio(row.cpu_ratio):>24} "
        f"{_ratio(row.wall_ratio):>24} {_us(statistics.median(row.base_cpu)):>9} "
        f"{_us(statistics.median(row.added_cpu)):>9}"
    )


def _per_request_line(row: Row) -> str:
    """A stream's row given per request (its values times the worker's events per request; no wall ratio)."""
    title = WORKLOAD_TITLES[row.workload].rsplit(",", 1)[0] + ", per request"
    return (
        f"{title:<40} {CONFIG_TITLES[row.config]:<40} {_ratio(row.request_cpu_ratio):>24} {'':>24} "
        f"{_us(statistics.median(row.base_request_cpu)):>9} {_us(statistics.median(row.added_request_cpu)):>9}"
    )


def print_table(
    rows: list[Row],
    rss: dict[str, list[float]],
    rounds: int,
    share: dict[str, list[float]] | None = None,
    warm_share: dict[str, list[float]] | None = None,
    over_peers: Sequence[Row] = (),
) -> list[str]:
    """The full table, then the side-by-side against the targets. Returns the failed targets."""
    print(f"\nRatio to the baseline of the same round (median over {rounds} rounds, IQR in brackets).")
    print("CPU = the client process's CPU time; added = CPU µs per event or request over the baseline.\n")
    head = f"{'workload':<40} {'configuration':<40} {'CPU':>24} {'wall':>24} {'base µs':>9} {'added µs':>9}"
    print(head)
    print("-" * len(head))
    for row in rows:
        print(_row_line(row))
    for row in rows:  # the streams given per request too: the same values, times each worker's events per request
        if row.workload in PER_REQUEST:
            print(_per_request_line(row))
    if over_peers:
        print(
            "\nllmtap over the peer instrumentation of the same SDK, in the same round (CPU; wall; base = the peer):\n"
        )
        print(head)
        print("-" * len(head))
        for row in over_peers:
            print(_row_line(row))
            if row.workload in PER_REQUEST:
                print(_per_request_line(row))
    print()
    share, warm_share = share or {}, warm_share or {}
    print("Peak RSS (median over rounds): total = over the bare baseline worker; llmtap's share = over the")
    print("worker that builds the same application-owned registry/providers without llmtap; warm = after one")
    print("unit of each workload (without the span backlog of the timed runs' request rate):")
    for config, deltas in rss.items():
        if deltas:
            own = ""
            if share.get(config):
                own = f"   llmtap's share {_mib(share[config]):>9}, warm {_mib(warm_share.get(config, [])):>9}"
            print(f"  {CONFIG_TITLES[config]:<42} total {_mib(deltas):>9}{own}")

    failed: list[str] = []
    print("\nTargets (issue 15): CPU time in the two configurations apps run, at or under the ratio target or not")
    print("above the Anthropic SDK's own tracing in the same run (the peer of the anthropic workloads; the boto3")
    print("stream's, OpenInference's, is shown, not a pass rule); peak RSS of llmtap's share:\n")
    head = f"{'workload':<40} {'target':>8} {'configuration':>12} {'llmtap':>26} {'peer (same run)':>26} {'status':>7}"
    print(head)
    print("-" * len(head))
    by_key = {(r.workload, r.config): r for r in rows}
    for workload, target in TARGETS.items():
        sdk = by_key.get((workload, "anthropic_tracing"))
        peer = next((by_key.get((workload, c)) for c, of in PEERS.items() if of == WORKLOADS[workload][0]), None)
        for config in TARGET_CONFIGS:
            mine = by_key.get((workload, config))
            if mine is None:
                continue
            ratio = statistics.median(mine.cpu_ratio)
            ok = ratio <= target
            sdk_text = _ratio(peer.cpu_ratio) if peer is not None else "n/a"
            if sdk is not None:
                ok = ok or ratio <= statistics.median(sdk.cpu_ratio)
            if not ok:
                versus = " and above the Anthropic SDK's own tracing" if sdk is not None else ""
                failed.append(f"{workload}, {config}: x{ratio:.3f} > x{target}{versus}")
            print(
                f"{WORKLOAD_TITLES[workload]:<40} {'≤ x' + str(target):>8} {config:>12} {_ratio(mine.cpu_ratio):>26} "
                f"{sdk_text:>26} {'PASS' if ok else 'FAIL':>7}"
            )
    sdk_text = _mib(rss.get("anthropic_tracing", []))
    for config in RSS_TARGET_CONFIGS:
        deltas = share.get(config, [])
        if not deltas:
            continue
        ok = statistics.median(deltas) <= RSS_TARGET_BYTES
        if not ok:
            failed.append(f"peak RSS, {config}: llmtap's share {_mib(deltas)} > +2 MiB")
        where = "peak RSS, llmtap's share"
        figure = f"{_mib(deltas)} (warm {_mib(warm_share.get(config, []))})"
        print(
            f"{where:<40} {'≤ +2 MiB':>8} {config:>12} {figure:>26} {sdk_text + ' (total)':>26} "
            f"{'PASS' if ok else 'FAIL':>7}"
        )
    return failed


MEMORY_GROWTH_TARGET_BYTES = 4096


def print_memory(memory: dict[str, dict[str, int]]) -> list[str]:
    """Memory per stream: what llmtap's code holds mid-stream after 1, 1k and 100k events."""
    failed: list[str] = []
    for encoding, sizes in memory.items():
        held = {int(n): b for n, b in sizes.items()}
        first, last = held[min(held)], held[max(held)]
        growth = last - first
        ok = growth <= MEMORY_GROWTH_TARGET_BYTES
        if not ok:
            failed.append(f"memory per stream ({encoding}) grows by {growth} B")
        figures = " / ".join(f"{b:,}" for _, b in sorted(held.items()))
        sizes_text = " / ".join(f"{n:,}" for n in sorted(held))
        print(
            f"{'llmtap memory per open stream, ' + encoding:<40} {'constant':>8} {'':>12} {figures + ' B':>26} "
            f"{'':>26} {'PASS' if ok else 'FAIL':>7}"
        )
        if encoding == "identity":
            print(f"{'  (after ' + sizes_text + ' events)':<40}")
    return failed


def profile(workload: str, config: str, base_url: str, top: int = 25, loops: int = 0) -> None:
    """cProfile of ``workload`` under ``config`` in this process (streams of 2,000 deltas): the functions of
    llmtap, prometheus_client and opentelemetry, by own time per event or request. cProfile inflates small
    functions: read the ranking here, the figures in the timed run. ``loops``: units profiled (default 20
    streams or 2,000 requests)."""
    import cProfile
    import pstats

    import opentelemetry
    import prometheus_client

    import llmtap

    # by the imported packages' own directories, never a name fragment (``/llmtap/`` also matches a
    # virtualenv inside a clone named ``llmtap``)
    roots = {os.path.dirname(os.path.abspath(llmtap.__file__)): "llmtap"}
    roots[os.path.dirname(os.path.abspath(prometheus_client.__file__))] = "prometheus_client"
    roots.update({os.path.abspath(path): "opentelemetry" for path in opentelemetry.__path__})
    plan = Plan(base_url, 2000, {}, 1, 0, (workload,))
    configured = configure(config, base_url)
    wl = Workloads(base_url, plan.tokens, open_telemetry=sdk_option(config, plan))
    run = collecting(configured, wl.unit(workload))
    loops = loops or (20 if WORKLOADS[workload][1] else 2000)
    run(max(1, loops // 10))  # warm: connections, label children, first-use caches
    profiler = cProfile.Profile()
    profiler.enable()
    units = run(loops)
    profiler.disable()
    wl.close()
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        path = os.path.abspath(filename)
        where = next(
            (f"{pkg}/{path[len(root) + 1 :]}" for root, pkg in roots.items() if path.startswith(root + os.sep)), None
        )
        if where is not None:
            rows.append((tottime, cumtime, ncalls, f"{where}:{line}({name})"))
    rows.sort(reverse=True)
    unit = "event" if WORKLOADS[workload][1] else "request"
    print(f"{workload}, {config}: {units} {unit}s; cProfile, functions of llmtap, prometheus_client, opentelemetry")
    print(f"{'own µs/' + unit:>14} {'cum µs/' + unit:>14} {'calls/' + unit:>12}  function")
    for tottime, cumtime, ncalls, where in rows[:top]:
        print(f"{tottime / units * 1e6:14.2f} {cumtime / units * 1e6:14.2f} {ncalls / units:12.2f}  {where}")
    print(f"{sum(r[0] for r in rows) / units * 1e6:14.2f} µs/{unit} in those functions altogether")


def pyperf_suite(rounds: list[dict[str, dict[str, Any]]], path: str) -> None:
    """Every value as a pyperf BenchmarkSuite: one benchmark per workload x configuration x clock, one run per
    round (pyperf's JSON, for ``python -m pyperf stats/hist/compare_to``)."""
    import pyperf

    runs: dict[str, list[Any]] = {}
    for results in rounds:
        for config, result in results.items():
            for workload, data in result["workloads"].items():
                for clock in ("cpu", "wall"):
                    name = f"{workload}.{config}.{clock}"
                    metadata = {
                        "name": name,
                        "loops": data["loops"],
                        "inner_loops": data["units_per_value"] // data["loops"],
                        "unit": "second",
                        "mem_max_rss": int(result["rss_end"]),
                    }
                    run = pyperf.Run(data[clock], metadata=metadata, collect_metadata=False)
                    runs.setdefault(name, []).append(run)
    suite = pyperf.BenchmarkSuite([pyperf.Benchmark(r) for r in runs.values()])
    suite.dump(path, replace=True)


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, CPython {platform.python_version()}"


def master(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.quick:
        rounds, values, warmups, tokens, min_time = 3, 1, 1, 300, 0.02
    elif args.rigorous:
        rounds, values, warmups, tokens, min_time = 12, 5, 1, 1000, 0.1
    else:
        rounds, values, warmups, tokens, min_time = 5, 3, 1, 1000, 0.06
    rounds = args.rounds or rounds
    chosen = {"baseline", *(args.configs or CONFIGS)}
    chosen |= {APP_BASELINES[c] for c in chosen if c in APP_BASELINES}  # llmtap's share needs its app worker
    configs = [c for c in CONFIGS if c in chosen]
    workloads = tuple(w for w in WORKLOADS if not args.workloads or w in args.workloads)
    ensure_bytecode()
    load = os.getloadavg()[0]
    print(f"llmtap in-SDK benchmark{' (quick)' if args.quick else ''}: {machine_line()}; 1-min load {load:.2f}")
    print(f"  {rounds} rounds x {len(configs)} configurations, {values} values each, streams of {tokens} deltas")
    option = "unset in every worker" if args.sdk_default else "off but in the SDK tracing's worker"
    print(f"  the anthropic clients' open_telemetry option: {option} (benchmarks/README.md)")
    with ChildSimulator() as sim:
        plan = Plan(sim.base_url, tokens, {}, values, warmups, workloads)
        calibration = run_worker(["--calibrate", str(min_time)], plan_payload(plan))
        plan = Plan(sim.base_url, tokens, calibration["loops"], values, warmups, workloads, args.sdk_default)
        print(f"  loops per value: {calibration['loops']}")
        all_rounds: list[dict[str, dict[str, Any]]] = []
        for index in range(rounds):
            order = configs[index % len(configs) :] + configs[: index % len(configs)]
            results: dict[str, dict[str, Any]] = {}
            for config in order:
                wanted = workloads
                if config in PEERS:  # a peer traces one SDK: the other workloads would measure the baseline again
                    wanted = tuple(w for w in workloads if WORKLOADS[w][0] == PEERS[config])
                    if not wanted:
                        continue
                payload = plan_payload(
                    Plan(plan.base_url, tokens, plan.loops, values, warmups, wanted, args.sdk_default)
                )
                results[config] = run_worker(["--worker", config], payload)
            all_rounds.append(results)
            print(f"  round {index + 1}/{rounds} done, {time.monotonic() - started:.0f} s", flush=True)
        memory: dict[str, dict[str, int]] = {}
        if not args.no_memory:
            events = 10_000 if args.quick else 100_000
            memory = run_worker(["--memory"], plan_payload(Plan(sim.base_url, events, {}, 0, 0)))
    check_controls(all_rounds)
    failed = print_table(
        rows_from(all_rounds),
        rss_deltas(all_rounds),
        rounds,
        rss_deltas(all_rounds, APP),
        rss_deltas(all_rounds, APP, warm=True),
        versus_peers(all_rounds),
    )
    failed += print_memory(memory)
    if args.output:
        with open(args.output + ".rounds.json", "w", encoding="utf-8") as f:
            json.dump(all_rounds, f)
        pyperf_suite(all_rounds, args.output)
        print(f"\npyperf suite written to {args.output} (raw rounds: {args.output}.rounds.json)")
    print(
        f"\n{len(failed)} target(s) missed; {time.monotonic() - started:.0f} s; 1-min load {load:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at end (a loaded machine widens the IQR)."
    )
    return 1 if args.strict and failed else 0


def check_controls(rounds: list[dict[str, dict[str, Any]]]) -> None:
    """Each configuration measured what it claims: llmtap saw every probe, spans were exported where on, and
    the Anthropic SDK's own tracing was on only in its own configuration."""
    for results in rounds:
        for config, result in results.items():
            checks = result["checks"]
            llmtap_config = config not in ("baseline", "baseline_again", *PEERS, *RSS_ONLY)
            if checks["llmtap_imported"] is not llmtap_config:  # the RSS deltas are what they claim
                raise SystemExit(f"{config}: llmtap imported is {checks['llmtap_imported']}")
            want_sdk = config == "anthropic_tracing"
            if checks["anthropic_sdk_tracing"] is not want_sdk:
                raise SystemExit(f"{config}: the Anthropic SDK's own tracing was {checks['anthropic_sdk_tracing']}")
            if llmtap_config and checks.get("llmtap_attempts_seen") != 2:
                raise SystemExit(f"{config}: llmtap did not observe the probe requests: {checks}")
            if "boto3_stream" in result["workloads"]:
                if checks.get("bedrock_peer_wrapped") is not (config == "openinference_bedrock"):
                    raise SystemExit(f"{config}: OpenInference's Bedrock wrapping was {checks}")
                if llmtap_config and checks.get("llmtap_boto3_attempts_seen") != 1:
                    raise SystemExit(f"{config}: llmtap did not observe the boto3 probe stream: {checks}")
            if config in ("spans", "prom_spans", "otlp", "all", *PEERS) and not checks.get("spans_exported"):
                raise SystemExit(f"{config}: no span was exported: {checks}")
            if config in ("otel_metrics", "otlp", "all") and not checks.get("durations_collected"):
                raise SystemExit(f"{config}: no duration was collected from the meter provider: {checks}")


def markdown(paths: Sequence[str]) -> None:
    """Markdown tables (for benchmarks/README.md) from the raw rounds of one or more runs (``-o X`` writes
    ``X.rounds.json``), side by side: CPU ratio (IQR) per workload and configuration, then peak RSS."""
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            runs.append(json.load(f))
    names = [os.path.basename(p).split(".")[0] for p in paths]
    tables = [{(r.workload, r.config): r for r in rows_from(rounds)} for rounds in runs]
    print(
        "| workload | configuration | "
        + " | ".join(f"CPU {n}" for n in names)
        + " | "
        + " | ".join(f"added µs {n}" for n in names)
        + " |"
    )
    print("|---|---|" + "---:|" * (2 * len(names)))
    for workload in WORKLOADS:
        for config in CONFIGS[1:]:
            cells = [t.get((workload, config)) for t in tables]
            if not any(cells):
                continue
            ratios = [_ratio(c.cpu_ratio) if c else "n/a" for c in cells]
            added = [_us(statistics.median(c.added_cpu)) if c else "n/a" for c in cells]
            print(f"| {WORKLOAD_TITLES[workload]} | {CONFIG_TITLES[config]} | " + " | ".join(ratios + added) + " |")
    print()
    print("| peak RSS | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    deltas = [rss_deltas(rounds) for rounds in runs]
    shares = [rss_deltas(rounds, APP) for rounds in runs]
    warm = [rss_deltas(rounds, APP, warm=True) for rounds in runs]
    for config in CONFIGS[1:]:
        for what, figures in (("total", deltas), ("llmtap's share", shares), ("llmtap's share, warm", warm)):
            if any(d.get(config) for d in figures):
                row = " | ".join(_mib(d.get(config, [])) for d in figures)
                print(f"| {CONFIG_TITLES[config]}: {what} | {row} |")


def plan_payload(plan: Plan) -> dict[str, Any]:
    return {
        "base_url": plan.base_url,
        "tokens": plan.tokens,
        "loops": plan.loops,
        "values": plan.values,
        "warmups": plan.warmups,
        "workloads": list(plan.workloads),
        "sdk_default": plan.sdk_default,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", "--fast", action="store_true", help="3 short rounds (~1 min)")
    mode.add_argument("--rigorous", action="store_true", help="twice the rounds, more values")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--configs", nargs="*", choices=CONFIGS, help="only these configurations (+ baseline)")
    parser.add_argument("--workloads", nargs="*", choices=tuple(WORKLOADS), help="only these workloads")
    parser.add_argument("-o", "--output", metavar="JSON", help="write every value as a pyperf suite")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--sdk-default",
        action="store_true",
        help="every worker's anthropic clients leave the SDK's open_telemetry option unset (see sdk_option)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory-per-stream check")
    parser.add_argument(
        "--profile",
        metavar="WORKLOAD",
        choices=tuple(WORKLOADS),
        help="instead of the benchmark: cProfile of this workload under the first of --configs (default prom_spans)",
    )
    parser.add_argument("--top", type=int, default=25, help="--profile: the functions listed (default 25)")
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--markdown", nargs="+", metavar="ROUNDS_JSON", help="print markdown tables of earlier runs' raw rounds"
    )
    parser.add_argument("--worker", metavar="CONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--calibrate", metavar="MIN_TIME", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--plan", metavar="PATH", help=argparse.SUPPRESS)
    # "--configs a,b" as well as "--configs a b": the commas are split before argparse checks the choices
    split: list[str] = []
    for arg in list(sys.argv[1:] if argv is None else argv):
        split.extend(arg.split(",") if "," in arg and not arg.startswith("-") else [arg])
    return parser.parse_args(split)


def _load_plan(path: str) -> Plan:
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    return Plan(
        raw["base_url"], raw["tokens"], raw["loops"], raw["values"], raw["warmups"], tuple(raw["workloads"]),
        raw.get("sdk_default", False),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.markdown:
        markdown(args.markdown)
        return 0
    if args.profile:
        ensure_bytecode()
        with ChildSimulator() as sim:
            profile(args.profile, (args.configs or ["prom_spans"])[0], sim.base_url, args.top)
        return 0
    if args.memory:
        plan = _load_plan(args.plan)
        sizes = (1, 1_000, plan.tokens)
        json.dump(
            {"identity": stream_memory(plan.base_url, sizes, False), "gzip": stream_memory(plan.base_url, sizes, True)},
            sys.stdout,
        )
        return 0
    if args.worker or args.calibrate:
        import warnings

        warnings.simplefilter("ignore")
        plan = _load_plan(args.plan)
        out: dict[str, Any] = (
            {"loops": calibrate(plan, args.calibrate)} if args.calibrate else worker(args.worker, plan)
        )
        json.dump(out, sys.stdout)
        return 0
    return master(args)


if __name__ == "__main__":
    sys.exit(main())
