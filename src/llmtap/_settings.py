"""Validated settings. Resolved once by :func:`llmtap.instrument`; nothing is read per request."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["Settings"]

# OpenTelemetry GenAI semantic conventions: explicit bucket boundaries.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
CHUNK_GAP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
RETRY_AFTER_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

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
    """Also record the GenAI semconv histograms through the OpenTelemetry meter provider."""
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
    """Optional Prometheus namespace prepended to the ``llmtap_`` metrics (semconv names are kept)."""

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
            if name == "base_urls":
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
