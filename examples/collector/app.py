"""The app side of examples/collector: llmtap's metrics and spans over OTLP/HTTP, no /metrics endpoint.

python examples/collector/app.py [--endpoint http://127.0.0.1:4318]   # simulated traffic, no API key

In your application, call :func:`setup` once at start-up.

The same as environment variables only (``opentelemetry-instrument`` finds llmtap by its entry point):
``OTEL_SERVICE_NAME=my-llm-app OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
LLMTAP_PROMETHEUS=false opentelemetry-instrument python app.py`` (llmtap's distro exports over OTLP/HTTP).
"""

from __future__ import annotations

import argparse
import os
import socket

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import llmtap


def setup(
    endpoint: str = "http://127.0.0.1:4318",
    service: str = "my-llm-app",
    settings: llmtap.Settings | None = None,
    export_interval_seconds: float = 15.0,
) -> tuple[MeterProvider, TracerProvider]:
    """Instrument with OTLP exporters only; call ``shutdown()`` on both providers at exit (flushes)."""
    resource = Resource.create(
        {
            "service.name": service,  # becomes the `job` label the alerts group by
            "service.instance.id": f"{socket.gethostname()}-{os.getpid()}",  # the `instance` label
        }
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"),  # cumulative temporality: the default
        export_interval_millis=export_interval_seconds * 1000,
    )
    meter_provider = MeterProvider(metric_readers=[reader], resource=resource)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    settings = settings or llmtap.Settings()
    # prometheus=False: no Prometheus registry in the app; every metric goes through the meter provider
    llmtap.instrument(
        settings.model_copy(update={"prometheus": False, "otel_metrics": True, "traces": True}),
        meter_provider=meter_provider,
        tracer_provider=tracer_provider,
    )
    return meter_provider, tracer_provider


def main() -> None:
    """A few calls to the built-in simulator (no API key), exported to the Collector."""
    import anthropic

    from llmtap.simulator import Simulator

    parser = argparse.ArgumentParser(description="llmtap -> OTLP -> Collector, with simulated LLM traffic")
    parser.add_argument("--endpoint", default="http://127.0.0.1:4318", help="the Collector's OTLP/HTTP endpoint")
    args = parser.parse_args()
    with Simulator() as sim:
        meter_provider, tracer_provider = setup(args.endpoint, settings=llmtap.Settings(base_urls=(sim.base_url,)))
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="not-needed")
        for _ in range(3):
            stream = client.messages.create(
                model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "Hi"}], stream=True
            )
            for _event in stream:
                pass
        client.close()
        llmtap.uninstrument()
        meter_provider.shutdown()  # exports what is left
        tracer_provider.shutdown()
    print(f"sent llmtap metrics and spans to {args.endpoint}")


if __name__ == "__main__":
    main()
