"""Bounded series whatever a server sends: distinct stop reasons, error types and response models
from the wire stay within the configured limits on every sink (Prometheus, OTel metrics, spans),
each replacement is counted, and hostile values leave the exposition text valid."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from itertools import count
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import llmtap
from llmtap._core.bounds import MAX_LABEL_LENGTH, LabelBound, sanitize
from llmtap._instrumentor import LlmtapInstrumentor
from llmtap._log import label_overflows
from llmtap._providers._catalog import ENTRIES, parser
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import RecordingSink, capture
from tests.support.prom import require
from tests.support.rawserver import RawServer, Reply, Seen, http_response

# -- the bound itself ------------------------------------------------------------------------------


def test_known_values_pass_unknown_up_to_the_limit_then_overflow() -> None:
    before = label_overflows().get("t", 0)
    bound = LabelBound("t", 3, "_other", known=("end_turn", "stop"))
    assert [bound(v) for v in ("end_turn", "a", "b", "stop", "c", "d", "a", "e")] == [
        "end_turn", "a", "b", "stop", "c", "_other", "a", "_other",
    ]  # fmt: skip
    assert bound.admitted == 3
    assert label_overflows()["t"] - before == 2  # each replacement counted
    # what a call answers for a value seen, read without one (RecordBounds.apply's shortcut)
    assert bound.seen.get("a") == "a" and bound.seen.get("end_turn") == "end_turn"
    assert bound.seen.get("d") == "_other" and bound.seen.get("never") is None


def test_sanitised_values() -> None:
    assert sanitize("x" * 1000) == "x" * MAX_LABEL_LENGTH
    assert sanitize("a\nb\rc\x00d\x7fe\x85f\ud800g") == "abcdefg"  # controls, C1, lone surrogate
    assert sanitize('héllo ✓ "quoted" back\\slash') == 'héllo ✓ "quoted" back\\slash'  # valid text kept


def test_sanitize_drops_exactly_the_controls_and_surrogates() -> None:
    """Every code point: C0, DEL, C1 and the surrogates go; the rest stays, including what
    ``str.isprintable()`` refuses (spaces, format characters, unassigned code points)."""
    dropped = [cp for cp in range(0x110000) if sanitize(chr(cp)) == ""]
    assert dropped == [*range(0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]
    kept = "a\u00a0b\u200bc\u2028d\U000e0001e\U0010ffff"
    assert not kept.isprintable() and sanitize(kept + "\x00") == kept
    bound = LabelBound("t2", 5, "_other")
    assert bound("\n\x00") == "_other"  # nothing left: replaced, never an empty label value
    assert bound("a\nb") == bound("ab") == "ab"  # one admitted value for both spellings
    assert bound.admitted == 1


def test_a_bound_under_threads_admits_exactly_the_limit() -> None:
    bound = LabelBound("t3", 50, "_other")
    seen: list[str] = []
    lock = threading.Lock()

    def hammer(offset: int) -> None:
        out = [bound(f"v{(offset + i) % 400}") for i in range(2000)]
        with lock:
            seen.extend(out)

    threads = [threading.Thread(target=hammer, args=(n * 37,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bound.admitted == 50
    assert len(set(seen)) == 51  # 50 values and the overflow


def test_every_provider_documents_its_values() -> None:
    for entry in ENTRIES:
        assert entry.stop_reasons and entry.error_types, entry.module
        assert all(sanitize(v) == v for v in entry.stop_reasons | entry.error_types)
        provider = parser(entry)  # the parser declares what its catalog entry says
        assert (provider.path_suffixes, provider.stop_reasons, provider.error_types) == entry[1:], entry.module


def test_request_models_past_the_limit_are_other_on_the_record(sim: Simulator) -> None:
    """On the record itself, so on every sink (the module's flooded server below checks the sinks)."""
    settings = llmtap.Settings(base_urls=(sim.base_url,), max_models=2)
    with capture(settings) as cap, httpx2.Client() as client:
        for i in range(4):
            body = {"model": f"m{i}", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
            client.post(sim.base_url + "/v1/messages", json=body, headers=Scenario(tokens=1).headers()).read()
        cap.wait(4)
        assert [r.request_model for r in cap.records] == ["m0", "m1", "_other", "_other"]


# -- end to end: a server sending a new value every time ------------------------------------------

N = 400
LIMIT = 8


class Tapped:
    def __init__(self, base_url: str) -> None:
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.recording = RecordingSink()
        self.instrumentor = LlmtapInstrumentor()
        settings = llmtap.Settings(
            base_urls=(base_url,), max_models=LIMIT, max_stop_reasons=LIMIT, max_error_types=LIMIT
        )
        self.instrumentor.instrument(
            settings=settings,
            registry=self.registry,
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            extra_sinks=[self.recording],
        )


def _hostile(n: int) -> str:
    """A distinct value per request, some of them long or full of control characters."""
    return [f"reason-{n}", f"x{n}" + "y" * 500, f'a\n# HELP fake\n{n}\x00"}}', f"\ud800{n}\u2028"][n % 4]


_REQUESTS = count()


def _reply(seen: Seen) -> Reply:
    n = next(_REQUESTS)
    value = _hostile(n)
    if n % 2:
        body = {"type": "error", "error": {"type": value, "message": "m"}}
        status = 500
    else:
        usage = {"input_tokens": 1, "output_tokens": 2}
        body = {"type": "message", "id": f"msg_{n}", "model": value, "stop_reason": value, "usage": usage}
        status = 200
    data = json.dumps(body).encode()  # lone surrogates become \ud800 escapes, as a server would send
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    return Reply([http_response(status, headers, data)])


@pytest.fixture(scope="module")
def flooded() -> Iterator[tuple[Tapped, bytes]]:
    with RawServer(_reply) as server:
        tapped = Tapped(server.base_url)
        try:
            with httpx2.Client() as client:
                for n in range(N):
                    body = {"model": f"req-model-{n}", "max_tokens": 5, "messages": []}
                    client.post(server.base_url + "/v1/messages", json=body)
            tapped.recording.wait(N, calls=N)
            exposition = generate_latest(tapped.registry)
            yield tapped, exposition
        finally:
            tapped.instrumentor.uninstrument()


def _label_values(exposition: bytes, family: str, label: str) -> set[str]:
    for metric in text_string_to_metric_families(exposition.decode("utf-8")):
        if metric.name == family:
            return {s.labels[label] for s in metric.samples if label in s.labels}
    raise AssertionError(f"{family} not exported")


def test_prometheus_series_stay_bounded(flooded: tuple[Tapped, bytes]) -> None:
    _, exposition = flooded
    reasons = _label_values(exposition, "llmtap_stop_reasons", "reason")
    errors = _label_values(exposition, "llmtap_attempts", "error_type")
    models = _label_values(exposition, "llmtap_attempts", "gen_ai_request_model")
    assert len(reasons) == LIMIT + 1 and "_other" in reasons  # N/2 distinct reasons sent
    assert len(errors - {""}) == LIMIT + 1 and "_other" in errors  # N/2 distinct error types sent
    assert len(models) == LIMIT + 1 and "_other" in models  # N distinct request models sent
    durations = _label_values(exposition, "gen_ai_client_operation_duration_seconds", "error_type")
    assert durations == errors
    assert all(len(v) <= MAX_LABEL_LENGTH and "\n" not in v for v in reasons | errors)


def test_overflows_are_counted_and_exported(flooded: tuple[Tapped, bytes]) -> None:
    _, exposition = flooded
    exported = {
        s.labels["label"]: s.value
        for m in text_string_to_metric_families(exposition.decode())
        if m.name == "llmtap_label_overflows"
        for s in m.samples
    }
    counted = label_overflows()
    assert exported == {k: float(counted.get(k, 0)) for k in exported}
    # at least these many replacements happened in this module's flood (other tests add their own)
    assert exported["stop_reason"] >= N // 2 - LIMIT
    assert exported["error_type"] >= N // 2 - LIMIT
    assert exported["request_model"] >= N - LIMIT
    assert exported["response_model"] >= N // 2 - LIMIT


def test_exposition_stays_valid_for_promtool(flooded: tuple[Tapped, bytes]) -> None:
    _, exposition = flooded
    result = subprocess.run([require("promtool"), "check", "metrics"], input=exposition, capture_output=True)
    # promtool lints too (e.g. counters without _total); only parse errors matter here
    assert b"error while linting" not in result.stderr and b"parse" not in result.stderr.lower(), result.stderr


def test_otel_metric_points_stay_bounded(flooded: tuple[Tapped, bytes]) -> None:
    tapped, _ = flooded
    data = tapped.reader.get_metrics_data()
    assert data is not None
    points: list[Any] = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "gen_ai.client.operation.duration"
        for point in metric.data.data_points
    ]
    response_models = {p.attributes.get("gen_ai.response.model") for p in points} - {None}
    error_types = {p.attributes.get("error.type") for p in points} - {None}
    assert len(response_models) == LIMIT + 1 and len(error_types) == LIMIT + 1
    assert len(points) <= (LIMIT + 1) * (LIMIT + 2) * (LIMIT + 2)  # far below the SDK's 2,000 cap


def test_span_attributes_are_bounded(flooded: tuple[Tapped, bytes]) -> None:
    tapped, _ = flooded
    spans = tapped.spans.get_finished_spans()
    assert len(spans) == N
    models = {s.attributes.get("gen_ai.response.model") for s in spans if s.attributes} - {None}
    assert len(models) == LIMIT + 1
    for span in spans:
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                assert sanitize(value) == value or value.startswith(("chat ", "req-model")), value


def test_positive_control_without_limits_values_pass() -> None:
    """The same flood under the default limits: the first values pass as sent (sanitised)."""
    bound = LabelBound("control", 1000, "_other")
    assert [bound(_hostile(n)) for n in range(4)] == [sanitize(_hostile(n)) for n in range(4)]
    assert bound(_hostile(0)) == "reason-0"
