"""The ``/metrics`` endpoint llmtap serves itself when ``Settings.metrics_port`` is set.

Started by :func:`llmtap.instrument` and stopped (socket closed, thread joined) by
:func:`llmtap.uninstrument`. Under prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``
set) it serves the sum over every process writing to that directory, so one server per host is
enough: when the port is already taken there, a sibling worker (or the pre-fork master) serves it.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from llmtap._log import logger

__all__ = ["MetricsServer", "multiprocess_dir"]

_serving: dict[int, tuple[str, int]] = {}  # id(server) -> address, for the servers running in this process


def multiprocess_dir() -> str | None:
    """prometheus-client's multiprocess directory, when that mode is on in this process."""
    # the lower-case spelling is the deprecated one prometheus-client still honours
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None  # noqa: SIM112


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """A running ``/metrics`` server; :meth:`stop` closes its socket and joins its thread."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self._pid = os.getpid()
        host, port = server.server_address[:2]
        self.address: tuple[str, int] = (str(host), int(port))

    @classmethod
    def start(cls, addr: str, port: int, registry: CollectorRegistry) -> MetricsServer | None:
        """Serve ``registry`` (or, in multiprocess mode, every process's metrics) on ``addr:port``.

        Returns ``None`` only in multiprocess mode when the port is taken (another process serves).

        Raises:
            OSError: the address cannot be bound (the message names it and the setting).
        """
        source: CollectorRegistry = registry
        mp_dir = multiprocess_dir()
        if mp_dir is not None:
            from prometheus_client import multiprocess

            source = CollectorRegistry()
            multiprocess.MultiProcessCollector(source, path=mp_dir)  # type: ignore[no-untyped-call]
        try:
            # prometheus-client's start_http_server, but with a short poll so that stop() is quick
            server = make_server(
                addr, port, make_wsgi_app(source), _Server6 if ":" in addr else _Server, handler_class=_QuietHandler
            )
        except OSError as exc:
            if mp_dir is not None and exc.errno == errno.EADDRINUSE:
                logger.info("llmtap: %s:%d is taken; in multiprocess mode another worker serves /metrics", addr, port)
                return None
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = "; several worker processes need multiprocess mode (PROMETHEUS_MULTIPROC_DIR)"
            raise OSError(
                exc.errno,
                f"llmtap cannot serve /metrics on {addr}:{port}: {exc.strerror or exc} "
                f"(Settings.metrics_port / LLMTAP_METRICS_PORT, metrics_addr / LLMTAP_METRICS_ADDR){hint}",
            ) from exc
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"llmtap-metrics:{port}", daemon=True
        )
        thread.start()
        made = cls(server, thread)
        _serving[id(made)] = made.address
        logger.info("llmtap: serving /metrics on http://%s:%d/metrics", *made.address)
        return made

    def stop(self) -> None:
        """Stop serving, close the listening socket and join the thread. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        _serving.pop(id(self), None)
        if os.getpid() != self._pid:
            server.server_close()  # a forked child: the serving thread lives in the parent only
            return
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5.0)


def _after_fork_in_child() -> None:
    """A forked worker whose parent serves /metrics from its own memory: this process's metrics are
    not in it. Say so once (gunicorn under ``llmtap run`` without multiprocess mode)."""
    if _serving and multiprocess_dir() is None:
        addr, port = next(iter(_serving.values()))
        logger.warning(
            "llmtap: process %d was forked from the process serving /metrics on %s:%d, which cannot see its "
            "metrics; set PROMETHEUS_MULTIPROC_DIR (prometheus-client multiprocess mode) before starting a "
            "multi-worker server",
            os.getpid(),
            addr,
            port,
        )


os.register_at_fork(after_in_child=_after_fork_in_child)
