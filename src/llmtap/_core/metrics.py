"""The metric contract, written once: every instrument llmtap records, its bucket boundaries, and the
name it has in Prometheus.

Both exporters build their instruments from :data:`INSTRUMENTS`; the tests and
``dashboards/build.py`` read names from it. Instrument names, units and attribute names are chosen
so that the OpenTelemetry-to-Prometheus translation (the "Prometheus and OpenMetrics compatibility"
rules that ``opentelemetry-exporter-prometheus``, the Collector's ``prometheus`` /
``prometheusremotewrite`` exporters and Prometheus' own OTLP receiver apply) yields exactly the
names the native Prometheus exporter registers: dots become underscores, a unit ``s`` appends
``_seconds``, ``{annotation}`` units append nothing, monotonic sums get ``_total``, and an
up-down counter becomes a gauge. :func:`prometheus_name` is that translation for the units used here.

Standard library only: ``dashboards/build.py`` loads this file without installing the package.
"""

import re
from collections.abc import Iterable
from typing import NamedTuple

from llmtap._core.record import ALL_OUTCOMES, AttemptRecord, AttemptStart, CallRecord, Cost, Outcome

__all__ = [
    "BASE_ATTRIBUTES",
    "CHUNK_GAP_BUCKETS",
    "COST_TYPES",
    "COUNTER",
    "DURATION_BUCKETS",
    "GAUGE",
    "HISTOGRAM",
    "INSTRUMENTS",
    "RETRY_AFTER_BUCKETS",
    "SEMCONV_ATTRIBUTES",
    "TOKEN_BUCKETS",
    "TOKEN_TYPES",
    "UP_DOWN",
    "Buckets",
    "Instrument",
    "Mapping",
    "Measurement",
    "by_key",
    "label_name",
    "prometheus_name",
    "resolve_names",
    "switched_off",
]

# OpenTelemetry GenAI semantic conventions: explicit bucket boundaries.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
CHUNK_GAP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
RETRY_AFTER_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

TOKEN_TYPES = ("input", "output", "cache_read", "cache_write", "reasoning")
"""Values of ``gen_ai.token.type`` on ``llmtap.tokens``; input includes cache_read and cache_write."""
COST_TYPES: tuple[str, ...] = Cost._fields[:4]
"""Values of ``gen_ai.token.type`` on ``llmtap.cost.usd`` (``input`` is uncached input): the priced fields
of :class:`~llmtap._core.record.Cost`, in its order."""

COUNTER = "counter"
UP_DOWN = "up_down_counter"
HISTOGRAM = "histogram"
GAUGE = "gauge"

BASE_ATTRIBUTES = ("gen_ai.provider.name", "gen_ai.operation.name", "gen_ai.request.model")
"""On every llmtap measurement (Prometheus labels ``gen_ai_provider_name`` ...)."""

SEMCONV_ATTRIBUTES = ("server.address", "server.port", "gen_ai.response.model")
"""Added by the OpenTelemetry exporter to the GenAI semconv histograms only (the conventions
recommend them); the native Prometheus exporter leaves them out to keep its series count down."""


class Instrument(NamedTuple):
    """One measurement, as an OpenTelemetry instrument; the Prometheus family follows from it."""

    key: str
    """Short identifier used in code (``attempts``)."""
    name: str
    """OpenTelemetry instrument name (``llmtap.attempts``)."""
    kind: str
    """:data:`COUNTER`, :data:`UP_DOWN`, :data:`HISTOGRAM` or :data:`GAUGE`."""
    unit: str
    """UCUM unit; ``{annotation}`` units add no Prometheus suffix."""
    attributes: tuple[str, ...]
    """Attributes beyond :data:`BASE_ATTRIBUTES`."""
    description: str
    buckets: tuple[float, ...] = ()
    """Explicit bucket boundaries (histograms only)."""
    semconv: bool = False
    """Named by the OpenTelemetry GenAI semantic conventions: never namespaced."""
    requires: str = ""
    """The ``Settings`` flag that turns this instrument on (``cost``); ``""``: always on."""
    semconv_version: str = ""
    """For GenAI semconv names that changed: ``"legacy"`` (on unless ``Settings.genai_semconv`` is
    ``latest``) or ``"latest"`` (on when it is ``latest`` or ``both``); ``""``: always on."""
    exemplar: bool = False
    """A histogram that carries the attempt's (or call's) span as an exemplar (``Settings.exemplars``)."""

    def prometheus(self, namespace: str = "") -> str:
        """The family name as Prometheus stores it (counters with ``_total``)."""
        name = self.name if self.semconv or not namespace else f"{namespace}.{self.name}"
        return prometheus_name(name, self.unit, self.kind)

    @property
    def labels(self) -> tuple[str, ...]:
        """Prometheus label names, base labels first."""
        return tuple(label_name(a) for a in (*BASE_ATTRIBUTES, *self.attributes))

    def labels_with(self, attribute_labels: tuple[str, ...]) -> tuple[str, ...]:
        """Prometheus label names with the app's attribute labels (``Settings.attribute_labels``)
        after the base labels."""
        base = tuple(label_name(a) for a in BASE_ATTRIBUTES)
        return (*base, *attribute_labels, *(label_name(a) for a in self.attributes))


_UNITS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "1": ""}
_TOKEN_SPLIT = re.compile(r"[^a-zA-Z0-9:]+")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9]+")


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The OpenTelemetry-to-Prometheus name translation (suffixes on, legacy character set), as the
    Collector's and Prometheus' ``otlptranslator`` applies it, for the units llmtap uses.

    The name is split into tokens at every invalid character (dots) and joined with ``_``; the unit's
    Prometheus word (``s`` -> ``seconds``) is appended unless a token already equals it, and units with
    a ``{...}`` annotation add nothing; monotonic counters end in ``_total`` (any other ``total``
    token is dropped), gauges with unit ``1`` in ``_ratio``.
    """
    tokens = [t for t in _TOKEN_SPLIT.split(name) if t]
    main = unit.split("/", 1)[0].strip()
    word = "" if not main or "{" in main or "}" in main else _UNITS.get(main, main)
    if word and word not in tokens:
        tokens.append(word)
    if kind == COUNTER:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if kind == GAUGE and unit == "1":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


def label_name(attribute: str) -> str:
    """An attribute name as a Prometheus label (``gen_ai.provider.name`` -> ``gen_ai_provider_name``)."""
    return _INVALID_LABEL.sub("_", attribute)


INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument(
        "duration", "gen_ai.client.operation.duration", HISTOGRAM, "s", ("error.type",),
        "GenAI operation duration (one HTTP attempt, until its body ended).", DURATION_BUCKETS, semconv=True,
        exemplar=True,
    ),
    Instrument(
        "gap", "gen_ai.client.operation.time_per_output_chunk", HISTOGRAM, "s", (),
        "Time between consecutive response body chunks after the first (streams).", CHUNK_GAP_BUCKETS, semconv=True,
    ),
    Instrument(
        "usage", "gen_ai.client.token.usage", HISTOGRAM, "{token}", ("gen_ai.token.type",),
        "Input and output tokens per attempt, as reported by the provider.", TOKEN_BUCKETS, semconv=True,
        semconv_version="legacy",
    ),
    Instrument(
        "inference_input", "gen_ai.client.inference.operation.input_tokens", HISTOGRAM, "{token}", (),
        "Input (prompt) tokens per attempt, cached ones included, as reported by the provider.", TOKEN_BUCKETS,
        semconv=True, semconv_version="latest",
    ),
    Instrument(
        "inference_output", "gen_ai.client.inference.operation.output_tokens", HISTOGRAM, "{token}", (),
        "Output (completion) tokens per attempt, reasoning included, as reported by the provider.", TOKEN_BUCKETS,
        semconv=True, semconv_version="latest",
    ),
    Instrument(
        "ttft", "llmtap.time_to_first_token", HISTOGRAM, "s", (),
        "Time from sending the request to the first generated output: text, reasoning, a tool's name or arguments "
        "(a service notification such as message_start, ping or a role-only chunk is not output).", DURATION_BUCKETS,
        exemplar=True,
    ),
    Instrument(
        "attempts", "llmtap.attempts", COUNTER, "{attempt}", ("status_code", "error.type"),
        "HTTP attempts to LLM APIs, by status code ('' when no response) and error type.",
    ),
    Instrument(
        "retries", "llmtap.retries", COUNTER, "{attempt}", ("reason",),
        "Attempts that were retries, by what the previous attempt failed with.",
    ),
    Instrument(
        "retry_after", "llmtap.retry_after", HISTOGRAM, "s", (),
        "Waits advised by the server (retry-after / retry-after-ms).", RETRY_AFTER_BUCKETS,
    ),
    Instrument(
        "streams", "llmtap.streams", COUNTER, "{stream}", ("outcome",),
        "Streamed responses by how they ended.",
    ),
    Instrument(
        "in_flight", "llmtap.streams_in_flight", UP_DOWN, "{stream}", (),
        "Streaming attempts sent and not yet ended.",
    ),
    Instrument(
        "stalls", "llmtap.stream_stalls", COUNTER, "{stall}", (),
        "Gaps between stream chunks longer than the stall threshold.",
    ),
    Instrument(
        "tokens", "llmtap.tokens", COUNTER, "{token}", ("gen_ai.token.type",),
        "Tokens reported by the provider; input includes cache_read and cache_write.",
    ),
    Instrument(
        "stop_reasons", "llmtap.stop_reasons", COUNTER, "{response}", ("reason",),
        "Why the model stopped generating (end_turn, max_tokens, tool_use, ...).",
    ),
    Instrument(
        "ratelimit_limit", "llmtap.ratelimit.limit", GAUGE, "", ("resource",),
        "Rate limit per resource, from the last response's headers.",
    ),
    Instrument(
        "ratelimit_remaining", "llmtap.ratelimit.remaining", GAUGE, "", ("resource",),
        "Remaining rate-limit headroom per resource, from the last response's headers.",
    ),
    Instrument(
        "ratelimit_reset", "llmtap.ratelimit.reset", GAUGE, "s", ("resource",),
        "Seconds until the rate limit resets, from the last response's headers.",
    ),
    Instrument(
        "call_duration", "llmtap.call.duration", HISTOGRAM, "s", ("outcome",),
        "Logical SDK call duration: first attempt start to last attempt end, backoff included.", DURATION_BUCKETS,
        exemplar=True,
    ),
    Instrument(
        "call_ttft", "llmtap.call.time_to_first_token", HISTOGRAM, "s", (),
        "Logical SDK call time to first content token, from the first attempt's start.", DURATION_BUCKETS,
        exemplar=True,
    ),
    Instrument(
        "parse_errors", "llmtap.parse_errors", COUNTER, "{error}", (),
        "Response data llmtap could not parse (malformed SSE, bad encoding, oversized events).",
    ),
    Instrument(
        "server_reported", "llmtap.server_reported", HISTOGRAM, "s", ("source",),
        "Time the server reports it took (a response header or a stream field), by the header or field it came "
        "from: the provider's side of the attempt.", DURATION_BUCKETS,
    ),
    Instrument(
        "client_observed", "llmtap.client_observed", HISTOGRAM, "s", ("source",),
        "The same attempts' time as the client saw it, over the interval each source covers (from sending the "
        "request to the headers, the first body chunk or the end); minus llmtap.server_reported: the path between.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "cost", "llmtap.cost.usd", COUNTER, "{USD}", ("gen_ai.token.type",),
        "USD the attempts cost by token type (input is uncached input), priced from the reported tokens.",
        requires="cost",
    ),
    Instrument(
        "cost_savings", "llmtap.cost.cache_savings.usd", COUNTER, "{USD}", (),
        "USD the cache reads saved against the same tokens as plain input.",
        requires="cost",
    ),
    Instrument(
        "unpriced", "llmtap.cost.unpriced", COUNTER, "{attempt}", (),
        "Attempts that reported tokens for a model with no known price (their cost is not counted).",
        requires="cost",
    ),
)  # fmt: skip


def by_key() -> dict[str, Instrument]:
    """:data:`INSTRUMENTS` by :attr:`Instrument.key`."""
    return {i.key: i for i in INSTRUMENTS}


def resolve_names(names: tuple[str, ...] | list[str]) -> frozenset[str]:
    """Instrument keys for ``names``, each an OpenTelemetry name (``llmtap.retry_after``) or a
    Prometheus family name (``llmtap_retry_after_seconds``, counters with or without ``_total``).

    Raises:
        ValueError: a name is not one of :data:`INSTRUMENTS`.
    """
    table: dict[str, str] = {}
    for i in INSTRUMENTS:
        prom = i.prometheus()
        for alias in (i.name, prom, prom.removesuffix("_total")):
            table[alias] = i.key
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown metric name(s) {unknown}; known: {sorted(i.prometheus() for i in INSTRUMENTS)}")
    return frozenset(table[n] for n in names)


# -- from a record to measurements -------------------------------------------------------------------

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


def switched_off(settings: object) -> frozenset[str]:
    """Keys of the instruments ``settings`` (a ``Settings``) turns off: a ``requires`` flag that is false
    (``cost``), or the other generation of ``genai_semconv`` (``default``: the legacy names only,
    ``latest``: the latest only, ``both``)."""
    generation = getattr(settings, "genai_semconv", "default")
    other = {"default": "latest", "latest": "legacy"}.get(generation, "")  # the generation not wanted
    off = set()
    for i in INSTRUMENTS:
        if (i.requires and not getattr(settings, i.requires)) or (other and i.semconv_version == other):
            off.add(i.key)
    return frozenset(off)


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
            (``Settings.exclude_metrics``, and the instruments a ``Settings`` flag turns off).
        semconv_attributes: the GenAI semconv instruments also carry :data:`SEMCONV_ATTRIBUTES` (the
            OpenTelemetry exporter; the native Prometheus exporter leaves them out to keep its series down).

    Raises:
        ValueError: an excluded name is not one of :data:`INSTRUMENTS`.
    """

    __slots__ = ("_all_on", "_sc", "attributes", "initial", "instruments", "on", "priced", "rate_limited")

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
