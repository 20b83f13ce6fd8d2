"""The ``/metrics`` endpoint llmtap serves itself when ``Settings.metrics_port`` is set.

Started by :func:`llmtap.instrument` and stopped (socket closed, thread joined) by
:func:`llmtap.uninstrument`. Under prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``
set) it serves the sum over every process writing to that directory, so one server per directory and
port is enough. Which process serves is decided by a claim, not by who binds first: an exclusive
``flock`` on ``llmtap-metrics-PORT.lock`` in that directory, held while serving (the kernel drops it
when the process ends, so a crash leaves no stale claim). A process that finds the claim held leaves
the port to its holder, a sibling worker or the pre-fork master; a process that holds the claim and
still cannot bind has found the port held by another program, and says so.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
from collections.abc import Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from llmtap._log import logger

__all__ = ["MetricsServer", "check_port", "multiprocess_dir"]


def multiprocess_dir(environ: Mapping[str, str] = os.environ) -> str | None:
    """prometheus-client's multiprocess directory, when that mode is on in this process (in ``environ``)."""
    # the lower-case spelling is the deprecated one prometheus-client still honours
    return environ.get("PROMETHEUS_MULTIPROC_DIR") or environ.get("prometheus_multiproc_dir") or None


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _server_class(addr: str) -> type[_Server]:
    return _Server6 if ":" in addr else _Server


def _where(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


_SETTINGS = "Settings.metrics_port / LLMTAP_METRICS_PORT, metrics_addr / LLMTAP_METRICS_ADDR"


def _problem(addr: str, port: int, exc: OSError, mp_dir: str | None, source: str) -> str:
    """One line: why ``addr:port`` (asked for by ``source``) cannot be served."""
    text = f"cannot serve /metrics on {_where(addr, port)} ({source}): {exc.strerror or exc}"
    if exc.errno == errno.EADDRINUSE:
        if mp_dir is None:
            text += (
                ": held by another program (choose another port); if it is another process of this app, "
                "several worker processes need multiprocess mode (PROMETHEUS_MULTIPROC_DIR)"
            )
        else:
            text += f" by another program: no process of the multiprocess directory {mp_dir} serves it"
    return text


class _Claim:
    """This process's claim to serve ``/metrics`` on ``port`` for a multiprocess directory (module docstring)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._pid = os.getpid()

    @staticmethod
    def _path(mp_dir: str, port: int) -> str:
        return os.path.join(mp_dir, f"llmtap-metrics-{port}.lock")

    @classmethod
    def take(cls, mp_dir: str, port: int) -> _Claim | None:
        """The claim, or ``None`` when another live process holds it.

        Raises:
            OSError: the directory cannot be written (the message names it).
        """
        try:
            fd = os.open(cls._path(mp_dir, port), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"llmtap cannot use the multiprocess directory {mp_dir} (PROMETHEUS_MULTIPROC_DIR): {exc.strerror}",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # for the holder's siblings' log line only
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    @classmethod
    def holder(cls, mp_dir: str, port: int) -> str:
        """The pid the holder wrote, for a log line (``?`` when unreadable)."""
        try:
            with open(cls._path(mp_dir, port)) as f:
                return f.read().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Give the claim up; in a forked child only close the inherited descriptor (the lock is shared
        with the parent, which still holds it). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if os.getpid() == self._pid:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def check_port(addr: str, port: int, *, source: str = _SETTINGS, environ: Mapping[str, str] = os.environ) -> None:
    """Check, binding nothing that stays bound, that :meth:`MetricsServer.start` could serve ``addr:port``
    in a process with environment ``environ`` (``llmtap run`` checks before the program starts).

    Raises:
        OSError: the address cannot be bound: the port is held by another program (in multiprocess
            mode: by a program that is not a process of the same directory), the address is not
            this host's, the port is privileged. The message is one line naming the address and
            ``source``, the settings that asked for it.
    """
    if port == 0:
        return
    mp_dir = multiprocess_dir(environ)
    claim = None
    if mp_dir is not None:
        claim = _Claim.take(mp_dir, port)
        if claim is None:
            return  # a process of this directory serves it; the program's processes will leave it to that one
    try:
        _server_class(addr)((addr, port), _QuietHandler).server_close()
    except OSError as exc:
        raise OSError(exc.errno, _problem(addr, port, exc, mp_dir, source)) from exc
    finally:
        if claim is not None:
            claim.release()


class MetricsServer:
    """A running ``/metrics`` server; :meth:`stop` closes its socket and joins its thread."""

    def __init__(self, server: Any, thread: threading.Thread, claim: _Claim | None) -> None:
        self._server = server
        self._thread = thread
        self._claim = claim
        self._pid = os.getpid()
        host, port = server.server_address[:2]
        self.address: tuple[str, int] = (str(host), int(port))

    @classmethod
    def start(cls, addr: str, port: int, registry: CollectorRegistry) -> MetricsServer | None:
        """Serve ``registry`` (or, in multiprocess mode, every process's metrics) on ``addr:port``.

        Returns ``None`` only in multiprocess mode when another process of the same directory holds
        the claim to serve that port (module docstring).

        Raises:
            OSError: the address cannot be bound (the message names it and the setting); in
                multiprocess mode, also when the port is held by a program outside the directory.
        """
        source: CollectorRegistry = registry
        mp_dir = multiprocess_dir()
        claim = None
        if mp_dir is not None:
            from prometheus_client import multiprocess

            if port != 0:
                claim = _Claim.take(mp_dir, port)
                if claim is None:
                    logger.info(
                        "/metrics on %s is served by process %s of the multiprocess directory %s",
                        _where(addr, port),
                        _Claim.holder(mp_dir, port),
                        mp_dir,
                    )
                    return None
            source = CollectorRegistry()
            multiprocess.MultiProcessCollector(source, path=mp_dir)  # type: ignore[no-untyped-call]
        try:
            # prometheus-client's start_http_server, but with a short poll so that stop() is quick
            server = make_server(addr, port, make_wsgi_app(source), _server_class(addr), handler_class=_QuietHandler)
        except OSError as exc:
            if claim is not None:
                claim.release()
            raise OSError(exc.errno, f"llmtap {_problem(addr, port, exc, mp_dir, _SETTINGS)}") from exc
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"llmtap-metrics:{port}", daemon=True
        )
        thread.start()
        made = cls(server, thread, claim)
        logger.info("serving /metrics on http://%s/metrics", _where(*made.address))
        return made

    def stop(self) -> None:
        """Stop serving, close the listening socket and join the thread. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        if os.getpid() != self._pid:
            server.server_close()  # a forked child: the serving thread lives in the parent only
        else:
            server.shutdown()
            server.server_close()
            self._thread.join(timeout=5.0)
        if self._claim is not None:
            self._claim.release()  # after the socket is closed: a sibling that takes it can bind

    def forked(self) -> None:
        """Called in a forked child of the process serving: a parent that serves from its own memory cannot
        see this process's metrics; say so once (gunicorn under ``llmtap run`` without multiprocess mode)."""
        if self._server is None or multiprocess_dir() is not None:
            return
        logger.warning(
            "process %d was forked from the process serving /metrics on %s:%d, which cannot see its "
            "metrics; set PROMETHEUS_MULTIPROC_DIR (prometheus-client multiprocess mode) before starting a "
            "multi-worker server",
            os.getpid(),
            *self.address,
        )
