"""Validated settings. Resolved once by :func:`llmtap.instrument`; nothing is read per request."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.functional_validators import ModelWrapValidatorHandler  # where pydantic 2.10 has it
from pydantic_core import InitErrorDetails, PydanticCustomError

from llmtap._core.metrics import resolve_names
from llmtap._log import logger
from llmtap._run_exit import RUN_ENV

__all__ = [
    "ENV_PREFIX",
    "INTERNAL_ENV",
    "OTEL_EXCLUDED_URLS_ENV",
    "ModelPrice",
    "Settings",
]

ENV_PREFIX = "LLMTAP_"
INTERNAL_ENV = frozenset({RUN_ENV})
"""``LLMTAP_*`` variables llmtap sets for itself that are not settings, so never reported as unknown:
``LLMTAP_RUN`` marks a program started by ``llmtap run``. Every other ``LLMTAP_*`` variable names a setting
(the test-suite's knobs are ``LLMTAPTEST_*``, outside this namespace)."""

_RENAMED = {
    "metrics": "prometheus",
    "otel_chunk_gaps": "otel_time_per_output_chunk",
    "model_overflow": "overflow_value",
    "metric_prefix_namespace": "metric_namespace",
    "exclude_metrics": "excluded_metrics",
}
"""Names the settings had before 0.1.0 (never released, so not accepted): only for the "did you mean" hint."""

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_BOOL_HELP = "true/false, 1/0, yes/no or on/off (any case)"


_CONTROL = re.compile("[\x00-\x1f\x7f]")


class ModelPrice(BaseModel):
    """USD per million tokens of one model; the cache rates default to the input rate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class Settings(BaseModel):
    """How llmtap observes and exports. Every field can also come from ``LLMTAP_<FIELD>`` env vars
    (see :meth:`from_env`); lists are comma-separated there.

    Example::

        llmtap.instrument(llmtap.Settings(base_urls=["http://vllm.internal:8000/v1"]))
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_urls: tuple[str, ...] = ()
    """Extra API base URLs to observe (self-hosted or proxy endpoints); the API is recognised from
    the path below the base URL (``/v1/messages`` ...). The known public hosts are always observed, and
    so is what the official SDKs send (``sdk_calls``), whatever the host, and ollama's native API on its
    port 11434: this is for other clients (raw httpx / aiohttp, google-genai, ollama on another port).
    ``localhost``, ``127.0.0.1`` and ``::1`` are one host."""
    provider_names: dict[str, str] = Field(default_factory=dict)
    """Override ``gen_ai.provider.name`` per base URL (e.g. ``{"http://vllm:8000": "vllm"}``)."""
    match_any_host: bool = False
    """Observe the known API paths on any host (handy behind gateways; slightly more matching work)."""
    prometheus: bool = True
    """Export the metrics to Prometheus (prometheus-client's registry, or the ``/metrics`` endpoint of
    ``metrics_port``)."""
    traces: bool = True
    """Export one OpenTelemetry span per attempt."""
    exemplars: bool = True
    """Attach each attempt's trace id (when its span is sampled) to the duration and time-to-first-token
    histograms as an exemplar, on the Prometheus path (OpenMetrics scrapes; not in prometheus-client's
    multiprocess mode, which cannot store them) and the OpenTelemetry one (the SDK's exemplar filter).
    Needs ``traces``."""
    otel_metrics: bool | Literal["auto"] = "auto"
    """Also record every metric through the OpenTelemetry meter provider (for OTLP / a Collector);
    with an exporting meter provider, set ``prometheus=False`` so the names do not arrive twice.
    ``"auto"``: on only when there is a meter provider to record into (``meter_provider=`` given to
    ``instrument()``, or a global one set before it); ``True`` (``LLMTAP_OTEL_METRICS=true``) also records
    through a global provider set later; ``False``: off."""
    otel_time_per_output_chunk: bool = False
    """Also record ``gen_ai.client.operation.time_per_output_chunk`` through the meter provider. The
    OpenTelemetry API records one value at a time and one SDK ``record()`` costs about a third of what
    the SDK spends per stream event (8 µs here), paid once per chunk on the reader's thread; off by
    default, so the OpenTelemetry path keeps the per-chunk path free (the Prometheus sink merges the
    core's pre-bucketed gaps and pays nothing per chunk)."""
    sdk_calls: bool = True
    """Hook the official SDKs' ``request`` method (guarded) to link retries into logical calls; their
    requests are then observed on any host (a local server or gateway needs no ``base_urls``)."""
    stall_threshold_seconds: float = Field(default=5.0, gt=0)
    """An inter-chunk gap longer than this counts as a stall."""
    max_models: int = Field(default=50, ge=1, le=10_000)
    """Distinct request models, and separately response models, before new ones map to
    ``overflow_value`` (``gen_ai.request.model`` / ``gen_ai.response.model`` on every sink)."""
    max_stop_reasons: int = Field(default=30, ge=1, le=10_000)
    """Distinct stop reasons beyond the providers' documented ones before new ones map to ``overflow_value``."""
    max_error_types: int = Field(default=50, ge=1, le=10_000)
    """Distinct error types beyond the documented ones (provider error types, HTTP statuses, transport
    exceptions) before new ones map to ``overflow_value``."""
    attribute_labels: tuple[str, ...] = ()
    """Keys of :func:`llmtap.attributes` (or of ``baggage_attributes``) that also become metric labels,
    e.g. ``("feature",)``; every other key is a span attribute only. Keep it to a few: each adds its
    values' count to every series of a model."""
    max_attribute_values: int = Field(default=50, ge=1, le=10_000)
    """Distinct values per attribute label before new ones map to ``overflow_value`` (counted)."""
    baggage_attributes: tuple[str, ...] = ()
    """OpenTelemetry baggage keys read as attributes when an attempt begins (zero-code apps: the web
    framework's instrumentation puts the incoming W3C ``baggage`` header in the context)."""
    genai_semconv: Literal["legacy", "latest", "both"] = "legacy"
    """Which generation of the GenAI semantic-convention token metrics to emit: ``legacy``
    (``gen_ai.client.token.usage``, by ``gen_ai.token.type``; the default), ``latest``
    (``gen_ai.client.inference.operation.input_tokens`` / ``.output_tokens``, the split the GenAI
    conventions now define) or ``both`` during a migration. The shipped dashboards read either."""
    cost: bool = False
    """Export what each attempt cost in USD (``llmtap_cost_usd_total`` by token type, the cache's savings,
    unpriced attempts), priced by ``genai-prices`` (``pip install 'llmtap[cost]'``) and ``prices``."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """USD per million tokens by model name, over the price table (negotiated prices, self-hosted
    models): ``{"my-model": {"input": 0.5, "output": 1.5}}`` (``LLMTAP_PRICES`` takes this JSON)."""
    context_windows: dict[str, int] = Field(default_factory=dict)
    """Context windows in tokens by model name, over genai-prices' table (self-hosted and fine-tuned models,
    or a window the table has wrong): ``{"my-llama": 131072}`` (``LLMTAP_CONTEXT_WINDOWS=my-llama=131072``,
    or that JSON). Each attempt's input tokens over its model's window are ``llmtap_context_window_utilization``;
    a model neither here nor in the table is counted as unknown, never guessed."""
    max_servers: int = Field(default=50, ge=1, le=10_000)
    """Distinct (``server.address``, ``server.port``) pairs before new ones map to (``overflow_value``,
    0). Only matters with ``match_any_host``, many ``base_urls`` or SDK clients pointed at many hosts: a
    fleet of self-hosted servers."""
    overflow_value: str = Field(default="_other", min_length=1, max_length=64)
    """The value every bounded label takes past its limit; each replacement is counted in
    ``llmtap_label_overflows_total{label}``."""

    @field_validator("context_windows")
    @classmethod
    def _check_windows(cls, windows: dict[str, int]) -> dict[str, int]:
        bad = {model: window for model, window in windows.items() if window < 1 or not model}
        if bad:
            raise ValueError(f"context windows are positive numbers of tokens by model name, got {bad}")
        return windows

    @field_validator("overflow_value")
    @classmethod
    def _check_overflow(cls, value: str) -> str:
        # Checked here, not with Field(pattern=...): pydantic compiles a pattern into a Rust regex at class
        # creation, and that one cost ~0.46 MiB of RSS in every process that imports llmtap.
        if _CONTROL.search(value):
            raise ValueError("must not contain control characters (U+0000-U+001F, U+007F)")
        return value

    max_event_bytes: int = Field(default=4 << 20, ge=1024)
    """Largest single SSE event (or AWS event-stream message, Bedrock; JSON line, ollama) parsed; longer
    ones are dropped and counted as parse errors."""
    max_json_bytes: int = Field(default=8 << 20, ge=1024)
    """Largest non-streaming JSON body parsed (usage sits at its end)."""
    metric_namespace: str = ""
    """Optional Prometheus namespace prepended to the ``llmtap_`` metrics (semconv names are kept);
    through OpenTelemetry it prefixes the ``llmtap.*`` instrument names (``NS.llmtap.attempts``)."""

    excluded_urls: tuple[str, ...] = Field(default_factory=lambda: _otel_excluded_urls(os.environ)[0])
    """Regular expressions; a request whose full URL matches one (``re.search``) is not observed. Defaults
    to the OpenTelemetry httpx instrumentation's setting, ``OTEL_PYTHON_HTTPX_EXCLUDED_URLS`` (else
    ``OTEL_PYTHON_EXCLUDED_URLS``), comma-separated, so one variable excludes a URL from both."""
    span_detail: bool = False
    """Also put on each span the HTTP attributes (``http.request.method``, ``url.path``,
    ``http.response.status_code``, ``gen_ai.request.stream`` also when false) and those that repeat a
    metric: ``llmtap.time_to_first_token``, ``llmtap.time_to_headers``, ``llmtap.server.processing_time``,
    ``llmtap.retry_after``, ``llmtap.stream.chunks`` / ``max_gap`` / ``stalls``, ``llmtap.parse_errors``,
    ``llmtap.context_window.utilization``. Off by default: the OpenTelemetry SDK cleans and copies every
    attribute of every span (about 1 µs each inside an SDK call), and the GenAI attributes, the outcome and the
    metrics already say these."""

    slim_spans: bool = False
    """Hand your span processors llmtap's ended spans with plain containers, to save memory while a
    ``BatchSpanProcessor`` holds them until its next export: ~1.0 KB a span instead of ~3.4 KB, up to 512
    spans between two exports by default (benchmarks/README.md, "Memory"). What it changes for
    span processors, on llmtap's spans only:

    - while such a span ends, its ``_span_processor`` is a stand-in that passes every call through to your
      processor (the provider's, with every processor added to it) and ``_on_ending`` too;
    - the ``ReadableSpan`` that ``on_end`` receives holds ``()`` instead of the SDK's ``BoundedList`` for an
      empty event or link list, and a read-only mapping instead of a ``BoundedAttributes`` for its
      attributes, when nothing was dropped (a span that holds events or dropped anything keeps the SDK's).

    What processors and exporters read through the public ``ReadableSpan`` API (``attributes``, ``events``,
    ``links``, ``dropped_*``, ``to_json()``, the OTLP encoding) is the same; a processor that reads the
    private ``_attributes``, ``_events`` or ``_links``, or checks their types, sees the difference. Taken only
    on the OpenTelemetry SDK versions it is tested on (1.44.0 to 1.45.2); elsewhere spans are left as the SDK
    made them, and ``instrument()`` says so at DEBUG."""

    @field_validator("excluded_urls")
    @classmethod
    def _check_excluded_urls(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        patterns = tuple(p.strip() for p in patterns if p.strip())
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
        return patterns

    # -- series budget (docs/reference/series-budget.md) ----------------------------------------
    excluded_metrics: tuple[str, ...] = ()
    """Metric families not to record, in both exporters: OpenTelemetry instrument names
    (``llmtap.retry_after``) or Prometheus family names (``llmtap_retry_after_seconds``). The documented
    series budget lists what each costs and which dashboard panels or alerts go empty without it."""
    prometheus_created_series: bool = False
    """Expose prometheus-client's ``*_created`` series for llmtap's counters and histograms (one per
    label set). Off by default: the shipped rules never read them; decided per exporter, not
    process-wide (``disable_created_metrics()`` would also change the app's own metrics)."""

    @field_validator("attribute_labels", "baggage_attributes")
    @classmethod
    def _check_attribute_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        from llmtap._core.attributes import KEY_PATTERN
        from llmtap._core.metrics import INSTRUMENTS, label_name

        taken = {label for spec in INSTRUMENTS for label in spec.labels} | {"le", "job", "instance"}
        for key in keys:
            if not KEY_PATTERN.match(key):
                raise ValueError(f"attribute key {key!r} must match {KEY_PATTERN.pattern}")
            if label_name(key) in taken:
                raise ValueError(f"attribute key {key!r} is already a label of llmtap's metrics")
        return keys

    @field_validator("excluded_metrics")
    @classmethod
    def _check_excluded(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        resolve_names(names)  # ValueError names the unknown ones
        return names

    # -- the /metrics endpoint llmtap serves itself (deploy) ---------------------------------------
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve ``/metrics`` on this port from :func:`llmtap.instrument` until :func:`llmtap.uninstrument`
    (``0``: any free port; ``None``: do not serve, your app exposes the registry itself). Under
    prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) it serves the sum over every
    process, and a port already taken means a sibling worker serves it."""
    metrics_addr: str = "127.0.0.1"
    """The IP address ``/metrics`` binds to (``0.0.0.0`` or ``::`` for every interface)."""

    @field_validator("metrics_addr")
    @classmethod
    def _check_addr(cls, addr: str) -> str:
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            raise ValueError(f"must be an IP address such as 127.0.0.1, 0.0.0.0 or ::, got {addr!r}") from None
        return addr

    @field_validator("base_urls")
    @classmethod
    def _check_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URL must start with http:// or https://: {url!r}")
        return tuple(u.rstrip("/") for u in urls)

    # Checks across fields are field validators of the later field (fields are validated in order), so an
    # error is located at that field, and from the environment at its variable.
    @field_validator("provider_names")
    @classmethod
    def _check_names(cls, names: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        base_urls = info.data.get("base_urls", ())
        for url in names:
            if url.rstrip("/") not in base_urls:
                raise ValueError(
                    f"key {url!r} is not one of base_urls ({', '.join(base_urls) or 'none given'}); "
                    "each key names the provider of one base URL"
                )
        return names

    @field_validator("metrics_port")
    @classmethod
    def _check_port_needs_metrics(cls, port: int | None, info: ValidationInfo) -> int | None:
        if port is not None and info.data.get("prometheus") is False:
            raise ValueError("metrics_port serves the Prometheus metrics, which prometheus=False turns off")
        return port

    @model_validator(mode="wrap")
    @classmethod
    def _hint_typos(cls, data: Any, handler: ModelWrapValidatorHandler[Settings]) -> Settings:
        """A misspelt keyword gets "did you mean", as a misspelt ``LLMTAP_*`` variable does."""
        try:
            return handler(data)
        except ValidationError as exc:
            errors = exc.errors()
            if not any(e["type"] == "extra_forbidden" for e in errors):
                raise
            hinted: list[Any] = [_typo(e) if e["type"] == "extra_forbidden" else e for e in errors]
            raise ValidationError.from_exception_data(cls.__name__, hinted) from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``LLMTAP_<FIELD>`` variables, then ``overrides``.

        Every value is checked: booleans accept true/false, 1/0, yes/no, on/off (any case) and
        nothing else; lists are comma-separated (``LLMTAP_BASE_URLS=http://a,http://b``); mappings
        are ``key=value`` pairs (``LLMTAP_PROVIDER_NAMES=http://a=vllm``). ``LLMTAP_*`` variables
        that name no setting are logged as a warning (a typo would otherwise be silently ignored).

        Raises:
            pydantic.ValidationError: a value is invalid; each error is located at the variable's
                name (``LLMTAP_TRACES``) and says what is accepted, and the message shows the value.
        """
        env = os.environ if environ is None else environ
        fields = cls.model_fields
        values: dict[str, Any] = {}
        raw_by_field: dict[str, str] = {}
        problems: list[InitErrorDetails] = []
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in fields or key != ENV_PREFIX + name.upper():
                if key not in INTERNAL_ENV:
                    _warn_unknown(key)
                continue
            raw_by_field[name] = raw
            try:
                values[name] = _from_text(name, fields[name].annotation, raw)
            except ValueError as exc:
                problems.append(_error(key, raw, str(exc)))
        if problems:
            raise ValidationError.from_exception_data("Settings from the environment", problems)
        origin: dict[str, str] = {}
        if "excluded_urls" not in values:  # the OpenTelemetry variables of this environment, not the process's
            values["excluded_urls"], variable = _otel_excluded_urls(env)
            if variable:
                origin["excluded_urls"] = variable
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            errors = [_relocate(e, raw_by_field, overrides, origin) for e in exc.errors()]
            raise ValidationError.from_exception_data("Settings from the environment", errors) from None


OTEL_EXCLUDED_URLS_ENV = ("OTEL_PYTHON_HTTPX_EXCLUDED_URLS", "OTEL_PYTHON_EXCLUDED_URLS")
"""Where :attr:`Settings.excluded_urls` comes from by default: the httpx instrumentation's own variable, else
the one every OpenTelemetry HTTP instrumentation reads (the first one set wins, as in ``opentelemetry-util-http``)."""


def _otel_excluded_urls(env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """The patterns of the first of :data:`OTEL_EXCLUDED_URLS_ENV` set in ``env``, and its name."""
    for name in OTEL_EXCLUDED_URLS_ENV:
        raw = env.get(name)
        if raw:
            return tuple(p.strip() for p in raw.split(",") if p.strip()), name
    return (), None


def _from_text(name: str, annotation: Any, raw: str) -> Any:
    """One environment value, as the field's type (numbers and strings are left to pydantic)."""
    if annotation is bool or bool in typing.get_args(annotation):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        if annotation is not bool and word == "auto":  # bool | Literal["auto"]
            return "auto"
        raise ValueError(f"expected a boolean: {_BOOL_HELP}" + ("" if annotation is bool else ", or auto"))
    origin = typing.get_origin(annotation)
    if origin is tuple:
        if raw.lstrip().startswith("["):  # a JSON array, the other spelling people reach for
            try:
                items = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"expected a comma-separated list (a,b) or a JSON array of strings: {exc}") from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ValueError("expected a comma-separated list (a,b) or a JSON array of strings")
            return tuple(i.strip() for i in items if i.strip())
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if origin is dict:
        if raw.lstrip().startswith("{"):  # a JSON object (LLMTAP_PRICES, or any mapping)
            try:
                return json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"expected a JSON object: {exc}") from None
        pairs: dict[str, str] = {}
        for part in (p.strip() for p in raw.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"expected comma-separated key=value pairs, got {part!r}")
            pairs[key.strip()] = value.strip()
        return pairs
    return raw.strip()


def _error(where: str, value: object, message: str) -> InitErrorDetails:
    return {
        "type": PydanticCustomError("llmtap_setting", "{message}", {"message": message}),
        "loc": (where,),
        "input": value,
    }


def _relocate(
    error: Any, raw_by_field: Mapping[str, str], overrides: Mapping[str, Any], origin: Mapping[str, str]
) -> InitErrorDetails:
    """A pydantic error about a field, located at the environment variable it came from."""
    loc = error["loc"]
    name = str(loc[0]) if loc else ""
    if name in overrides:
        where = name
    elif name in raw_by_field:
        where = f"{ENV_PREFIX}{name.upper()}"
    else:
        where = origin.get(name) or name or "settings"
    return _error(where, error["input"], str(error["msg"]))


def _typo(error: Any) -> InitErrorDetails:
    """An ``extra_forbidden`` error about a keyword, with the closest field name when there is one."""
    import difflib  # only for a misspelt keyword

    name = str(error["loc"][-1]) if error["loc"] else ""
    close = [_RENAMED[name]] if name in _RENAMED else difflib.get_close_matches(name, list(Settings.model_fields), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return {
        "type": PydanticCustomError("extra_forbidden", "no such setting{hint}", {"hint": hint}),
        "loc": error["loc"],
        "input": error["input"],
    }


def _warn_unknown(key: str) -> None:
    import difflib  # only for a mistyped LLMTAP_* name: not loaded by every instrument() (~0.2 MiB)

    known = [ENV_PREFIX + n.upper() for n in Settings.model_fields]
    renamed = _RENAMED.get(key[len(ENV_PREFIX) :].lower())
    close = [ENV_PREFIX + renamed.upper()] if renamed else difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    logger.warning("ignoring %s: no such setting%s", key, hint)
