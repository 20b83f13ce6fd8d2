"""instrument() / uninstrument(): all or nothing, nothing leaks, settings checked at start-up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

import llmtap
from llmtap import _installation
from llmtap._exporters.prometheus import METRIC_NAMES
from llmtap._hooks import patches as _patch
from llmtap.simulator import Simulator
from llmtap.testing import capture

HOOKED = (
    (httpx2.Client, "_send_single_request"),
    (httpx2.AsyncClient, "_send_single_request"),
    (httpx.Client, "_send_single_request"),
    (httpx.AsyncClient, "_send_single_request"),
)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    assert _installation.active() is None
    yield
    if _installation.active() is not None:
        llmtap.uninstrument()


def patched() -> list[str]:
    return [f"{o.__module__}.{o.__name__}" for o, name in HOOKED if hasattr(o.__dict__[name], "__wrapped__")]


def families(registry: CollectorRegistry) -> set[str]:
    return {metric.name for metric in registry.collect()}


def post(sim: Simulator, client: Any = httpx2) -> None:
    response = client.post(
        f"{sim.base_url}/v1/messages",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": "k", "connection": "close"},
    )
    assert response.status_code == 200


def scrape(address: tuple[str, int], client: Any = httpx2) -> str:
    return str(client.get(f"http://{address[0]}:{address[1]}/metrics", headers={"connection": "close"}).text)


def attempts(text: str) -> float:
    lines = text.splitlines()
    return sum(float(line.rpartition(" ")[2]) for line in lines if line.startswith("llmtap_attempts_total{"))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def settings(sim: Simulator, **kw: Any) -> llmtap.Settings:
    return llmtap.Settings(base_urls=(sim.base_url,), traces=False, otel_metrics=False, **kw)


def test_served_metrics_count_and_stop_on_uninstrument(sim: Simulator) -> None:
    registry = CollectorRegistry()
    tap = llmtap.instrument(settings(sim, metrics_port=0), registry=registry)
    address = tap.metrics_address
    assert address is not None and address[0] == "127.0.0.1" and address[1] > 0
    post(sim)
    assert attempts(scrape(address)) == 1
    llmtap.uninstrument()
    assert tap.metrics_address is None
    with pytest.raises(httpx2.ConnectError):
        scrape(address)
    with socket.socket() as s:  # the port is free again (for a server: TIME_WAIT does not count)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(address)


def test_taken_port_leaves_nothing_behind(sim: Simulator) -> None:
    registry = CollectorRegistry()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot serve /metrics on 127.0.0.1:{port}.*LLMTAP_METRICS_PORT") as raised:
            llmtap.instrument(settings(sim, metrics_port=port), registry=registry)
    said = str(raised.value)  # another program first; multiprocess mode only if it is the app's own worker
    assert said.index("held by another program (choose another port)") < said.index("PROMETHEUS_MULTIPROC_DIR")
    assert families(registry) == set()
    assert patched() == []
    assert _installation.active() is None
    assert _installation.active() is None
    # positive control: the same call works once the port is free, and counts traffic
    llmtap.instrument(settings(sim, metrics_port=port), registry=registry)
    assert len(patched()) == len(HOOKED)
    post(sim)
    assert attempts(scrape(("127.0.0.1", port))) == 1


def test_registration_conflict_leaves_nothing_behind(sim: Simulator) -> None:
    registry = CollectorRegistry()
    squatter = Counter("llmtap_streams", "someone else's", registry=registry)
    with pytest.raises(ValueError, match=r"could not register its Prometheus metrics.*llmtap_streams"):
        llmtap.instrument(settings(sim, metrics_port=0), registry=registry)
    assert families(registry) == {"llmtap_streams"}
    assert patched() == []
    assert not any(t.name.startswith("llmtap-metrics") for t in threading.enumerate())
    registry.unregister(squatter)
    llmtap.instrument(settings(sim, cost=True, genai_semconv="both"), registry=registry)  # control: every family
    assert families(registry) >= {n.removesuffix("_total") for n in METRIC_NAMES}


def test_a_missing_price_table_leaves_nothing_behind(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tap is made after its exporters: when it cannot be (cost=True without the extra), they are closed."""
    registry = CollectorRegistry()
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    with pytest.raises(ImportError, match="llmtap\\[cost\\]"):
        llmtap.instrument(settings(sim, cost=True), registry=registry)
    assert families(registry) == set() and patched() == [] and _installation.current is None
    monkeypatch.undo()  # positive control: the same call with the price table
    llmtap.instrument(settings(sim, cost=True), registry=registry)
    assert "llmtap_cost_usd" in families(registry)


def test_patch_failure_leaves_nothing_behind(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    real_wrap = _patch._wrap
    calls = []

    def failing_wrap(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 3:
            raise TypeError("cannot set attribute")
        real_wrap(*args)

    monkeypatch.setattr(_patch, "_wrap", failing_wrap)
    registry = CollectorRegistry()
    fds = open_fds()
    with pytest.raises(TypeError, match="cannot set attribute") as info:
        llmtap.instrument(settings(sim, metrics_port=0), registry=registry)
    assert "nothing stays patched" in "".join(getattr(info.value, "__notes__", []))
    assert len(calls) == 3  # two methods were patched before the failure...
    assert patched() == []  # ...and restored
    assert families(registry) == set()
    assert not any(t.name.startswith("llmtap-metrics") for t in threading.enumerate())
    assert open_fds() == fds
    monkeypatch.setattr(_patch, "_wrap", real_wrap)
    llmtap.instrument(settings(sim), registry=registry)  # control
    assert len(patched()) == len(HOOKED)


def _settle(expected_fds: int, expected_threads: set[str]) -> tuple[int, set[str]]:
    deadline = time.monotonic() + 3
    while True:
        fds, threads = open_fds(), {t.name for t in threading.enumerate()}
        if (fds <= expected_fds and threads <= expected_threads) or time.monotonic() > deadline:
            return fds, threads
        time.sleep(0.05)


def test_fifty_cycles_leak_nothing(sim: Simulator) -> None:
    registry = CollectorRegistry()
    originals = [owner.__dict__[name] for owner, name in HOOKED]
    llmtap.instrument(settings(sim, metrics_port=0), registry=registry)  # warm up imports and caches
    llmtap.uninstrument()
    threads_before = {t.name for t in threading.enumerate()}
    fds_before = open_fds()
    with httpx2.Client() as client:
        for _ in range(50):
            address = llmtap.instrument(settings(sim, metrics_port=0), registry=registry).metrics_address
            assert address is not None
            post(sim, client)
            assert attempts(scrape(address, client)) == 1  # a fresh tap each cycle, really counting
            llmtap.uninstrument()
    fds, threads = _settle(fds_before, threads_before)
    assert threads <= threads_before
    assert fds <= fds_before
    assert families(registry) == set()
    assert [owner.__dict__[name] for owner, name in HOOKED] == originals


def test_one_installation_holds_the_tap_the_server_and_the_patches(sim: Simulator) -> None:
    """What instrument() installed is one object, the only lifecycle global; uninstrument() clears it first."""
    assert _installation.current is None
    tap = llmtap.instrument(settings(sim, metrics_port=0), registry=CollectorRegistry())
    installation = _installation.current
    assert installation is not None and installation.tap is tap and _installation.active() is tap
    assert installation.server is not None and installation.server.address == tap.metrics_address
    assert installation.patches is not None and "httpx" in installation.patches.packages
    assert len(patched()) == len(HOOKED)
    llmtap.uninstrument()
    assert _installation.current is None and patched() == [] and tap.metrics_address is None
    llmtap.instrument(settings(sim), registry=CollectorRegistry(), patch=False)  # nothing patched, nothing served
    installation = _installation.current
    assert installation is not None and installation.patches is None and installation.server is None
    assert patched() == []


@pytest.mark.parametrize("catch_up", [True, False], ids=["caught_up", "control"])
def test_a_module_imported_while_instrumenting_is_patched(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, catch_up: bool
) -> None:
    """Another thread imports a hooked module after its post-import hook found no installation in effect
    (it is being made): the installation patches it once in effect (the control skips that step)."""
    from llmtap import _lifecycle
    from llmtap._hooks.patches import Patches

    real_apply = Patches.apply

    def apply_as_if_httpx2_came_later(self: Patches) -> None:
        real_apply(self)
        for owner, attribute, original in [entry for entry in self._applied if entry[0].__module__ == "httpx2"]:
            self._applied.remove((owner, attribute, original))
            setattr(owner, attribute, original)
        self._done.discard("httpx2")

    monkeypatch.setattr(Patches, "apply", apply_as_if_httpx2_came_later)
    if not catch_up:
        monkeypatch.setattr(Patches, "catch_up", lambda self: None)
    _lifecycle.activate(settings(sim), registry=CollectorRegistry())
    assert len(patched()) == (len(HOOKED) if catch_up else len(HOOKED) - 2)
    llmtap.uninstrument()
    assert patched() == []


def test_second_instrument_same_settings_returns_the_tap_other_settings_raise(sim: Simulator) -> None:
    registry = CollectorRegistry()
    tap = llmtap.instrument(settings(sim), registry=registry)
    assert llmtap.instrument(settings(sim), registry=registry) is tap
    assert llmtap.instrument() is tap  # no settings: whatever is active
    with pytest.raises(RuntimeError, match=r"other settings \(differing: max_models, stall_threshold_seconds\)"):
        llmtap.instrument(settings(sim, max_models=3, stall_threshold_seconds=1))
    with pytest.raises(RuntimeError, match="another Prometheus registry"):
        llmtap.instrument(settings(sim), registry=CollectorRegistry())
    assert _installation.active() is tap  # the active instrumentation is untouched
    post(sim)
    assert attempts(registry_text(registry)) == 1


def registry_text(registry: CollectorRegistry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def test_capture_inside_an_instrumented_app_refuses_and_leaves_the_app_alone(sim: Simulator) -> None:
    registry = CollectorRegistry()
    tap = llmtap.instrument(settings(sim), registry=registry)
    with pytest.raises(RuntimeError, match=r"already instrumented.*left as it is"), capture(settings(sim)):
        pass
    assert _installation.active() is tap and len(patched()) == len(HOOKED)
    post(sim)
    assert attempts(registry_text(registry)) == 1
    llmtap.uninstrument()
    # control: without the app's instrumentation, capture works; nested, it refuses and the outer keeps working
    with capture(settings(sim)) as cap:
        with pytest.raises(RuntimeError, match="enclosing capture"), capture(settings(sim)):
            pass
        post(sim)
        cap.wait(1)
        assert cap.sample("llmtap_attempts_total") == 1


# -- settings from the environment -------------------------------------------------------------------


def test_bad_environment_fails_at_instrument_not_on_the_request_path(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMTAP_TRACES", "ture")
    with pytest.raises(ValidationError, match="LLMTAP_TRACES"):
        llmtap.instrument(registry=CollectorRegistry())
    assert patched() == [] and _installation.active() is None
    monkeypatch.setenv("LLMTAP_TRACES", "off")
    registry = CollectorRegistry()
    assert llmtap.instrument(registry=registry).settings.traces is False


FORK = """
import os, sys, llmtap
llmtap.instrument(llmtap.Settings(metrics_port=0, traces=False, otel_metrics=False))
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
llmtap.uninstrument()
"""


@pytest.mark.parametrize("multiprocess", [False, True])
def test_a_forked_worker_is_warned_when_the_served_metrics_cannot_include_it(
    multiprocess: bool, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMTAP_", "PROMETHEUS_"))}
    if multiprocess:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", FORK], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    warned = "cannot see its metrics; set PROMETHEUS_MULTIPROC_DIR" in out.stderr
    assert warned is not multiprocess, out.stderr


# -- re-instrumenting on one meter provider, fork-safe call ids, every sink closed ------------------


def _remaining(reader: Any) -> dict[str, float]:
    """``llmtap.ratelimit.remaining`` by resource, from one collection of ``reader``."""
    data = reader.get_metrics_data()
    return {
        str(point.attributes["resource"]): point.value
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "llmtap.ratelimit.remaining"
        for point in metric.data.data_points
    }


def test_reinstrumenting_on_one_meter_provider_reports_current_values(sim: Simulator) -> None:
    """The OTel SDK hands back the first instruments of a name; their callbacks must read the current
    exporter, not the first one (issue 14: the rate-limit gauges reported the first values forever)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from llmtap.simulator import Scenario

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    values = []
    try:
        for remaining in (7, 3):
            llmtap.instrument(
                llmtap.Settings(base_urls=(sim.base_url,), traces=False, prometheus=False), meter_provider=provider
            )
            httpx2.post(
                f"{sim.base_url}/v1/messages",
                json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-api-key": "k", **Scenario(ratelimit_remaining=remaining).headers()},
            )
            values.append(_remaining(reader).get("requests"))
            llmtap.uninstrument()
    finally:
        provider.shutdown()
    assert values == [7, 3]


def test_uninstrument_closes_every_sink(sim: Simulator) -> None:
    closed: list[str] = []

    class Sink:
        name = "mine"

        def start(self, attempt: Any) -> object:
            return None

        def end(self, record: Any, state: object) -> None:
            pass

        def call_end(self, record: Any) -> None:
            pass

        def close(self) -> None:
            closed.append(self.name)

    from llmtap import _lifecycle

    _lifecycle.activate(settings(sim), registry=CollectorRegistry(), extra_sinks=[Sink()])
    assert closed == []
    llmtap.uninstrument()
    assert closed == ["mine"]


def test_server_address_and_port_are_bounded_on_the_otel_path() -> None:
    """A fleet of self-hosted model servers under match_any_host: the semconv histograms' (server.address,
    server.port) pairs stop at max_servers, the rest become (_other, 0) and are counted."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from llmtap._log import label_overflows

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = llmtap.Settings(match_any_host=True, max_servers=2)
    before = label_overflows().get("server", 0)
    sims = [Simulator().__enter__() for _ in range(4)]
    try:
        with capture(settings, meter_provider=provider) as cap:
            for sim in sims:
                httpx2.post(
                    f"{sim.base_url}/v1/messages",
                    json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
                    headers={"x-api-key": "k"},
                )
            assert len(cap.records) == 4  # control: every server's attempt was observed
            data = reader.get_metrics_data()
            assert data is not None
    finally:
        for sim in sims:
            sim.__exit__(None, None, None)
        provider.shutdown()
    pairs = {
        (dict(point.attributes or {})["server.address"], dict(point.attributes or {})["server.port"])
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "gen_ai.client.operation.duration"
        for point in metric.data.data_points
    }
    first_two = {(s.base_url.split("//")[1].split(":")[0], int(s.base_url.rsplit(":", 1)[1])) for s in sims[:2]}
    assert pairs == first_two | {("_other", 0)}
    assert label_overflows().get("server", 0) - before == 2
    assert {dict(s.attributes or {})["server.address"] for s in cap.spans} == {"_other"} | {a for a, _ in first_two}


def test_uninstrument_twice_is_harmless(sim: Simulator) -> None:
    registry = CollectorRegistry()
    llmtap.instrument(settings(sim), registry=registry)
    assert patched() != []  # positive control: something to undo
    llmtap.uninstrument()
    llmtap.uninstrument()  # nothing instrumented: nothing to do, nothing raised
    assert patched() == [] and families(registry) == set()
    llmtap.instrument(settings(sim), registry=registry)  # and instrumenting again works
    post(sim)
    assert attempts(registry_text(registry)) == 1
