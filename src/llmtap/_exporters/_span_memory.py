"""Less memory per finished span: the ``ReadableSpan`` an attempt span becomes holds plain containers.

Opt-in (``Settings.slim_spans``, whose docstring says what it changes for span processors), and taken only
on the OpenTelemetry SDK versions it is tested on (:data:`llmtap._fences.SPAN_SLIM`, asked once when the
tracing exporter is built); :func:`_learn`'s layout check is the second guard.

Why llmtap reaches under the SDK's API here: the OpenTelemetry SDK (1.45) gives every span a
``BoundedAttributes`` (a dict, a wrapper and a lock) and two ``BoundedList`` s, for events and links (a
``deque`` and a lock each). The ``ReadableSpan`` that ``end()`` hands to the span processors refers to all
three, so they live as long as it does: the application's ``BatchSpanProcessor`` keeps every finished span
until its next export, up to 512 by default between two exports (2,048 when the exporter falls behind).
llmtap's spans carry no events, a link only on a retry, and attributes within the limits.

So just before llmtap ends one of its spans, :meth:`Slimmer.slim` points the span at a stand-in for its span
processor (:class:`_StandIn`, one per processor). The stand-in passes every call through, but first gives the
``ReadableSpan`` that ``on_end`` receives the plain containers a ``ReadableSpan`` built by hand may hold: ``()``
for a list that is empty and dropped nothing, and for attributes that dropped nothing an immutable mapping of
two tuples (:class:`_Attributes`: ~200 bytes for llmtap's 14 attributes, a dict of them ~460).
By then the span has ended: the SDK refuses, under the span's lock, any later attribute, event or link, so
those containers are final. Readers get the same values (``events == ()``, ``dropped_* == 0``, the same
attributes, the same OTLP encoding); the span's own containers go with the span, once llmtap drops it.

Where nothing changes, so the SDK's own objects stay: a span that is not the SDK's (a proxy, a non-recording
span, another SDK), an SDK laid out otherwise than :func:`_learn` checks on the first span of each class (said
at DEBUG), a container that holds something or dropped something, more than :data:`_MAX_TYPES` span classes.
If slimming fails anyway, it is counted once as an internal error ("sink") and never tried again; the span
processor is called all the same.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

from llmtap._log import internal_error, logger

__all__ = ["Slimmer"]

_MAX_TYPES = 8
"""Span classes learnt: a process has one or two; past that, spans of a new class are left alone."""

_layouts: dict[type, _Layout | None] = {}
"""Span class -> the SDK types its ended spans are read with, or None where they are left alone."""
_broken = False
_MAX_KEY_SETS = 64
"""Attribute key tuples shared by the spans that have those keys in that order (llmtap's spans have a few
sets: with or without an error, cache tokens ...); past that, a span keeps a key tuple of its own."""
_key_sets: dict[tuple[str, ...], tuple[str, ...]] = {}


class _Attributes(Mapping[str, Any]):
    """An ended span's attributes: its keys (a tuple shared with the spans that have the same) and values."""

    __slots__ = ("_keys", "_values")

    def __init__(self, keys: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self._keys = keys
        self._values = values

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[self._keys.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Attributes, (self._keys, self._values))


def _compact(attributes: dict[str, Any]) -> _Attributes:
    keys = tuple(attributes)
    shared = _key_sets.get(keys)
    if shared is None:
        shared = keys
        if len(_key_sets) < _MAX_KEY_SETS:
            _key_sets[keys] = keys
    return _Attributes(shared, tuple(attributes.values()))


class _Layout:
    """The SDK types of one span class: the ``ReadableSpan`` its ``end()`` makes, and the attribute and list
    containers that ``ReadableSpan`` may refer to."""

    __slots__ = ("attributes", "bounded", "readable")

    def __init__(self, readable: type[Any], attributes: type[Any], bounded: type[Any]) -> None:
        self.readable = readable
        self.attributes = attributes
        self.bounded = bounded


class _StandIn:
    """Stands in for one span processor on llmtap's spans: ``on_end`` slims the ``ReadableSpan`` first, every
    other attribute (``on_start`` ...) is the processor's own."""

    __slots__ = ("layout", "processor", "readable")

    def __init__(self, processor: Any, layout: _Layout) -> None:
        self.processor = processor
        self.layout = layout
        self.readable = layout.readable

    def _on_ending(self, span: Any) -> None:  # the SDK's end() calls it just before on_end (not via __getattr__)
        self.processor._on_ending(span)

    def on_end(self, span: Any) -> None:
        if type(span) is self.readable and not _broken:
            try:
                _slim(span, self.layout)
            except Exception as exc:
                _disable(exc)
        self.processor.on_end(span)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.processor, name)


def _slim(readable: Any, layout: _Layout) -> None:
    """Plain containers in the just-made ``readable`` (nobody else holds it yet) where they lose nothing."""
    bounded = layout.bounded
    events = readable._events
    if type(events) is bounded and not events._dq and not events.dropped:
        readable._events = ()
    links = readable._links
    if type(links) is bounded and not links._dq and not links.dropped:
        readable._links = ()
    attributes = readable._attributes
    if type(attributes) is layout.attributes and not attributes.dropped and attributes._immutable:
        readable._attributes = _compact(attributes._dict)


class Slimmer:
    """One per tracing exporter: hands each span it ends to a stand-in for the span's processor (the last one
    made is kept: a tracer's spans share one processor)."""

    __slots__ = ("_standin",)

    def __init__(self) -> None:
        self._standin: _StandIn | None = None

    def slim(self, span: Any) -> None:
        """Make ``span`` (one of llmtap's, about to end) hand a slim ``ReadableSpan`` to its processor; a no-op
        on anything else."""
        if _broken:
            return
        kind = type(span)
        layout = _layouts[kind] if kind in _layouts else _learn(kind, span)
        if layout is None:
            return
        try:
            processor = span._span_processor
            standin = self._standin
            if standin is None or standin.processor is not processor or standin.layout is not layout:
                if type(processor) is _StandIn:
                    return
                standin = self._standin = _StandIn(processor, layout)
            span._span_processor = standin
        except Exception as exc:
            _disable(exc)


def _learn(kind: type, span: Any) -> _Layout | None:
    """The layout of spans of ``kind``, if they are the SDK's as this module reads them: a span processor in
    the span's ``_span_processor``, and a ``ReadableSpan`` that reads plain containers as none dropped."""
    if len(_layouts) >= _MAX_TYPES:
        return None
    layout: _Layout | None = None
    try:
        if kind.__module__.startswith("opentelemetry.sdk.trace") and "_span_processor" in vars(span):
            held = vars(span)
            attributes, bounded = type(held["_attributes"]), type(held["_events"])
            readable = getattr(sys.modules[kind.__module__], "ReadableSpan", None)
            if (
                readable is not None
                and attributes.__name__ == "BoundedAttributes"
                and {"_dict", "_immutable", "dropped"} <= vars(held["_attributes"]).keys()
                and type(held["_attributes"]._dict) is dict
                and bounded.__name__ == "BoundedList"
                and {"_dq", "dropped"} <= vars(held["_events"]).keys()
                and type(held["_links"]) is bounded
                and _reads_plain(readable)
            ):
                layout = _Layout(readable, attributes, bounded)
    except Exception as exc:  # a layout this module does not know
        logger.debug("spans of %s keep the SDK's containers (%r)", kind.__qualname__, exc)
    else:
        if layout is None:
            logger.debug("spans of %s keep the SDK's containers", kind.__qualname__)
    _layouts[kind] = layout
    return layout


def _reads_plain(readable: type[Any]) -> bool:
    """A ``ReadableSpan`` given plain containers reads them as the SDK's, none dropped, from the names
    :func:`_slim` sets."""
    attributes = _Attributes(("a",), (1,))
    probe = readable(name="llmtap.probe", attributes=attributes, events=(), links=())
    held = vars(probe)
    return (
        held.get("_attributes") is attributes
        and held.get("_events") == ()
        and held.get("_links") == ()
        and dict(probe.attributes) == {"a": 1}
        and (probe.events, probe.links) == ((), ())
        and (probe.dropped_attributes, probe.dropped_events, probe.dropped_links) == (0, 0, 0)
    )


def _disable(exc: BaseException) -> None:
    global _broken
    _broken = True
    internal_error("sink", "slimming finished spans failed, spans keep the SDK's containers: %r", exc)
