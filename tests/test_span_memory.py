"""llmtap's finished spans without the SDK's empty event and link lists (``_exporters/_span_memory.py``), with
the real OpenTelemetry SDK: what a span processor and the OTLP encoder read is unchanged, an event added
after the swap is kept, and anything not laid out as expected is left alone."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext

from llmtap._exporters import _span_memory
from llmtap._exporters._span_memory import slim
from llmtap._log import internal_errors
from tests.test_tracing import Spans


class Provider:
    def __init__(self, limits: SpanLimits | None = None) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(span_limits=limits)
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("test")

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.memory.get_finished_spans()


@pytest.fixture
def otel() -> Iterator[Provider]:
    made = Provider()
    yield made
    made.provider.shutdown()


def _slimmed(lst: object) -> bool:
    return isinstance(lst, BoundedList) and type(lst) is not BoundedList and "_dq" not in vars(lst)


def _otlp(span: ReadableSpan) -> Any:
    """The span as the OTLP exporters send it, without what differs between two spans made alike."""
    proto = encode_spans([span]).resource_spans[0].scope_spans[0].spans[0]
    proto.ClearField("trace_id")
    proto.ClearField("span_id")
    return proto


def test_an_ended_span_holds_no_deque_and_reads_and_encodes_as_the_sdk_s_own(otel: Provider) -> None:
    kept = otel.tracer.start_span("kept", attributes={"a": 1}, start_time=1)
    kept.end(end_time=2)
    slimmed = otel.tracer.start_span("kept", attributes={"a": 1}, start_time=1)
    slim(slimmed)
    slimmed.end(end_time=2)
    plain, light = otel.finished()
    assert type(plain._events) is BoundedList and type(plain._links) is BoundedList  # the control
    assert _slimmed(light._events) and _slimmed(light._links)
    assert (light.events, light.links, light.dropped_events, light.dropped_links) == ((), (), 0, 0)
    as_json = {key: value for key, value in json.loads(light.to_json()).items() if key != "context"}
    assert as_json == {key: value for key, value in json.loads(plain.to_json()).items() if key != "context"}
    assert _otlp(light) == _otlp(plain)
    assert copy.deepcopy(light).events == ()
    assert "maxlen=128" in repr(light._events)


def test_empty_lists_share_no_lock_and_an_appended_one_has_its_own(otel: Provider) -> None:
    """A lock shared by every empty list, held by one thread when another forks, would leave them all locked
    in the child (its span export blocked on the first span it encodes)."""
    one, two = otel.tracer.start_span("one"), otel.tracer.start_span("two")
    slim(one)
    slim(two)
    empty_one, empty_two = one._events, two._events  # type: ignore[attr-defined]
    assert _slimmed(empty_one) and _slimmed(empty_two)
    assert isinstance(empty_one._lock, contextlib.nullcontext)
    one.add_event("e")  # the control: an appended list has a lock, its own
    assert isinstance(empty_one._lock, type(threading.Lock())) and empty_one._lock is not empty_two._lock
    assert isinstance(empty_two._lock, contextlib.nullcontext)


def test_an_event_added_after_the_swap_is_kept_and_counted_past_the_limit() -> None:
    otel = Provider(SpanLimits(max_events=2))
    span = otel.tracer.start_span("late")
    slim(span)
    assert _slimmed(span._events)  # type: ignore[attr-defined]
    for name in ("one", "two", "three"):  # another thread, between the swap and the end
        span.add_event(name)
    span.end()
    (done,) = otel.finished()
    assert [event.name for event in done.events] == ["two", "three"] and done.dropped_events == 1
    assert done.links == () and done.dropped_links == 0
    otel.provider.shutdown()


def test_a_link_is_kept_and_a_list_with_something_in_it_is_left_alone(otel: Provider) -> None:
    previous = otel.tracer.start_span("first")
    previous.end()
    span = otel.tracer.start_span("retry", links=[Link(previous.get_span_context(), {"k": "v"})])
    span.add_event("before")
    slim(span)
    assert type(span._links) is BoundedList and type(span._events) is BoundedList  # type: ignore[attr-defined]
    span.end()
    done = otel.finished()[-1]
    assert [link.context for link in done.links] == [previous.get_span_context()]
    assert [event.name for event in done.events] == ["before"]


def test_spans_that_are_not_the_sdk_s_or_have_ended_are_left_alone(otel: Provider) -> None:
    before = internal_errors()["sink"]
    slim(NonRecordingSpan(SpanContext(1, 2, False)))  # no lists to swap, no error
    ended = otel.tracer.start_span("ended")
    ended.end()
    slim(ended)
    assert type(ended._events) is BoundedList  # type: ignore[attr-defined]
    assert internal_errors()["sink"] == before


def test_a_sdk_laid_out_otherwise_keeps_its_lists(otel: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_span_memory, "_layouts", {})
    monkeypatch.setattr(_span_memory, "_reads_empty", lambda *_: False)
    span = otel.tracer.start_span("other")
    slim(span)
    assert type(span._events) is BoundedList  # type: ignore[attr-defined]
    monkeypatch.undo()  # the control: the same span type is swapped where the layout checks out
    span = otel.tracer.start_span("same")
    slim(span)
    assert _slimmed(span._events)  # type: ignore[attr-defined]


def test_a_failing_swap_is_counted_once_and_not_tried_again(otel: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_span_memory, "_broken", False)
    before = internal_errors().get("sink", 0)
    span = otel.tracer.start_span("failing")

    class Failing:
        def __enter__(self) -> None:
            raise RuntimeError("boom")

        def __exit__(self, *exc: object) -> None: ...

    span._lock = Failing()  # type: ignore[attr-defined]
    slim(span)
    slim(span)
    assert internal_errors().get("sink", 0) == before + 1
    fresh = otel.tracer.start_span("after")
    slim(fresh)
    assert type(fresh._events) is BoundedList  # type: ignore[attr-defined]


def test_events_added_from_another_thread_while_spans_end_are_all_kept_or_refused(otel: Provider) -> None:
    """The swap and the SDK's appends take the span's lock: an event is in the exported span, or was refused
    because the span had ended (the SDK's warning), never lost or failed."""
    refused = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            refused.append(record)

    handler = Count(logging.WARNING)
    sdk_log = logging.getLogger("opentelemetry.sdk.trace")
    sdk_log.addHandler(handler)
    errors: list[BaseException] = []
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
            slim(span)
            span.end()
            thread.join()
    finally:
        sdk_log.removeHandler(handler)
    kept = sum(len(span.events) for span in otel.finished())
    assert not errors and kept + len(refused) == n
    assert any(_slimmed(span._events) for span in otel.finished())  # the swap did happen in this run


def test_llmtap_s_attempt_spans_are_swapped() -> None:
    spans = Spans()
    spans.attempt(operation="chat", request_model="claude")
    spans.attempt(call_id="c-1")
    spans.attempt(call_id="c-1", resend_count=1)  # links to the first: its link list stays the SDK's
    one, first, retry = spans.finished()
    assert _slimmed(one._events) and _slimmed(one._links) and _slimmed(retry._events)
    assert type(retry._links) is BoundedList and len(retry.links) == 1 and first.links == ()
    spans.provider.shutdown()
