"""The OpenTelemetry distro and configurator ``llmtap[run]`` installs, for ``opentelemetry-instrument`` and
``llmtap run``.

``opentelemetry-instrument`` builds the SDK from the first ``opentelemetry_distro`` and
``opentelemetry_configurator`` entry points it finds. ``opentelemetry-distro``'s defaults the OTLP protocol to
gRPC, whose exporter ``llmtap[run]`` does not install (it ships OTLP over HTTP): a plain
``opentelemetry-instrument python app.py`` then ended in ``RuntimeError: Requested component 'otlp_proto_grpc'
not found`` and ran uninstrumented. These two do what that distro does, with the exporter that is installed:
traces, metrics and logs over OTLP, ``http/protobuf`` unless ``OTEL_EXPORTER_OTLP_PROTOCOL`` says otherwise.
The configurator is the SDK's own (``opentelemetry-distro``'s is the same subclass of it).
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.instrumentation.distro import BaseDistro  # type: ignore[attr-defined]
from opentelemetry.sdk._configuration import _OTelSDKConfigurator

__all__ = ["DEFAULTS", "LlmtapConfigurator", "LlmtapDistro"]

DEFAULTS = {
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_METRICS_EXPORTER": "otlp",
    "OTEL_LOGS_EXPORTER": "otlp",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
}
"""What the distro sets when unset (a variable you set is kept): ``opentelemetry-distro``'s defaults, with the
protocol of the OTLP exporter ``llmtap[run]`` installs."""


class LlmtapDistro(BaseDistro):  # type: ignore[misc]
    """``opentelemetry-distro``'s defaults, with OTLP over HTTP (:data:`DEFAULTS`)."""

    def _configure(self, **kwargs: Any) -> None:
        for name, value in DEFAULTS.items():
            os.environ.setdefault(name, value)


class LlmtapConfigurator(_OTelSDKConfigurator):
    """The SDK's providers and exporters from the ``OTEL_*`` variables (the SDK's own configurator)."""
