"""How records become measurements, written once for both metric exporters: :class:`Mapping` (which series
exist up front, what a start, an attempt's record and a call's record write) and the shapes of a write
(:data:`Measurement`, :class:`Buckets`). The instruments themselves are the table in :mod:`llmtap._core.metrics`.
"""

from collections.abc import Iterable
from typing import NamedTuple

from llmtap._core.metrics import (
    COST_TYPES,
    INSTRUMENTS,
    SEMCONV_ATTRIBUTES,
    TOKEN_TYPES,
    WINDOW_KEYS,
    Instrument,
    resolve_names,
)
from llmtap._core.record import ALL_OUTCOMES, AttemptRecord, AttemptStart, CallRecord, Outcome

__all__ = ["Buckets", "Labels", "Mapping", "Measurement", "base_key"]

Labels = tuple[str | int, ...]
"""Values of an instrument's attributes beyond the base ones, in :attr:`Mapping.attributes` order;
``""`` means no value (Prometheus exposes it as an empty label, OpenTelemetry leaves it out)."""


class Buckets(NamedTuple):
    """Observations already counted per bucket of the instrument's boundaries (the last count: above
    the last boundary), with their sum and maximum: an attempt's chunk gaps, aggregated by the core."""

    counts: tuple[int, ...]
    sum: float
    max: float


Measurement = tuple[str, "float | Buckets", Labels]
"""``(instrument key, value, attribute values)``: one write. For counters and up-down counters the value
is an increment, for histograms an observation (:class:`Buckets` for pre-bucketed ones), for gauges the
value to set."""

_RATE_LIMIT_KEYS = ("ratelimit_limit", "ratelimit_remaining", "ratelimit_reset")


def base_key(item: AttemptStart | AttemptRecord | CallRecord) -> tuple[str, ...]:
    """The base label values of a start or record: provider, operation, request model, then the values of
    ``Settings.attribute_labels`` (``""``: not set)."""
    return (item.provider, item.operation, item.request_model, *item.attribute_labels)


class Mapping:
    """How records become measurements, for both metric exporters: which series exist up front
    (:attr:`initial`) and which measurements a start (:meth:`start`), an attempt's record (:meth:`end`,
    :meth:`rate_limits`) and a call's record (:meth:`call_end`) make. The choices the settings make are
    taken here, once: which instruments are on, and the OpenTelemetry-only semconv attributes.

    Args:
        exclude: instruments that are off, by key or by OpenTelemetry or Prometheus name
            (``Settings.excluded_metrics``, and the instruments a ``Settings`` flag turns off).
        semconv_attributes: the GenAI semconv instruments also carry :data:`SEMCONV_ATTRIBUTES` (the
            OpenTelemetry exporter; the native Prometheus exporter leaves them out to keep its series down).

    Raises:
        ValueError: an excluded name is not one of :data:`INSTRUMENTS`.
    """

    __slots__ = (
        "_all_on", "_sc", "attributes", "initial", "instruments", "on", "priced", "rate_limited", "windowed",
    )  # fmt: skip

    def __init__(self, exclude: Iterable[str] = (), *, semconv_attributes: bool = False) -> None:
        keys = {i.key for i in INSTRUMENTS}
        names = [n for n in exclude if n not in keys]
        off = frozenset(n for n in exclude if n in keys) | resolve_names(names)
        self.instruments: tuple[Instrument, ...] = tuple(i for i in INSTRUMENTS if i.key not in off)
        """The instruments that are on, in :data:`INSTRUMENTS` order."""
        self.on: frozenset[str] = frozenset(i.key for i in self.instruments)
        self._all_on = len(self.on) == len(INSTRUMENTS)
        self._sc = semconv_attributes
        self.attributes: dict[str, tuple[str, ...]] = {
            i.key: (*i.attributes, *(SEMCONV_ATTRIBUTES if semconv_attributes and i.semconv else ()))
            for i in INSTRUMENTS
        }
        """Names of each instrument's :data:`Labels`, by key."""
        self.priced = "cost" in self.on
        """``Settings.cost``: attempts are priced (or counted as unpriced)."""
        self.windowed = bool(WINDOW_KEYS & self.on)
        """Attempts' input is measured against their model's context window (or counted as unknown)."""
        self.rate_limited = any(k in self.on for k in _RATE_LIMIT_KEYS)
        """Some rate-limit gauge is on: records with rate limits are worth keeping."""
        initial: list[Measurement] = [
            ("attempts", 0, ("200", "")),
            ("retries", 0, ("429",)),
            ("retries", 0, ("529",)),
            *(("streams", 0, (o.value,)) for o in ALL_OUTCOMES),
            *(("tokens", 0, (t,)) for t in TOKEN_TYPES),
            ("in_flight", 0, ()),
            ("stalls", 0, ()),
            ("parse_errors", 0, ()),
            ("context_unknown", 0, ()),  # at 0: a model without a window shows up as a rate, not as "no data"
        ]
        if self.priced:
            initial.append(("unpriced", 0, ()))  # at 0: an unknown model shows up as a rate, not as "no data"
        self.initial: tuple[Measurement, ...] = tuple(m for m in initial if m[0] in self.on)
        """The series that exist at zero from the moment a base label set is first seen, so rate()-based
        alert rules and "all outcomes" panels see them before the first event of each kind. Histograms
        are not among them: an empty one only costs series."""

    def _on(self, out: list[Measurement]) -> list[Measurement]:
        return out if self._all_on else [m for m in out if m[0] in self.on]

    def start(self, attempt: AttemptStart) -> list[Measurement]:
        """What sending an attempt counts: a retry (by reason), a stream in flight."""
        out: list[Measurement] = []
        if attempt.retry_reason is not None:
            out.append(("retries", 1, (attempt.retry_reason,)))
        if attempt.request_stream:
            out.append(("in_flight", 1, ()))
        return self._on(out)

    def end(self, record: AttemptRecord, in_flight: bool = False) -> list[Measurement]:
        """An attempt's measurements, its rate limits aside (:meth:`rate_limits`); ``in_flight``: its
        :meth:`start` counted a stream in flight, which ends now."""
        out: list[Measurement] = []
        add = out.append
        if in_flight:
            add(("in_flight", -1, ()))
        error_type = record.error_type or ""
        add(("attempts", 1, ("" if record.status_code is None else str(record.status_code), error_type)))
        sc: Labels = (record.server_address, record.server_port, record.response_model or "") if self._sc else ()
        add(("duration", record.ended_at - record.started_at, (error_type, *sc)))
        if record.retry_after is not None:
            add(("retry_after", record.retry_after, ()))
        if record.parse_errors:
            add(("parse_errors", record.parse_errors, ()))
        if record.streamed or record.request_stream:
            add(("streams", 1, (record.outcome.value,)))
        if record.streamed:
            if record.first_token_at is not None:
                add(("ttft", record.first_token_at - record.started_at, ()))
            if record.chunks > 1:
                add(("gap", Buckets(record.gap_bucket_counts, record.gap_sum, record.max_gap), sc))
            if record.stalls:
                add(("stalls", record.stalls, ()))
        usage = record.usage
        # the token histograms only for an attempt that completed: the GenAI conventions leave failed operations
        # out (their counts would skew the distribution), and an aborted stream's counts are partial too (often
        # only message_start's); the counters count every token
        distribution = record.outcome is Outcome.COMPLETED
        if usage.input_tokens is not None:
            if distribution:
                add(("usage", usage.input_tokens, ("input", *sc)))
                add(("inference_input", usage.input_tokens, sc))
            if usage.input_tokens:
                add(("tokens", usage.input_tokens, ("input",)))
        if usage.output_tokens is not None:
            if distribution:
                add(("usage", usage.output_tokens, ("output", *sc)))
                add(("inference_output", usage.output_tokens, sc))
            if usage.output_tokens:
                add(("tokens", usage.output_tokens, ("output",)))
        # the cache parts whenever the provider reported them, 0 included: a model whose cache reads fall to
        # 0 keeps its series (a 0 % hit ratio), one whose provider never reports them has none ("not reported")
        if usage.cache_read_tokens is not None:
            add(("tokens", usage.cache_read_tokens, ("cache_read",)))
        if usage.cache_write_tokens is not None:
            add(("tokens", usage.cache_write_tokens, ("cache_write",)))
        if usage.reasoning_tokens:
            add(("tokens", usage.reasoning_tokens, ("reasoning",)))
        for reason in record.stop_reasons:
            add(("stop_reasons", 1, (reason,)))
        times = record.server_times
        if times:  # most responses carry one server time, some none
            for source, server, client in times:
                add(("server_reported", server, (source,)))
                add(("client_observed", client, (source,)))
        # every attempt that reported input tokens, whatever its ending: the input's size is known in full when
        # reported (Anthropic's message_start says it), unlike the output's; it lands in exactly one of the two
        if self.windowed and usage.input_tokens:
            window = record.context_window
            if window:
                add(("context_utilization", usage.input_tokens / window, ()))
            else:
                add(("context_unknown", 1, ()))
        if self.priced:
            cost = record.cost
            if cost is not None:
                for token_type, usd in zip(COST_TYPES, cost, strict=False):  # the four priced types, in order
                    if usd:
                        add(("cost", usd, (token_type,)))
                if cost.cache_savings:
                    add(("cost_savings", cost.cache_savings, ()))
            elif usage.input_tokens or usage.output_tokens:
                add(("unpriced", 1, ()))
        return self._on(out)

    def rate_limits(self, record: AttemptRecord) -> list[Measurement]:
        """The rate-limit gauges a record sets (the last value seen wins; a value the headers did not
        give leaves the gauge as it was). Apart from :meth:`end` so that an exporter can keep the record
        and convert its headers only when the metrics are read."""
        out: list[Measurement] = []
        for rl in record.rate_limits:
            labels = (rl.resource,)
            if rl.limit is not None:
                out.append(("ratelimit_limit", rl.limit, labels))
            if rl.remaining is not None:
                out.append(("ratelimit_remaining", rl.remaining, labels))
            if rl.reset_seconds is not None:
                out.append(("ratelimit_reset", rl.reset_seconds, labels))
        return self._on(out)

    def call_end(self, record: CallRecord) -> list[Measurement]:
        """A logical call's measurements: its duration (by outcome) and time to first token."""
        out: list[Measurement] = [("call_duration", record.ended_at - record.started_at, (record.outcome.value,))]
        if record.first_token_at is not None:
            out.append(("call_ttft", record.first_token_at - record.started_at, ()))
        return self._on(out)
