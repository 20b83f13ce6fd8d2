"""What ``import llmtap; llmtap.instrument(...)`` loads: none of llmtap's tools, and nothing a configuration
does not use (each module found here costs every instrumented process its memory; benchmarks/README.md,
"Memory"). Each check runs in a fresh interpreter, and each "not imported" is paired with a run of the
same check where the module is imported (the check would see it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmtap._providers._catalog import ENTRIES

TOOLS = ("llmtap.simulator", "llmtap.probe", "llmtap._cli", "llmtap._drive")
"""llmtap's own tools: never loaded by instrument()."""

PARSERS = (*(f"llmtap._providers.{entry.module}" for entry in ENTRIES), "llmtap._providers._openai_common")
"""The provider parsers: imported when a path of their API is first matched."""
ON_DEMAND = (
    "difflib",  # only to suggest the right name for a mistyped LLMTAP_* variable
    "llmtap._exporters.serve",  # only with Settings.metrics_port
    "llmtap._instrumentor",  # only opentelemetry-instrument / llmtap run / llmtap.LlmtapInstrumentor
    "opentelemetry.instrumentation",
    "llmtap._core.cost",  # only with Settings.cost
    "genai_prices",  # only with Settings.cost: the context windows read its table only when it is loaded
    "llmtap._core.eventstream",  # only with the first Bedrock stream (AWS event-stream framing)
    "opentelemetry.baggage",  # only with Settings.baggage_attributes
    "queue",  # the hand-off takes SimpleQueue from _queue, without queue.py's classes
    *PARSERS,  # each with the first request of its API (_providers/_catalog.py)
    "llmtap._exporters._prometheus_multiprocess",  # only under prometheus-client's multiprocess mode
)
FOREIGN = ("anthropic", "openai", "aiohttp", "opentelemetry.sdk", "opentelemetry.semconv", "psutil", "wrapt")
"""Never imported by llmtap itself: the SDKs and HTTP clients are patched when the application imports them;
the OpenTelemetry SDK (and the semantic-convention constants and psutil its resources load) is the
application's, handed to instrument() or set as the global provider; wrapt (15 modules, ~0.33 MiB) is
OpenTelemetry's instrumentation machinery's, llmtap patches without it (``_hooks/_patching.py``)."""
PROMETHEUS = ("prometheus_client", "llmtap._exporters.prometheus", "llmtap._exporters._health_prometheus")
"""Loaded only when the Prometheus exporter is on (Settings.prometheus)."""

_LOADED = """
import json, sys
import llmtap
settings = json.loads(sys.argv[1])
llmtap.instrument(None if settings is None else llmtap.Settings(**settings))  # None: from LLMTAP_*
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(settings: dict[str, object] | None, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after ``import llmtap; llmtap.instrument(Settings(**settings))``."""
    out = subprocess.run(
        [sys.executable, "-c", _LOADED, json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def _found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The members of ``names`` (packages included: a name covers its submodules) among ``modules``."""
    return sorted(name for name in names if any(m == name or m.startswith(name + ".") for m in modules))


@pytest.fixture(scope="module")
def clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("LLMTAP_", "OTEL_"))}


def test_instrument_loads_no_tool_and_nothing_on_demand(clean_env: dict[str, str]) -> None:
    modules = _loaded({"prometheus": True, "traces": True, "otel_metrics": True}, clean_env)
    assert _found(modules, TOOLS + ON_DEMAND + FOREIGN) == []
    # positive control: the same check sees what instrument() does load
    assert _found(modules, ("llmtap._core.tap", "llmtap._hooks.httpx_transport", *PROMETHEUS)) == sorted(
        ("llmtap._core.tap", "llmtap._hooks.httpx_transport", *PROMETHEUS)
    )


def test_otel_path_loads_no_prometheus_client(clean_env: dict[str, str]) -> None:
    """The OTLP configuration (OTel metrics + spans) does without prometheus-client (~1 MiB of modules)."""
    otlp = _loaded({"prometheus": False, "traces": True, "otel_metrics": True}, clean_env)
    assert _found(otlp, PROMETHEUS) == []
    assert _found(otlp, ("llmtap._exporters.otel_metrics", "llmtap._exporters._health")) == [
        "llmtap._exporters._health",
        "llmtap._exporters.otel_metrics",
    ]


def test_a_mistyped_setting_still_gets_its_suggestion(clean_env: dict[str, str]) -> None:
    """difflib is imported where it is used (positive control of its absence above): the hint still comes."""
    out = subprocess.run(
        [sys.executable, "-c", _LOADED, "null"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env, "LLMTAP_TRACE": "true", "LLMTAP_TRACES": "false"},
    )
    assert out.returncode == 0, out.stderr
    assert "difflib" in json.loads(out.stdout)
    assert "ignoring LLMTAP_TRACE: no such setting (did you mean LLMTAP_TRACES?)" in out.stderr


_USED = """
import json, sys
import llmtap
from llmtap._core.framer import FrameFeed
from llmtap._providers.bedrock import AnthropicBedrock
llmtap.instrument(llmtap.Settings(baggage_attributes=("tenant",)))
FrameFeed(lambda event, data: None, AnthropicBedrock(), 1024)  # what a Bedrock stream's start makes
print(json.dumps(sorted(sys.modules)))
"""


def test_what_is_loaded_on_demand_is_loaded_when_used(clean_env: dict[str, str]) -> None:
    """Positive control of the on-demand modules above: the setting or the traffic that needs one loads it."""
    out = subprocess.run([sys.executable, "-c", _USED], capture_output=True, text=True, timeout=60, env=clean_env)
    assert out.returncode == 0, out.stderr
    modules = set(json.loads(out.stdout))
    assert _found(modules, ("llmtap._core.eventstream", "opentelemetry.baggage")) == [
        "llmtap._core.eventstream",
        "opentelemetry.baggage",
    ]


_AIOHTTP = """
import asyncio, json, sys
import aiohttp  # imported before instrument(), as the anthropic SDK does at its own import
import llmtap
from llmtap.simulator import Simulator
from llmtap.testing import capture

loaded = {}
with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap:
    loaded["patched"] = sorted(m for m in sys.modules if m.startswith("llmtap._hooks"))
    loaded["wrapped"] = hasattr(aiohttp.ClientSession._request, "__wrapped__")

    async def main():
        body = {"model": "claude-aio", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as session:
            async with session.post(sim.base_url + "/v1/messages", json=body) as response:
                await response.read()

    asyncio.run(main())
    loaded["sent"] = sorted(m for m in sys.modules if m.startswith("llmtap._hooks"))
    loaded["records"] = len(cap.records)
print(json.dumps(loaded))
"""


def test_aiohttp_hook_module_loads_at_the_first_aiohttp_request(clean_env: dict[str, str]) -> None:
    """aiohttp imported (by the application, or by the anthropic SDK whether or not it sends through it) is
    patched at instrument(), but ``aiohttp_session.py`` loads only when a request goes through a session;
    positive control: that request loads it and is observed."""
    out = subprocess.run([sys.executable, "-c", _AIOHTTP], capture_output=True, text=True, timeout=60, env=clean_env)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert loaded["wrapped"] is True
    assert "llmtap._hooks.aiohttp_session" not in loaded["patched"]
    assert "llmtap._hooks.httpx_transport" in loaded["patched"]
    assert "llmtap._hooks.aiohttp_session" in loaded["sent"]
    assert loaded["records"] == 1


_MATCHED = """
import json, sys
import llmtap
from llmtap._core.endpoints import EndpointMatcher
llmtap.instrument(llmtap.Settings(prometheus=False, traces=False, otel_metrics=False))
before = sorted(m for m in sys.modules if m.startswith("llmtap._providers."))
endpoint = EndpointMatcher().match("generativelanguage.googleapis.com", 443, "/v1beta/models/g:generateContent")
after = sorted(m for m in sys.modules if m.startswith("llmtap._providers."))
print(json.dumps([before, after, type(endpoint.provider).__name__]))
"""


def test_a_parser_loads_with_the_first_path_of_its_api(clean_env: dict[str, str]) -> None:
    """Positive control of PARSERS above: matching a Gemini path imports the Gemini parser, and only it."""
    out = subprocess.run([sys.executable, "-c", _MATCHED], capture_output=True, text=True, timeout=60, env=clean_env)
    assert out.returncode == 0, out.stderr
    before, after, parser = json.loads(out.stdout)
    assert before == ["llmtap._providers._base", "llmtap._providers._catalog"]
    assert after == [*before, "llmtap._providers.gemini"]
    assert parser == "Gemini"


def test_prometheus_multiprocess_store_loads_in_that_mode(clean_env: dict[str, str], tmp_path: Path) -> None:
    """Positive control of its absence above: with ``PROMETHEUS_MULTIPROC_DIR`` the exporter imports it."""
    env = {**clean_env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    modules = _loaded({"prometheus": True, "traces": False, "otel_metrics": False}, env)
    store = "llmtap._exporters._prometheus_multiprocess"
    assert _found(modules, (store,)) == [store]


def _patterns(schema: object) -> list[str]:
    """Every ``pattern`` constraint in a pydantic core schema (nested dicts and lists)."""
    if isinstance(schema, dict):
        found = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
        return found + [p for value in schema.values() for p in _patterns(value)]
    if isinstance(schema, list):
        return [p for value in schema for p in _patterns(value)]
    return []


def test_settings_compile_no_pydantic_pattern() -> None:
    """pydantic compiles a field's ``pattern=`` into a Rust regex when the model class is created: one
    ``[^\\x00-\\x1f\\x7f]`` cost ~0.46 MiB of RSS in every process importing llmtap (measured when it
    was taken out); the settings check such values in a validator instead."""
    from pydantic import BaseModel, Field

    from llmtap._settings import ModelPrice, Settings

    class WithPattern(BaseModel):  # positive control: the walk finds a pattern where there is one
        value: str = Field(default="a", pattern=r"^a$")

    assert _patterns(WithPattern.__pydantic_core_schema__) == ["^a$"]
    assert _patterns(Settings.__pydantic_core_schema__) == []
    assert _patterns(ModelPrice.__pydantic_core_schema__) == []
