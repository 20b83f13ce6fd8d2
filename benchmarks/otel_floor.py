"""The OpenTelemetry SDK's own floors under llmtap's spans and histogram values, in a warm loop (no llmtap, no SDK
call around them): a CLIENT span with no attributes and with the 14 a non-streaming request's span carries, and
``Histogram.record()`` with 0 to 7 attributes, and a request's four values (operation duration, input and output
token usage, call duration), through ``record()`` and as llmtap hands them to the SDK at collection
(``llmtap._exporters._otel_bulk``, in batches of 64). CPU time, the minimum of 7 runs.

    python benchmarks/otel_floor.py [--loops 20000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from llmtap._exporters._otel_bulk import record_many

START: dict[str, Any] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "server.address": "127.0.0.1",
    "server.port": 8080,
    "gen_ai.request.model": "claude-sonnet-4-6",
    "gen_ai.request.max_tokens": 1024,
    "llmtap.call.id": "fa562992-21",
}
END: dict[str, Any] = {
    "llmtap.outcome": "completed",
    "gen_ai.response.id": "msg_010LGGVmtxIdrbgsSGGdpIFW",
    "gen_ai.response.model": "claude-sonnet-4-6",
    "gen_ai.response.finish_reasons": ("end_turn",),
    "gen_ai.usage.input_tokens": 25,
    "gen_ai.usage.output_tokens": 5,
    "llmtap.request_id": "req_wFrs6hlZzxGIyWhrAgBxKM67",
}
BASE: dict[str, Any] = {
    "gen_ai.provider.name": "anthropic",
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "claude-sonnet-4-6",
    "server.address": "127.0.0.1",
    "server.port": 8080,
    "gen_ai.response.model": "claude-sonnet-4-6",
}


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _cpu_us(fn: Callable[[], None], loops: int) -> float:
    runs = []
    for _ in range(7):
        t0 = time.process_time()
        for _ in range(loops):
            fn()
        runs.append((time.process_time() - t0) / loops * 1e6)
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", type=int, default=20_000)
    args = parser.parse_args()

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(_Discard()))  # every span ended, none queued or dropped
    tracer = tracer_provider.get_tracer("floor")
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    meter = meter_provider.get_meter("floor")
    duration, usage, call = (meter.create_histogram(name) for name in ("duration", "usage", "call"))
    no_span = trace.set_span_in_context(trace.INVALID_SPAN, Context())
    inputs: dict[str, Any] = {**BASE, "gen_ai.token.type": "input"}
    outputs: dict[str, Any] = {**BASE, "gen_ai.token.type": "output"}
    call_attributes: dict[str, Any] = {**{k: BASE[k] for k in list(BASE)[:3]}, "outcome": "completed"}

    def bare_span() -> None:
        tracer.start_span("chat", context=otel_context.get_current(), kind=SpanKind.CLIENT).end()

    def llmtap_span() -> None:
        span = tracer.start_span(
            "chat claude-sonnet-4-6", context=otel_context.get_current(), kind=SpanKind.CLIENT, attributes=START
        )
        span.set_attributes(END)
        span.end()

    def four_values() -> None:
        duration.record(0.5, BASE, no_span)
        usage.record(25, inputs, no_span)
        usage.record(5, outputs, no_span)
        call.record(0.5, call_attributes, no_span)

    print(f"span, no attributes: {_cpu_us(bare_span, args.loops):.1f} µs")
    print(f"span, llmtap's 14 attributes: {_cpu_us(llmtap_span, args.loops):.1f} µs")
    for n in (0, 1, 3, 4, 7):
        attributes = dict(list(inputs.items())[:n])

        def one(attributes: dict[str, Any] = attributes) -> None:
            duration.record(3.0, attributes, no_span)

        print(f"one record(), {n} attributes: {_cpu_us(one, args.loops):.1f} µs")
    print(f"a request's four histogram values: {_cpu_us(four_values, args.loops):.1f} µs")
    # what llmtap pays at collection since _otel_bulk: each series' pending values past record(), 64 at a time
    batch = [0.5] * 64

    def four_values_past_record() -> None:
        for instrument, attributes in ((duration, BASE), (usage, inputs), (usage, outputs), (call, call_attributes)):
            record_many(instrument, attributes, batch, no_span)

    per_request = _cpu_us(four_values_past_record, max(args.loops // 64, 10)) / 64
    print(f"a request's four histogram values, past record() in batches of 64 (llmtap's): {per_request:.1f} µs")
    tracer_provider.shutdown()
    meter_provider.shutdown()


if __name__ == "__main__":
    main()
