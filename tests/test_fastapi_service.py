"""The example FastAPI service (examples/fastapi_service) under real multi-worker servers.

gunicorn with uvicorn workers (configured by the example's gunicorn.conf.py), the same zero-code
under ``llmtap run``, and ``uvicorn --workers`` under ``llmtap run``; real HTTP clients in threads;
prometheus-client's multiprocess mode. The totals over all workers must equal what the simulator
served, exactly.
"""

from __future__ import annotations

import gzip
import io
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from llmtap import Outcome
from llmtap.simulator import Scenario, Served, Simulator
from tests.support.deploy import Scrape, free_port, histogram_count, instances, spans, wait_http, wait_until
from tests.support.otlp import Receiver, _Handler, otlp_receiver

SERVICE = Path(__file__).resolve().parents[1] / "examples" / "fastapi_service"
BIN = Path(sys.executable).parent
# what llmtap must report for each way the simulator ended a stream the app read to its end
EXPECTED_OUTCOME = {
    "completed": Outcome.COMPLETED,
    "error_status": Outcome.REJECTED,
    "error_event": Outcome.SERVER_ERROR,
    "client_disconnected": Outcome.CANCELLED,
}
MIX = (
    [Scenario(tokens=20, gap=0.005)] * 16
    + [Scenario(tokens=10, fail=1, retry_after=0.01)] * 4  # a 529, then the SDK's retry succeeds
    + [Scenario(tokens=10, error_event_at=3)] * 4  # an SSE error event mid-answer
)


def service_env(sim: Simulator, tmp_path: Path, port: int, **extra_env: str) -> dict[str, str]:
    """The service's environment: multiprocess mode in a fresh directory, the simulator as the API."""
    mp_dir = tmp_path / "prometheus-multiproc"
    mp_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMTAP_", "PROMETHEUS_"))}
    env.update(
        PROMETHEUS_MULTIPROC_DIR=str(mp_dir),
        ANTHROPIC_BASE_URL=sim.base_url,
        ANTHROPIC_API_KEY="not-needed",
        LLMTAP_BASE_URLS=sim.base_url,
        BIND=f"127.0.0.1:{port}",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        **extra_env,
    )
    return env


@contextmanager
def serve(
    command: list[str], sim: Simulator, tmp_path: Path, port: int, **extra_env: str
) -> Iterator[subprocess.Popen[bytes]]:
    env = service_env(sim, tmp_path, port, **extra_env)
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(command, cwd=SERVICE, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/metrics", timeout=40)
        except TimeoutError:
            raise AssertionError((tmp_path / "server.log").read_text()) from None
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert "Traceback" not in (tmp_path / "server.log").read_text(), (tmp_path / "server.log").read_text()


def chat(port: int, scenario: Scenario) -> tuple[int, str]:
    """One end user: POST /chat and read the streamed answer. Returns (worker pid, text read)."""
    with httpx2.Client(timeout=30) as client, open_chat(client, port, scenario) as r:
        assert r.status_code == 200
        pid = int(r.headers["x-worker-pid"])
        text = ""
        for chunk in r.iter_text():
            text += chunk
    return pid, text


def open_chat(client: httpx2.Client, port: int, scenario: Scenario) -> Any:
    return client.stream("POST", f"http://127.0.0.1:{port}/chat", json={"prompt": "hi"}, headers=scenario.headers())


def load(port: int, scenarios: list[Scenario], concurrency: int = 8) -> set[int]:
    with ThreadPoolExecutor(concurrency) as pool:
        return {pid for pid, _ in pool.map(lambda s: chat(port, s), scenarios)}


def reported_output(served: Served) -> int:
    """Output tokens the wire reported: the final usage of a completed stream; for a 200 stream that
    ended early, only ``message_start``'s usage (output_tokens 1, simulator/_anthropic.py)."""
    if served.outcome_sent == "completed":
        return served.output_tokens
    return 1 if served.status == 200 and served.headers_sent_at is not None else 0


def assert_totals_match(scrape: Scrape, served: list[Served]) -> None:
    """Every counter llmtap keeps, summed over all workers, equals what the simulator served."""
    served = [s for s in served if s.api == "anthropic"]
    assert scrape.total("llmtap_attempts_total") == len(served)
    by_status = Counter(str(s.status) for s in served)
    for status, count in by_status.items():
        assert scrape.total("llmtap_attempts_total", status_code=status) == count, status
    by_outcome = Counter(EXPECTED_OUTCOME[s.outcome_sent] for s in served)
    for outcome in Outcome:
        assert scrape.total("llmtap_streams_total", outcome=outcome.value) == by_outcome.get(outcome, 0), outcome
    assert scrape.total("llmtap_tokens_total", gen_ai_token_type="output") == sum(map(reported_output, served))
    assert scrape.total("llmtap_tokens_total", gen_ai_token_type="input") == sum(s.input_tokens for s in served)
    assert scrape.total("llmtap_retries_total", reason="529") == by_status.get("529", 0)
    assert scrape.total("llmtap_streams_in_flight") == 0


@pytest.mark.slow
def test_gunicorn_uvicorn_workers(tmp_path: Path) -> None:
    """gunicorn.conf.py: 4 uvicorn workers, llmtap.instrument() in post_fork, child_exit marks dead workers."""
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    with Simulator() as sim, serve([str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "app:app"], sim, tmp_path, port):
        pids = load(port, list(MIX))
        assert len(pids) >= 2, "the load should spread over several workers"
        served = sim.wait_served(len(MIX) + 4)  # 4 retried
        assert_totals_match(Scrape.get(metrics), served)

        # an end user who leaves mid-answer: Starlette cancels the app's task that reads the model's stream
        slow = Scenario(tokens=60, gap=0.05)
        with httpx2.Client(timeout=30) as client, open_chat(client, port, slow) as r:
            chunks = r.iter_bytes()  # kept: a dropped iterator would close the response right away
            next(chunks)
            assert Scrape.get(metrics).total("llmtap_streams_in_flight") == 1
        served = sim.wait_served(len(MIX) + 5, timeout=10)
        assert served[-1].outcome_sent == "client_disconnected" and served[-1].deltas_sent < slow.tokens
        wait_until(lambda: Scrape.get(metrics).total("llmtap_streams_in_flight") == 0, 10, "in-flight back to 0")
        assert Scrape.get(metrics).total("llmtap_streams_total", outcome=Outcome.CANCELLED.value) == 1
        assert_totals_match(Scrape.get(metrics), served)

        # a worker killed mid-stream: its live gauge goes (child_exit -> mark_process_dead), its counts stay
        before = Scrape.get(metrics).total("llmtap_attempts_total")
        with httpx2.Client(timeout=30) as client, open_chat(client, port, slow) as r:
            chunks = r.iter_bytes()
            next(chunks)
            assert Scrape.get(metrics).total("llmtap_streams_in_flight") == 1
            os.kill(int(r.headers["x-worker-pid"]), signal.SIGKILL)
            with pytest.raises(httpx2.HTTPError):
                for _ in chunks:
                    pass
        wait_until(lambda: Scrape.get(metrics).total("llmtap_streams_in_flight") == 0, 10, "the dead worker's gauge")
        assert Scrape.get(metrics).total("llmtap_attempts_total") == before


@pytest.mark.slow
def test_llmtap_run_gunicorn_zero_code(tmp_path: Path) -> None:
    """`llmtap run -- gunicorn app:app -k uvicorn_worker.UvicornWorker -w 4`, no config file, no llmtap code;
    /metrics from the app and from llmtap, and OTLP traces and metrics from every worker."""
    port, llmtap_port = free_port(), free_port()
    empty_config = tmp_path / "empty.conf.py"
    empty_config.write_text("")
    command = [
        str(BIN / "llmtap"), "run", "--metrics-port", str(llmtap_port), "--",
        "gunicorn", "app:app", "-k", "uvicorn_worker.UvicornWorker", "-w", "4", "--preload",
        "-b", f"127.0.0.1:{port}", "-c", str(empty_config),
    ]  # fmt: skip
    with Simulator() as sim, otlp_receiver() as receiver:
        release = hold_the_first_exporter(receiver)
        otel = {
            "OTEL_SERVICE_NAME": "chat-service",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "httpx",  # llmtap's spans only, for exact counts
            # uvicorn ends a worker by re-raising SIGTERM after its graceful shutdown, so atexit (where the
            # OpenTelemetry SDK flushes) never runs: what arrives is what the periodic exports sent
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "LLMTAP_OTEL_METRICS": "true",  # both metric paths, on purpose (llmtap run says so in one line)
            "LLMTAP_SPAN_DETAIL": "true",  # http.response.status_code on the spans, to count them by status
        }
        with serve(command, sim, tmp_path, port, **otel):
            # every worker forked (each while the master's export was held open) before the traffic
            log = tmp_path / "server.log"
            wait_until(lambda: log.read_text().count("Application startup complete") >= 4, 60, "4 workers")
            release.set()
            pids = load(port, list(MIX))
            assert len(pids) >= 2
            served = sim.wait_served(len(MIX) + 4)
            # the app's /metrics and llmtap's own server (in the gunicorn master) both sum every worker
            assert_totals_match(Scrape.get(f"http://127.0.0.1:{port}/metrics"), served)
            assert_totals_match(Scrape.get(f"http://127.0.0.1:{llmtap_port}/metrics"), served)
            # OTLP from every forked worker: one span per attempt, and the semconv duration histogram
            wait_until(lambda: len(spans(receiver, "chat ")) >= len(served), 15, "a span per attempt over OTLP")
            chats = spans(receiver, "chat ")
            assert len(chats) == len(served)

            # Each forked worker exports under its own service.instance.id (the OTel SDK draws it again after
            # a fork), so its cumulative streams are its own and sum exactly, as in a Collector. A worker
            # forked while the master's reader was exporting would never export a metric (llmtap's fork
            # guard, _exporters/_otel_fork.py): here every fork lands inside one (held open above).
            def counted() -> int:
                return histogram_count(receiver, "gen_ai.client.operation.duration")

            try:
                wait_until(lambda: counted() >= len(served), 60, "every attempt over OTLP")  # a hang guard
            except TimeoutError:
                raise AssertionError(f"{counted()} of {len(served)} attempts arrived over OTLP") from None
            assert counted() == len(served)
            # every worker that sent spans sent metrics; one instance per worker, plus the master (it exports
            # llmtap's health counters)
            assert {resource["service.instance.id"] for _, _, resource in chats} <= instances(receiver)
            assert len(set(pids)) <= len(instances(receiver)) <= 4 + 1
            # call ids are drawn per process after the fork (--preload imports llmtap in the master):
            # one id per logical call, never shared by two workers' calls
            call_ids = Counter(attrs["llmtap.call.id"] for _, attrs, _ in chats)
            assert len(call_ids) == len(MIX)
            assert sorted(call_ids.values()) == sorted([1] * (len(MIX) - 4) + [2] * 4)  # the 4 retried calls
            assert {resource["service.name"] for _, _, resource in chats} == {"chat-service"}
            statuses = Counter(attrs["http.response.status_code"] for _, attrs, _ in chats)
            assert statuses == Counter(s.status for s in served)
            assert counted() == len(served)
    assert (tmp_path / "server.log").read_text().count("metrics are exported twice") == 1


def hold_the_first_exporter(receiver: Receiver, at_most: float = 8.0) -> threading.Event:
    """Make ``receiver`` hold open each metrics export of the first process that sends one (the gunicorn
    master: its reader exports from half a second after start, the workers fork once the app is loaded)
    until the returned event is set, at most ``at_most`` seconds each (under the exporter's 10 s timeout).
    A worker then forks while the master's reader is exporting: what a slow collector makes likely, made
    certain."""
    release = threading.Event()
    first: list[str] = []

    class Holding(_Handler):
        def do_POST(self) -> None:
            if self.path == "/v1/metrics" and not release.is_set():
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.rfile = io.BytesIO(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(
                    gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
                )
                ids = {
                    a.value.string_value
                    for rm in request.resource_metrics
                    for a in rm.resource.attributes
                    if a.key == "service.instance.id"
                }
                with receiver.lock:
                    if not first:
                        first.extend(ids)
                if ids & set(first):
                    release.wait(at_most)
            super().do_POST()

    receiver.RequestHandlerClass = Holding
    return release


@pytest.mark.slow
def test_llmtap_run_uvicorn_workers(tmp_path: Path) -> None:
    """`llmtap run --metrics-port N -- uvicorn app:app --workers 2`: spawned workers instrument themselves;
    the first process binds /metrics, the others find the port taken and leave it to that one."""
    port, llmtap_port = free_port(), free_port()
    command = [
        str(BIN / "llmtap"), "run", "--metrics-port", str(llmtap_port), "--",
        "uvicorn", "app:app", "--workers", "2", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    metrics = f"http://127.0.0.1:{port}/metrics"
    with Simulator() as sim, serve(command, sim, tmp_path, port):
        scenarios = list(MIX[:12]) + list(MIX[16:18])
        load(port, scenarios)
        served = sim.wait_served(len(scenarios) + 2)
        assert_totals_match(Scrape.get(metrics), served)
        assert_totals_match(Scrape.get(f"http://127.0.0.1:{llmtap_port}/metrics"), served)

        # a worker killed mid-stream: no child_exit here, the app's /metrics forgets dead workers itself
        with httpx2.Client(timeout=30) as client, open_chat(client, port, Scenario(tokens=60, gap=0.05)) as r:
            chunks = r.iter_bytes()
            next(chunks)
            assert Scrape.get(metrics).total("llmtap_streams_in_flight") == 1
            os.kill(int(r.headers["x-worker-pid"]), signal.SIGKILL)
            with pytest.raises(httpx2.HTTPError):
                for _ in chunks:
                    pass
        wait_until(lambda: Scrape.get(metrics).total("llmtap_streams_in_flight") == 0, 15, "the dead worker's gauge")
        assert Scrape.get(metrics).total("llmtap_attempts_total") == len(served)


@pytest.mark.parametrize(
    "zero_code",
    [pytest.param(True, id="llmtap-run"), pytest.param(False, id="gunicorn-conf", marks=pytest.mark.slow)],
)
def test_gunicorn_with_metrics_port_held_by_another_program(tmp_path: Path, zero_code: bool) -> None:
    """Multiprocess mode, the llmtap /metrics port held by another program (a real listening socket): never
    silently shared. Under `llmtap run`: one line and exit 2 before gunicorn starts. With gunicorn.conf.py
    (llmtap.instrument() in post_fork): the workers fail to boot, and gunicorn stops, naming the address.
    The positive controls, workers sharing the port as designed, are the tests above."""
    port = free_port()
    with Simulator() as sim, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        if zero_code:
            command = [str(BIN / "llmtap"), "run", "--metrics-port", str(held), "--"]
            command += ["gunicorn", "-c", "gunicorn.conf.py", "app:app"]
            env = service_env(sim, tmp_path, port)
        else:
            command = [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "app:app"]
            env = service_env(sim, tmp_path, port, LLMTAP_METRICS_PORT=str(held), WEB_CONCURRENCY="2")
        out = subprocess.run(command, cwd=SERVICE, env=env, capture_output=True, text=True, timeout=60)
    where = f"cannot serve /metrics on 127.0.0.1:{held}"
    assert out.returncode != 0 and where in out.stderr and "by another program" in out.stderr, out.stderr
    if zero_code:
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "Booting worker" not in out.stderr and "Starting gunicorn" not in out.stderr
    else:
        assert "Worker failed to boot" in out.stderr, out.stderr
