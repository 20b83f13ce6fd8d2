"""The one global: what :func:`llmtap.instrument` installed (the active tap, the ``/metrics`` server it
started, the methods it patched), as one :class:`Installation`, or ``None``.

:mod:`llmtap._lifecycle` builds it all or nothing and sets :data:`current` last; ``uninstrument()`` clears
:data:`current` first, then tears it down. The hooks read ``current.tap`` per request (two attribute reads).
This module imports nothing at run time: every other module may read it without import cycles or cost.

A forked child inherits the installation, as it inherits the patched methods (gunicorn forks its workers
after the app, and llmtap, were imported): it keeps observing. What must differ per process is each owner's
to renew in its own ``os.register_at_fork`` hook: the hand-off queue and thread (:mod:`llmtap._core.handoff`),
the call-id prefix (:mod:`llmtap._core.calls`); the child's copy of the server is told below.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from types import ModuleType

    from prometheus_client import CollectorRegistry

    from llmtap._core.tap import Tap
    from llmtap._exporters.serve import MetricsServer

__all__ = ["Installation", "Patches", "active", "current"]


class Patches(Protocol):
    """What an installation asks of its patch set (``llmtap._hooks.patches.Patches``, which reads
    :data:`current`: this module names no hook, so the two make no circle)."""

    def imported(self, module: ModuleType) -> None:
        """``module`` was imported: patch it if wanted."""
        ...

    def restore(self) -> None:
        """Restore every patched method."""
        ...


class Installation:
    """What one :func:`llmtap.instrument` holds until :func:`llmtap.uninstrument`."""

    __slots__ = ("patches", "registry", "server", "tap")

    def __init__(
        self,
        tap: Tap,
        server: MetricsServer | None,
        patches: Patches | None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.tap = tap
        self.registry = registry
        """The Prometheus registry the tap's metrics are registered in (``None``: no Prometheus exporter)."""
        self.server = server
        """The ``/metrics`` server started for ``tap`` (``Settings.metrics_port``), if any."""
        self.patches = patches
        """The patched HTTP clients and SDKs (``None``: ``instrument(patch=False)``)."""

    def close(self) -> None:
        """Undo everything, in the reverse order of the build: patches restored, server stopped, then the
        tap closed (it ends what the garbage collector handed off first, then closes every exporter).
        Each step runs even if an earlier one fails; the first error propagates afterwards."""
        error: BaseException | None = None
        for step in (self._unpatch, self._stop_server, self.tap.close):
            try:
                step()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error

    def _unpatch(self) -> None:
        if self.patches is not None:
            self.patches.restore()

    def _stop_server(self) -> None:
        self.tap.metrics_address = None
        if self.server is not None:
            self.server.stop()


current: Installation | None = None
"""The installation in effect in this process (the only lifecycle global)."""


def active() -> Tap | None:
    """The tap :func:`llmtap.instrument` activated (the one the patched clients use), if any."""
    installation = current
    return None if installation is None else installation.tap


def _after_fork_in_child() -> None:
    """A forked worker whose parent serves ``/metrics`` from its own memory: this process's metrics are not
    in it. Say so once (gunicorn under ``llmtap run`` without multiprocess mode)."""
    installation = current
    if installation is not None and installation.server is not None:
        installation.server.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
