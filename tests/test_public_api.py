"""The public surface is deliberate: ``__all__`` is the API, every other module is private by name, and the
base install carries only what a Prometheus-only app needs."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import llmtap
from llmtap.simulator import Simulator
from tests.support.imports import contract_violations, cycles, imports, modules

PUBLIC_MODULES = ("llmtap", "llmtap.probe", "llmtap.simulator", "llmtap.testing")
"""The only importable paths without an underscore; everything else is implementation."""

API = [
    "AttemptRecord",
    "AttemptStart",
    "CallRecord",
    "Cost",
    "LlmtapInstrumentor",
    "ModelPrice",
    "Outcome",
    "RateLimit",
    "RawRateLimits",
    "Settings",
    "Tap",
    "Usage",
    "__version__",
    "attributes",
    "instrument",
    "uninstrument",
    "wrap_transport",
]


def test_top_level_all_is_the_api() -> None:
    """Adding to (or removing from) the API is a decision: this list, the docs
    (docs/gen_reference.py regenerates docs/reference/api.md) and the CHANGELOG change."""
    assert sorted(llmtap.__all__) == sorted(API)
    public = {n for n in dir(llmtap) if not n.startswith("_") and not isinstance(getattr(llmtap, n), types.ModuleType)}
    assert public == set(API) - {"__version__"}
    undocumented = [n for n in API if n != "__version__" and not getattr(llmtap, n).__doc__]
    assert undocumented == []


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_equals_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    names = set(module.__all__)
    assert len(names) == len(module.__all__), "a name is listed twice"
    for attribute in names:
        assert getattr(module, attribute) is not None, attribute
    # what llmtap defines and this module offers without an underscore (imports of other libraries aside)
    public = {
        n
        for n in dir(module)
        if not n.startswith("_")
        and not isinstance(getattr(module, n), types.ModuleType)
        and str(getattr(getattr(module, n), "__module__", "")).startswith(name)
    }
    assert public <= names, f"public but not in __all__: {public - names}"
    assert "__version__" in names or name != "llmtap"


def _walk() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(llmtap.__path__, "llmtap.")]


def test_every_other_module_is_private_by_name() -> None:
    modules = _walk()
    assert "llmtap._cli.main" in modules and "llmtap._exporters.prometheus" in modules  # positive control: walked
    public = sorted(
        m for m in modules if not any(part.startswith("_") for part in m.split(".")) and m not in PUBLIC_MODULES
    )
    assert public == [], f"public module names outside the API: {public}; rename them _private or add them"


def test_every_module_declares_all() -> None:
    """Private modules too: ``__all__`` says what the rest of llmtap may import from each."""
    source = Path(llmtap.__file__).parent
    files = sorted(source.rglob("*.py"))
    assert len(files) > 40  # positive control: the package was found
    missing = [str(f.relative_to(source)) for f in files if not re.search(r"^__all__\b", f.read_text(), re.M)]
    assert missing == []


def test_every_import_of_a_llmtap_name_takes_one_its_module_exports() -> None:
    """The internal contract: ``from llmtap.X import name`` (at module level, for the type checker or inside
    a function) takes a name in X's ``__all__``, or a submodule of X; anything else is X's own business."""
    assert len(modules()) > 40  # positive control: the package was found (the synthetic one below: flagged)
    assert contract_violations() == []


def test_the_contract_check_flags_a_name_outside_all(tmp_path: Path) -> None:
    """Positive control of the check above, on a synthetic package: a private name, and a name the module
    has but does not list, are flagged (wherever imported); a listed name and a submodule are not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('__all__ = ["api"]\napi = 1\n')
    (package / "sub" / "__init__.py").write_text("__all__ = []\n")
    (package / "sub" / "inner.py").write_text('__all__ = ["listed"]\nlisted = unlisted = _private = 1\n')
    (package / "user.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg import api\n"  # listed
        "from pkg.sub import inner\n"  # a submodule
        "from pkg.sub.inner import listed, unlisted\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.sub.inner import _private\n"
        "def late():\n"
        "    from .sub.inner import _private\n"
        '__all__ = ["late"]\n'
    )
    assert contract_violations(package, "pkg") == [
        "pkg.user:4: from pkg.sub.inner import unlisted",
        "pkg.user:6: from pkg.sub.inner import _private",
        "pkg.user:8: from pkg.sub.inner import _private",
    ]


ABOVE_THE_CORE = (
    "llmtap._exporters",
    "llmtap._hooks",
    "llmtap._cli",
    "llmtap._drive",
    "llmtap._lifecycle",
    "llmtap._installation",
    "llmtap._instrumentor",
    "llmtap._run_exit",
    "llmtap.probe",
    "llmtap.simulator",
    "llmtap.testing",
)
"""What the core (``llmtap._core``) never imports: the exporters, the hooks, the lifecycle and the tools."""


def _edges(runtime_only: bool = False) -> dict[str, set[str]]:
    """Module -> the llmtap modules it imports (a name imported from a package that is a submodule counts as
    that submodule)."""
    found = modules()
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        for edge in imports(name, path):
            target = edge.module
            if edge.name is not None and f"{target}.{edge.name}" in found:
                target = f"{target}.{edge.name}"
            if target in found and target != name and (edge.runtime or not runtime_only):
                edges.setdefault(name, set()).add(target)
    return edges


def test_the_core_imports_nothing_above_it() -> None:
    """Dependencies point down: hooks -> core <- exporters. Every import counts, those for the type checker
    and inside functions too (a type that names an exporter is an arrow all the same)."""
    edges = _edges()
    assert any(t.startswith("llmtap._core.") for t in edges["llmtap._exporters.prometheus"])  # control: seen
    assert "llmtap._exporters" in edges["llmtap._lifecycle"]  # control: an arrow into ABOVE_THE_CORE is seen
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        if source.startswith("llmtap._core.")
        for target in targets
        if target.startswith(ABOVE_THE_CORE)
    )
    assert upward == []


def test_no_import_circle() -> None:
    """No module reaches itself through its imports, counting those for the type checker and inside
    functions (control: the check finds a circle in a graph that has one)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    edges = _edges()
    assert len(edges) > 40
    assert cycles(edges) == []


def test_the_command_and_python_m_run_the_private_cli() -> None:
    (script,) = (e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "llmtap")
    assert script.value == "llmtap._cli.main:main"
    out = subprocess.run([sys.executable, "-m", "llmtap", "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == llmtap.__version__


def _base_requirements() -> set[str]:
    requires = importlib.metadata.requires("llmtap") or []
    names = set()
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        names.add(requirement.split(";")[0].split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower())
    return names


def test_base_install_has_no_opentelemetry_sdk() -> None:
    base = _base_requirements()
    assert "opentelemetry-api" in base  # positive control: the requirements were read
    assert not base & {"opentelemetry-sdk", "opentelemetry-instrumentation"}, base


# the module each requirement of the base install is imported as
_IMPORTED_AS = {"opentelemetry-api": "opentelemetry", "prometheus-client": "prometheus_client", "pydantic": "pydantic"}


def test_every_base_requirement_is_imported_by_the_package() -> None:
    """No dependency nothing imports: each requirement of ``pip install llmtap`` is imported by some module of
    ``src/llmtap`` (a new requirement needs its import name here, which is the point)."""
    base = _base_requirements()
    assert set(_IMPORTED_AS) == base, "a requirement changed: say what it is imported as"
    source = "\n".join(p.read_text(encoding="utf-8") for p in Path(llmtap.__file__).parent.rglob("*.py"))
    for requirement, module in _IMPORTED_AS.items():
        assert re.search(rf"^\s*(from|import) {module}\b", source, re.M), f"{requirement} ({module}) is not imported"
    assert not re.search(r"^\s*(from|import) opentelemetry\.util\.http\b", source, re.M)  # the one dropped


# Runs in a fresh interpreter where the OpenTelemetry SDK and instrumentation cannot be imported, as in
# `pip install llmtap` without extras: Prometheus metrics and (no-op) spans work, and the two features that
# need the SDK say which extra to install.
_WITHOUT_SDK = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.instrumentation")):
            raise ImportError(f"No module named {name!r} (blocked: not installed)")
        return None

sys.meta_path.insert(0, Block())
try:
    import opentelemetry.sdk.trace
    raise SystemExit("the blocker does not block")
except ImportError:
    pass

import httpx2, prometheus_client, llmtap
registry = prometheus_client.CollectorRegistry()
llmtap.instrument(llmtap.Settings(base_urls=[sys.argv[1]]), registry=registry)
body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
httpx2.post(sys.argv[1] + "/v1/messages", json=body, headers={"x-api-key": "k"}).raise_for_status()
print("attempts", registry.get_sample_value(
    "llmtap_attempts_total",
    {"gen_ai_provider_name": "anthropic", "gen_ai_operation_name": "chat", "gen_ai_request_model": "m",
     "status_code": "200", "error_type": ""}))
llmtap.uninstrument()
for what in ("import llmtap.testing; llmtap.testing.capture().__enter__()", "llmtap.LlmtapInstrumentor"):
    try:
        exec(what)
        print("no error:", what)
    except ImportError as exc:
        print("ImportError:", str(exc).split(" (")[0])
print("sdk loaded:", any(m.startswith("opentelemetry.sdk") for m in sys.modules))
"""


def test_prometheus_only_app_runs_without_the_sdk() -> None:
    with Simulator() as sim:
        out = subprocess.run(
            [sys.executable, "-c", _WITHOUT_SDK, sim.base_url], capture_output=True, text=True, timeout=60
        )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        "attempts 1.0",
        "ImportError: llmtap.testing.capture() records spans with the OpenTelemetry SDK: pip install 'llmtap[otel]'",
        "ImportError: llmtap.LlmtapInstrumentor needs opentelemetry-instrumentation: pip install 'llmtap[otel]'",
        "sdk loaded: False",
    ], out.stdout + out.stderr


def test_the_tap_prints_its_public_name() -> None:
    """``instrument()`` returns an ``llmtap.Tap``, and says so (not ``llmtap._core.tap.Tap object at 0x…``),
    with where its records go; control: the class really lives in a private module."""
    from prometheus_client import CollectorRegistry

    settings = llmtap.Settings(metrics_port=0, traces=False, otel_metrics=False)
    tap = llmtap.instrument(settings, registry=CollectorRegistry())
    try:
        assert tap.metrics_address is not None
        assert repr(tap) == f"<llmtap.Tap: /metrics on 127.0.0.1:{tap.metrics_address[1]}; records to prometheus>"
    finally:
        llmtap.uninstrument()
    assert repr(llmtap.Tap()) == "<llmtap.Tap: /metrics not served; records to no sinks>"
    assert type(tap).__module__ == "llmtap._core.tap" and "_core" not in repr(tap)
