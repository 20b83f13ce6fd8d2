"""llmtap's finished spans hold plain containers, not the SDK's (``_exporters/_span_memory.py``), with the real
OpenTelemetry SDK: what a span processor and the OTLP encoder read is unchanged, what a span holds or dropped
keeps the SDK's containers, every span reaches its own processor, and anything not laid out as expected is
left alone."""

from __future__ import annotations

import copy
import json
import logging
import pickle
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext

from llmtap._exporters import _span_memory
from llmtap._exporters._span_memory import Slimmer
from llmtap._log import internal_errors
from tests.support.spans import Spans

# The span layout the slimmer learns is the same on the floor SDK (make compat runs this file on 1.44.0) and
# the newest (1.45.2): llmtap._fences.SPAN_SLIM's range.


class Provider:
    def __init__(self, limits: SpanLimits | None = None, batch: bool = False) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(span_limits=limits)
        processor = BatchSpanProcessor(self.memory) if batch else SimpleSpanProcessor(self.memory)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("test")

    def finished(self) -> tuple[ReadableSpan, ...]:
        self.provider.force_flush()
        return self.memory.get_finished_spans()


@pytest.fixture
def otel() -> Iterator[Provider]:
    made = Provider()
    yield made
    made.provider.shutdown()


def _slim(span: ReadableSpan) -> bool:
    return span._events == () and span._links == () and type(span._attributes) is _span_memory._Attributes


def _sdk_s(span: ReadableSpan) -> bool:
    return type(span._events) is BoundedList and type(span._attributes) is BoundedAttributes


def _otlp(span: ReadableSpan) -> Any:
    """The span as the OTLP exporters send it, without what differs between two spans made alike."""
    proto = encode_spans([span]).resource_spans[0].scope_spans[0].spans[0]
    proto.ClearField("trace_id")
    proto.ClearField("span_id")
    return proto


def _ended(otel: Provider, name: str, slimmer: Slimmer | None = None, **kwargs: Any) -> ReadableSpan:
    span = otel.tracer.start_span(name, start_time=1, **kwargs)
    if slimmer is not None:
        slimmer.slim(span)
    span.end(end_time=2)
    return otel.finished()[-1]


def test_an_ended_span_holds_plain_containers_and_reads_and_encodes_as_the_sdk_s_own(
    otel: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_span_memory, "_key_sets", {})  # other tests' key sets may have filled the cache
    plain = _ended(otel, "kept", attributes={"a": 1, "b": ("x", "y")})
    light = _ended(otel, "kept", Slimmer(), attributes={"a": 1, "b": ("x", "y")})
    assert _sdk_s(plain) and type(plain._links) is BoundedList  # the control
    assert _slim(light)
    assert (light.events, light.links, light.dropped_events, light.dropped_links) == ((), (), 0, 0)
    assert light.attributes == plain.attributes == {"a": 1, "b": ("x", "y")}
    assert light.dropped_attributes == plain.dropped_attributes == 0
    as_json = {key: value for key, value in json.loads(light.to_json()).items() if key != "context"}
    assert as_json == {key: value for key, value in json.loads(plain.to_json()).items() if key != "context"}
    assert _otlp(light) == _otlp(plain)
    assert copy.deepcopy(light).events == () and pickle.loads(pickle.dumps(light._attributes)) == light.attributes
    assert repr(light._attributes) == repr(dict(plain.attributes)) and "b" in light.attributes
    assert light.attributes.get("c") is None and list(light.attributes.items())[-1] == ("b", ("x", "y"))
    again = _ended(otel, "again", Slimmer(), attributes={"a": 2, "b": ("z",)})
    assert cast(Any, again._attributes)._keys is cast(Any, light._attributes)._keys  # shared


def test_past_the_cap_on_key_sets_a_span_keeps_its_own_keys(otel: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_span_memory, "_key_sets", {})
    monkeypatch.setattr(_span_memory, "_MAX_KEY_SETS", 1)
    slimmer = Slimmer()
    first, again = (_ended(otel, "kept", slimmer, attributes={"a": i}) for i in range(2))
    assert cast(Any, first._attributes)._keys is cast(Any, again._attributes)._keys  # the control: shared
    other, other_again = (_ended(otel, "own", slimmer, attributes={"b": i}) for i in range(2))
    assert cast(Any, other._attributes)._keys is not cast(Any, other_again._attributes)._keys
    assert (other.attributes, other_again.attributes) == ({"b": 0}, {"b": 1}) and len(_span_memory._key_sets) == 1


def test_what_a_span_holds_or_dropped_keeps_the_sdk_s_containers() -> None:
    otel = Provider(SpanLimits(max_events=2, max_span_attributes=2))
    slimmer = Slimmer()
    span = otel.tracer.start_span("events", attributes={"a": 1, "b": 2, "c": 3})
    slimmer.slim(span)
    for name in ("one", "two", "three"):  # another thread, after the slim and before the end
        span.add_event(name)
    span.end()
    (done,) = otel.finished()
    assert [event.name for event in done.events] == ["two", "three"] and done.dropped_events == 1
    assert done.attributes == {"b": 2, "c": 3} and done.dropped_attributes == 1
    assert type(done._events) is BoundedList and type(done._attributes) is BoundedAttributes
    assert done._links == () and done.links == ()  # the control: the empty list still goes
    otel.provider.shutdown()


def test_a_link_is_kept(otel: Provider) -> None:
    previous = _ended(otel, "first").get_span_context()
    assert previous is not None
    retry = _ended(otel, "retry", Slimmer(), links=[Link(previous, {"k": "v"})])
    assert [link.context for link in retry.links] == [previous]
    assert type(retry._links) is BoundedList and retry._events == ()


def test_an_event_after_the_end_is_refused_by_the_sdk_as_before(
    otel: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    span = otel.tracer.start_span("ended")
    Slimmer().slim(span)
    span.end()
    with caplog.at_level(logging.WARNING, "opentelemetry.sdk.trace"):
        span.add_event("late")
        span.set_attribute("late", 1)
    (done,) = otel.finished()
    assert _slim(done) and done.events == () and done.attributes == {}
    assert len([r for r in caplog.records if "ended span" in r.getMessage()]) == 2


def test_each_span_reaches_its_own_processor_and_other_calls_pass_through() -> None:
    """One slimmer, spans of two providers in turn: the stand-in is made again for the other processor."""
    one, two = Provider(batch=True), Provider()
    slimmer = Slimmer()
    for i in range(3):
        for otel in (one, two):
            span = otel.tracer.start_span(f"span {i}")
            slimmer.slim(span)
            standin = span._span_processor  # type: ignore[attr-defined]
            assert type(standin) is _span_memory._StandIn
            assert standin.processor is otel.provider._active_span_processor
            assert standin.force_flush is not None  # every other attribute is the processor's
            span.end()
    for otel in (one, two):
        done = otel.finished()
        assert [span.name for span in done] == ["span 0", "span 1", "span 2"] and all(_slim(s) for s in done)
        otel.provider.shutdown()


def test_a_span_of_one_provider_reuses_the_stand_in(otel: Provider) -> None:
    slimmer = Slimmer()
    first, second = otel.tracer.start_span("1"), otel.tracer.start_span("2")
    slimmer.slim(first)
    slimmer.slim(second)
    assert first._span_processor is second._span_processor  # type: ignore[attr-defined]
    first.end()
    second.end()


def test_spans_that_are_not_the_sdk_s_are_left_alone(otel: Provider) -> None:
    before = internal_errors()["sink"]
    Slimmer().slim(NonRecordingSpan(SpanContext(1, 2, False)))  # nothing to slim, no error
    assert internal_errors()["sink"] == before
    assert _slim(_ended(otel, "control", Slimmer()))


def test_a_sdk_laid_out_otherwise_keeps_its_containers(otel: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_span_memory, "_layouts", {})
    monkeypatch.setattr(_span_memory, "_reads_plain", lambda *_: False)
    assert _sdk_s(_ended(otel, "other", Slimmer()))
    monkeypatch.undo()  # the control: the same span class is slimmed where the layout checks out
    assert _slim(_ended(otel, "same", Slimmer()))


def test_a_failing_slim_is_counted_once_and_the_span_still_reaches_its_processor(
    otel: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_span_memory, "_broken", False)
    before = internal_errors().get("sink", 0)

    def failing(*_: object) -> None:
        raise RuntimeError("boom")

    with monkeypatch.context() as patched:
        patched.setattr(_span_memory, "_slim", failing)
        slimmer = Slimmer()
        spans = [_ended(otel, f"failing {i}", slimmer) for i in range(2)]
    assert [span.name for span in spans] == ["failing 0", "failing 1"] and all(_sdk_s(s) for s in spans)
    assert internal_errors().get("sink", 0) == before + 1
    assert _sdk_s(_ended(otel, "after", Slimmer()))  # not tried again
    assert type(otel.tracer.start_span("x")._span_processor) is not _span_memory._StandIn  # type: ignore[attr-defined]


def test_events_added_from_another_thread_while_spans_end_are_all_kept_or_refused(otel: Provider) -> None:
    """The SDK appends under the span's lock and refuses once the span has ended, before the stand-in reads
    the lists: an event is in the exported span, or was refused (the SDK's warning), never lost or failed."""
    refused = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            refused.append(record)

    handler = Count(logging.WARNING)
    sdk_log = logging.getLogger("opentelemetry.sdk.trace")
    sdk_log.addHandler(handler)
    errors: list[BaseException] = []
    slimmer = Slimmer()
    n = 400
    try:
        for _ in range(n):
            span = otel.tracer.start_span("raced")
            go = threading.Event()

            def add(span: Any = span, go: threading.Event = go) -> None:
                go.wait()
                try:
                    span.add_event("e")
                except BaseException as exc:  # pragma: no cover - the failure this test looks for
                    errors.append(exc)

            thread = threading.Thread(target=add)
            thread.start()
            go.set()
            slimmer.slim(span)
            span.end()
            thread.join()
    finally:
        sdk_log.removeHandler(handler)
    finished = otel.finished()
    kept = sum(len(span.events) for span in finished)
    assert not errors and kept + len(refused) == n
    assert any(span._events == () for span in finished)  # slimming did happen in this run


def test_llmtap_s_attempt_spans_are_slim_with_slim_spans() -> None:
    spans = Spans(slim=True)  # Settings.slim_spans: off by default (tests/test_fences.py)
    spans.attempt(operation="chat", request_model="claude")
    spans.attempt(call_id="c-1")
    spans.attempt(call_id="c-1", resend_count=1)  # links to the first: its link list stays the SDK's
    one, first, retry = spans.finished()
    assert _slim(one) and _slim(first) and retry._events == ()
    assert type(retry._attributes) is _span_memory._Attributes
    assert type(retry._links) is BoundedList and len(retry.links) == 1 and first.links == ()
    spans.provider.shutdown()
