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
from typing import NamedTuple

from llmtap._core.record import Cost

__all__ = [
    "BASE_ATTRIBUTES",
    "CHUNK_GAP_BUCKETS",
    "CONTEXT_WINDOW_BUCKETS",
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
    "WINDOW_KEYS",
    "Instrument",
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
CONTEXT_WINDOW_BUCKETS = (0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
"""Shares of the model's context window: coarse below half, fine from 50 % to 100 % (over 1: +Inf, a
window the table states smaller than the model's)."""

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
        "context_utilization", "llmtap.context_window.utilization", HISTOGRAM, "1", (),
        "Input tokens per attempt (cache reads and writes included) over the model's context window "
        "(Settings.context_windows, then genai-prices' table).", CONTEXT_WINDOW_BUCKETS,
    ),
    Instrument(
        "context_unknown", "llmtap.context_window.unknown", COUNTER, "{attempt}", (),
        "Attempts that reported input tokens for a model whose context window is not known (not in "
        "llmtap.context_window.utilization).",
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


WINDOW_KEYS = frozenset({"context_utilization", "context_unknown"})
"""The instruments that need each model's context window: the tap looks windows up unless both are off."""


def switched_off(settings: object) -> frozenset[str]:
    """Keys of the instruments ``settings`` (a ``Settings``) turns off: a ``requires`` flag that is false
    (``cost``), or the other generation of ``genai_semconv`` (``legacy``: the legacy names only,
    ``latest``: the latest only, ``both``)."""
    generation = getattr(settings, "genai_semconv", "legacy")
    other = {"legacy": "latest", "latest": "legacy"}.get(generation, "")  # the generation not wanted
    off = set()
    for i in INSTRUMENTS:
        if (i.requires and not getattr(settings, i.requires)) or (other and i.semconv_version == other):
            off.add(i.key)
    return frozenset(off)
