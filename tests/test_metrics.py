"""The mapping from records to measurements (``llmtap._core.mapping.Mapping``), which both metric
exporters consume: every instrument is produced by some record, the series that exist up front, and
each choice the settings make. A pure unit: records in, measurements out (no wire)."""

from __future__ import annotations

import pytest

import llmtap
from llmtap._core.mapping import Buckets, Mapping, Measurement, base_key
from llmtap._core.metrics import (
    COST_TYPES,
    INSTRUMENTS,
    SEMCONV_ATTRIBUTES,
    TOKEN_TYPES,
    switched_off,
)
from llmtap._core.record import ALL_OUTCOMES, AttemptRecord, Outcome, RateLimit, Usage
from tests.support.records import GAPS, call, record, start


def everything(mapping: Mapping) -> list[Measurement]:
    """What a retried stream, its record (priced, its model's window known), an unpriced record of a model
    without a known window and its call make."""
    return [
        *mapping.start(start(retry_reason="429")),
        *mapping.end(record(), in_flight=True),
        *mapping.rate_limits(record()),
        *mapping.end(record(cost=None, context_window=None)),
        *mapping.call_end(call()),
    ]


def test_every_instrument_is_produced_by_some_record() -> None:
    measured = {name for name, _, _ in everything(Mapping())}
    assert measured == {i.key for i in INSTRUMENTS}


@pytest.mark.parametrize("semconv_attributes", [False, True])
def test_labels_match_the_attribute_names(semconv_attributes: bool) -> None:
    mapping = Mapping(semconv_attributes=semconv_attributes)
    for name, _, labels in [*everything(mapping), *mapping.initial]:
        assert len(labels) == len(mapping.attributes[name]), name


def test_one_streamed_attempt_measures_what_the_native_exporter_always_did() -> None:
    out = Mapping().end(record(), in_flight=True)
    assert ("in_flight", -1, ()) in out
    assert ("attempts", 1, ("200", "")) in out
    assert ("duration", 2.0, ("",)) in out
    assert ("ttft", 0.3, ()) in out  # the first output, not the first body chunk (0.2)
    assert not [m for m in out if m[0] != "cost" and m[1] == 0.2]
    assert ("gap", Buckets(GAPS, 3.05, 3.0), ()) in out  # pre-bucketed: one measurement, not one per gap
    assert ("streams", 1, ("completed",)) in out
    assert ("stalls", 1, ()) in out and ("parse_errors", 2, ()) in out and ("retry_after", 1.5, ()) in out
    assert [(v, labels) for name, v, labels in out if name == "tokens"] == [
        (100, ("input",)), (20, ("output",)), (30, ("cache_read",)), (40, ("cache_write",)), (5, ("reasoning",))
    ]  # fmt: skip
    assert [(v, labels) for name, v, labels in out if name == "usage"] == [(100, ("input",)), (20, ("output",))]
    assert [(v, labels) for name, v, labels in out if name == "cost"] == list(
        zip((0.1, 0.2, 0.03, 0.04), ((t,) for t in COST_TYPES), strict=True)
    )
    assert ("cost_savings", 0.05, ()) in out and ("stop_reasons", 1, ("end_turn",)) in out
    assert not any(name.startswith("ratelimit") for name, _, _ in out)  # converted when read: rate_limits()
    assert [m for m in out if m[0] in ("server_reported", "client_observed")] == [
        ("server_reported", 0.08, ("x-envoy-upstream-service-time",)),
        ("client_observed", 0.1, ("x-envoy-upstream-service-time",)),
        ("server_reported", 1.5, ("latencyMs",)),
        ("client_observed", 2.0, ("latencyMs",)),
    ]  # one pair per source the response reported, whatever the outcome (the pair is one exchange's two views)


def test_a_failed_json_attempt() -> None:
    failed = record(
        streamed=False, request_stream=False, status_code=529, error_type="overloaded_error",
        outcome=Outcome.REJECTED, usage=Usage(), stop_reasons=(), cost=None, parse_errors=0, stalls=0,
        server_times=(),
    )  # fmt: skip
    out = Mapping().end(failed)
    assert {name for name, _, _ in out} == {"attempts", "duration", "retry_after"}
    assert ("attempts", 1, ("529", "overloaded_error")) in out
    assert ("duration", 2.0, ("overloaded_error",)) in out
    # no response at all: the status label is empty; a stream request counts its outcome
    out = Mapping().end(record(streamed=False, status_code=None, error_type="ConnectError", usage=Usage()))
    assert ("attempts", 1, ("", "ConnectError")) in out and ("streams", 1, ("completed",)) in out


def test_rate_limits_are_the_values_given() -> None:
    assert Mapping().rate_limits(record()) == [
        ("ratelimit_limit", 50.0, ("requests",)),
        ("ratelimit_remaining", 49.0, ("requests",)),
        ("ratelimit_remaining", 1000.0, ("tokens",)),
        ("ratelimit_reset", 7.0, ("tokens",)),
    ]
    assert Mapping().rate_limited
    assert not Mapping(["ratelimit_limit", "ratelimit_remaining", "ratelimit_reset"]).rate_limited


def test_start_counts_retries_and_streams_in_flight() -> None:
    mapping = Mapping()
    assert mapping.start(start()) == [("in_flight", 1, ())]
    assert mapping.start(start(request_stream=False, retry_reason="timeout")) == [("retries", 1, ("timeout",))]
    assert mapping.start(start(request_stream=None)) == []
    assert ("in_flight", -1, ()) not in mapping.end(record())  # its start counted none


def test_call_end() -> None:
    assert Mapping().call_end(call()) == [("call_duration", 3.0, ("completed",)), ("call_ttft", 0.5, ())]
    assert Mapping().call_end(call(first_token_at=None, outcome=Outcome.TIMEOUT)) == [
        ("call_duration", 3.0, ("timeout",))
    ]


def test_pre_created_series() -> None:
    initial = {(name, labels) for name, value, labels in Mapping().initial if value == 0}
    assert initial == {
        ("attempts", ("200", "")),
        ("retries", ("429",)),
        ("retries", ("529",)),
        *(("streams", (o.value,)) for o in ALL_OUTCOMES),
        *(("tokens", (t,)) for t in TOKEN_TYPES),
        ("in_flight", ()),
        ("stalls", ()),
        ("parse_errors", ()),
        ("unpriced", ()),
        ("context_unknown", ()),
    }
    assert len(Mapping().initial) == len(initial)
    unpriced = {name for name, _, _ in Mapping(["cost"]).initial}
    assert "unpriced" not in unpriced and "attempts" in unpriced  # cost off: no unpriced series


def test_an_attempt_with_input_tokens_is_measured_against_its_window_or_counted_unknown() -> None:
    """Exactly one of the two, whatever the ending; nothing without input tokens."""
    mapping = Mapping()

    def window_measurements(r: AttemptRecord) -> list[Measurement]:
        return [m for m in mapping.end(r) if m[0] in ("context_utilization", "context_unknown")]

    assert window_measurements(record()) == [("context_utilization", 0.25, ())]  # 100 input tokens of 400
    assert window_measurements(record(context_window=None)) == [("context_unknown", 1, ())]
    aborted = record(outcome=Outcome.CLIENT_CLOSED, usage=Usage(300, None, None, None, None))  # message_start's
    assert window_measurements(aborted) == [("context_utilization", 0.75, ())]
    assert window_measurements(record(context_window=50)) == [("context_utilization", 2.0, ())]  # over: +Inf
    for nothing in (Usage(), Usage(0, 5, None, None, None)):
        assert window_measurements(record(usage=nothing)) == []
        assert window_measurements(record(usage=nothing, context_window=None)) == []
    assert record().context_utilization == 0.25 and record(context_window=None).context_utilization is None
    off = Mapping(["llmtap.context_window.utilization", "llmtap_context_window_unknown_total"])
    assert not off.windowed and mapping.windowed
    assert not [m for m in off.end(record()) + off.end(record(context_window=None)) if m[0].startswith("context")]


def test_excluded_instruments_make_no_measurements() -> None:
    mapping = Mapping(["llmtap.retry_after", "llmtap_tokens_total", "llmtap_streams", "stalls"])
    names = {name for name, _, _ in [*everything(mapping), *mapping.initial]}
    assert names == {i.key for i in INSTRUMENTS} - {"retry_after", "tokens", "streams", "stalls"}
    assert {i.key for i in mapping.instruments} == names
    with pytest.raises(ValueError, match="unknown metric name"):
        Mapping(["llmtap_nope"])


def test_semconv_attributes_only_on_the_semconv_histograms() -> None:
    mapping = Mapping(semconv_attributes=True)
    for spec in INSTRUMENTS:
        assert (mapping.attributes[spec.key][-3:] == SEMCONV_ATTRIBUTES) is spec.semconv, spec.key
        assert Mapping().attributes[spec.key] == spec.attributes
    out = mapping.end(record(error_type="overloaded_error"))
    assert ("duration", 2.0, ("overloaded_error", "api.example", 443, "m-2025")) in out
    assert ("ttft", 0.3, ()) in out  # not a semconv instrument
    assert ("usage", 100, ("input", "api.example", 443, "")) in mapping.end(record(response_model=None))


@pytest.mark.parametrize(
    ("generation", "present", "absent"),
    [
        ("legacy", {"usage"}, {"inference_input", "inference_output"}),
        ("latest", {"inference_input", "inference_output"}, {"usage"}),
        ("both", {"usage", "inference_input", "inference_output"}, set()),
    ],
)
def test_genai_semconv_generations(generation: str, present: set[str], absent: set[str]) -> None:
    settings = llmtap.Settings(genai_semconv=generation, cost=False)  # type: ignore[arg-type]
    off = switched_off(settings)
    assert {"cost", "cost_savings", "unpriced"} <= off
    names = {name for name, _, _ in Mapping(off).end(record())}
    assert present <= names and not absent & names
    if "inference_input" in present:
        assert ("inference_input", 100, ()) in Mapping(off).end(record())


@pytest.mark.parametrize(("outcome", "error_type"), [
    (Outcome.INCOMPLETE, "incomplete_stream"),
    (Outcome.SERVER_ERROR, "overloaded_error"),
    (Outcome.CLIENT_CLOSED, None),
])  # fmt: skip
def test_token_histograms_leave_out_attempts_that_did_not_complete(outcome: Outcome, error_type: str | None) -> None:
    """The GenAI conventions' rule: a failed attempt adds nothing to the token distributions (nor does an aborted
    one: its counts are partial); its tokens still go to the counters (spend). A completed one adds to both."""
    settings = llmtap.Settings(genai_semconv="both", cost=False)
    mapping = Mapping(switched_off(settings))
    histograms = {"usage", "inference_input", "inference_output"}
    failed = mapping.end(record(outcome=outcome, error_type=error_type))
    assert not [m for m in failed if m[0] in histograms]
    assert ("tokens", 100, ("input",)) in failed and ("tokens", 20, ("output",)) in failed
    succeeded = {name for name, _, _ in mapping.end(record())}
    assert histograms <= succeeded and "tokens" in succeeded


def test_cost_on_prices_or_counts_the_unpriced() -> None:
    assert switched_off(llmtap.Settings(cost=True)) == {
        "inference_input",
        "inference_output",
    }
    mapping = Mapping()
    assert ("unpriced", 1, ()) in mapping.end(record(cost=None))
    assert not [m for m in mapping.end(record(cost=None, usage=Usage(0, 0))) if m[0] == "unpriced"]  # no tokens
    assert not [m for m in mapping.end(record()) if m[0] == "unpriced"]


def test_base_key_carries_the_attribute_labels() -> None:
    assert base_key(record(attribute_labels=("search", ""))) == ("anthropic", "chat", "m", "search", "")
    assert base_key(call()) == ("anthropic", "chat", "m")


@pytest.mark.parametrize("created_series", [False, True])
def test_both_prometheus_adapters_expose_the_same(monkeypatch: pytest.MonkeyPatch, created_series: bool) -> None:
    """The folding collector (built at scrape) and the metric objects multiprocess mode writes through
    expose the same text for the same records: one mapping, two adapters."""
    from prometheus_client import CollectorRegistry, generate_latest, values

    from llmtap._exporters._prometheus_multiprocess import Objects
    from llmtap._exporters.prometheus import PrometheusExporter, _Folded

    def feed(exporter: PrometheusExporter) -> str:
        for attempt, ended in [
            (start(retry_reason="429"), record()),
            (start(request_stream=False), record(streamed=False, request_stream=False, cost=None)),
            (start(attribute_labels=()), record(status_code=529, error_type="overloaded_error", usage=Usage())),
        ]:
            exporter.end(ended, exporter.start(attempt))
        exporter.call_end(call())
        lines = generate_latest(exporter.registry).decode().splitlines()
        lines = [line.rsplit(" ", 1)[0] if "_created{" in line else line for line in lines]  # times differ
        return "\n".join(sorted(lines))

    folded = PrometheusExporter(CollectorRegistry(), created_series=created_series)
    assert isinstance(folded._store, _Folded)

    class _Mutex(values.MutexValue):
        """A value class other than prometheus-client's own: the exporter takes it for multiprocess mode."""

    monkeypatch.setattr(values, "ValueClass", _Mutex)
    objects = PrometheusExporter(CollectorRegistry(), created_series=created_series)
    assert isinstance(objects._store, Objects)
    exposed = feed(folded)
    assert "llmtap_ratelimit_remaining" in exposed and 'le="+Inf"' in exposed  # positive control
    assert ("_created{" in exposed) is created_series
    base = {"gen_ai_provider_name": "anthropic", "gen_ai_operation_name": "chat", "gen_ai_request_model": "m"}
    sample = folded.registry.get_sample_value("llmtap_attempts_total", {**base, "status_code": "200", "error_type": ""})
    assert sample == 2.0 and isinstance(sample, float)  # floats, as prometheus-client's own values
    assert exposed == feed(objects)


def test_the_records_rate_limits_read_back_from_the_raw_header_values() -> None:
    assert record().rate_limits == (RateLimit("requests", 50.0, 49.0, None), RateLimit("tokens", None, 1000.0, 7.0))


def test_cache_token_series_exist_when_the_provider_reported_them_even_at_zero() -> None:
    """A provider that reports its cache reads as 0 keeps the series (a 0 % hit ratio, which the prompt-cache
    alert reads); one that does not report them has none ("not reported", not 0 %)."""
    reported = Mapping().end(record(usage=Usage(100, 20, 0, 0, None)))
    assert ("tokens", 0, ("cache_read",)) in reported and ("tokens", 0, ("cache_write",)) in reported
    silent = Mapping().end(record(usage=Usage(100, 20, None, None, None)))
    assert not [m for m in silent if m[0] == "tokens" and m[2][0] in ("cache_read", "cache_write")]
    assert ("tokens", 100, ("input",)) in silent  # control: the same attempt's other tokens
