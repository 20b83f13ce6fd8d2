"""Gunicorn with uvicorn workers, prometheus-client multiprocess mode and llmtap.

``PROMETHEUS_MULTIPROC_DIR`` must be set in the environment before gunicorn starts (prometheus-client
picks its storage when it is imported); this file empties it at start-up and marks dead workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
worker_class = "uvicorn_worker.UvicornWorker"
graceful_timeout = 5
preload_app = True  # import the app once in the master; workers fork with it loaded (fast boots)


def on_starting(server: Any) -> None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        raise RuntimeError(
            "examples/fastapi_service/gunicorn.conf.py (gunicorn reads ./gunicorn.conf.py by default) sums the "
            "workers' metrics through prometheus-client's multiprocess mode: export "
            "PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) before starting gunicorn"
        )
    Path(directory).mkdir(parents=True, exist_ok=True)
    for stale in Path(directory).glob("*.db"):  # counts of a previous run
        stale.unlink()


def post_fork(server: Any, worker: Any) -> None:
    import llmtap

    llmtap.instrument()  # settings from LLMTAP_*; under `llmtap run` it returns the active instrumentation


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]  # drops its live gauges
