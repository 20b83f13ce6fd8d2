"""Validated settings. Resolved once by :func:`llmtap.instrument`; nothing is read per request."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmtap._metrics import (  # re-exported: the bucket boundaries used to live here
    CHUNK_GAP_BUCKETS,
    DURATION_BUCKETS,
    RETRY_AFTER_BUCKETS,
    TOKEN_BUCKETS,
    resolve_names,
)

__all__ = ["CHUNK_GAP_BUCKETS", "DURATION_BUCKETS", "RETRY_AFTER_BUCKETS", "TOKEN_BUCKETS", "Settings"]

_ENV_PREFIX = "LLMTAP_"


class Settings(BaseModel):
    """How llmtap observes and exports. Every field can also come from ``LLMTAP_<FIELD>`` env vars
    (see :meth:`from_env`); lists are comma-separated there.

    Example::

        llmtap.instrument(llmtap.Settings(base_urls=["http://vllm.internal:8000/v1"]))
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_urls: tuple[str, ...] = ()
    """Extra API base URLs to observe (self-hosted or proxy endpoints); the API is recognised from
    the path below the base URL (``/v1/messages`` ...). The known public hosts are always observed."""
    provider_names: dict[str, str] = Field(default_factory=dict)
    """Override ``gen_ai.provider.name`` per base URL (e.g. ``{"http://vllm:8000": "vllm"}``)."""
    match_any_host: bool = False
    """Observe the known API paths on any host (handy behind gateways; slightly more matching work)."""
    metrics: bool = True
    """Export Prometheus metrics."""
    traces: bool = True
    """Export one OpenTelemetry span per attempt."""
    otel_metrics: bool = True
    """Also record every metric through the OpenTelemetry meter provider (for OTLP / a Collector);
    with an exporting meter provider, set ``metrics=False`` so the names do not arrive twice."""
    sdk_calls: bool = True
    """Hook the official SDKs' ``request`` method (guarded) to link retries into logical calls."""
    stall_threshold_seconds: float = Field(default=5.0, gt=0)
    """An inter-chunk gap longer than this counts as a stall."""
    max_models: int = Field(default=50, ge=1, le=10_000)
    """Distinct request models, and separately response models, before new ones map to
    ``model_overflow`` (``gen_ai.request.model`` / ``gen_ai.response.model`` on every sink)."""
    max_stop_reasons: int = Field(default=30, ge=1, le=10_000)
    """Distinct stop reasons beyond the providers' documented ones before new ones map to ``model_overflow``."""
    max_error_types: int = Field(default=50, ge=1, le=10_000)
    """Distinct error types beyond the documented ones (provider error types, HTTP statuses, transport
    exceptions) before new ones map to ``model_overflow``."""
    model_overflow: str = Field(default="_other", min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")
    """The value every bounded label takes past its limit; each replacement is counted in
    ``llmtap_label_overflows_total{label}``. (Named for its first use; it applies to all bounded labels.)"""
    max_event_bytes: int = Field(default=4 << 20, ge=1024)
    """Largest single SSE event parsed; longer ones are dropped and counted as parse errors."""
    max_json_bytes: int = Field(default=8 << 20, ge=1024)
    """Largest non-streaming JSON body parsed (usage sits at its end)."""
    metric_prefix_namespace: str = ""
    """Optional Prometheus namespace prepended to the ``llmtap_`` metrics (semconv names are kept);
    through OpenTelemetry it prefixes the ``llmtap.*`` instrument names (``NS.llmtap.attempts``)."""

    # -- series budget (README "Series budget") ------------------------------------------------
    exclude_metrics: tuple[str, ...] = ()
    """Metric families not to record, in both exporters: OpenTelemetry instrument names
    (``llmtap.retry_after``) or Prometheus family names (``llmtap_retry_after_seconds``). The README's
    series budget lists what each costs and which dashboard panels or alerts go empty without it."""
    prometheus_created_series: bool = False
    """Expose prometheus-client's ``*_created`` series for llmtap's counters and histograms (one per
    label set). Off by default: the shipped rules never read them; decided per exporter, not
    process-wide (``disable_created_metrics()`` would also change the app's own metrics)."""

    @field_validator("exclude_metrics")
    @classmethod
    def _check_excluded(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        resolve_names(names)  # ValueError names the unknown ones
        return names

    @field_validator("base_urls")
    @classmethod
    def _check_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URL must start with http:// or https://: {url!r}")
        return tuple(u.rstrip("/") for u in urls)

    @model_validator(mode="after")
    def _check_names(self) -> Settings:
        for url in self.provider_names:
            if url.rstrip("/") not in self.base_urls:
                raise ValueError(f"provider_names key {url!r} is not one of base_urls")
        return self

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``LLMTAP_*`` variables, then ``overrides``.

        Raises:
            pydantic.ValidationError: a value is invalid (the message names the variable's field).
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            raw = env.get(_ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name in ("base_urls", "exclude_metrics"):
                values[name] = tuple(p.strip() for p in raw.split(",") if p.strip())
            elif name == "provider_names":
                pairs = (p.split("=", 1) for p in raw.split(",") if "=" in p)
                values[name] = {k.strip(): v.strip() for k, v in pairs}
            elif field.annotation is bool:
                values[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            else:
                values[name] = raw
        values.update(overrides)
        return cls.model_validate(values)
