"""Version fences: each of llmtap's fast paths into another package's private state is taken only on the
versions of that package the test-suite runs it on; anywhere else llmtap uses the package's public API.

A :class:`Fence` names one fast path, the distribution it reaches into and the tested range (both ends
included). Its :meth:`~Fence.open` is asked when an exporter is set up (by :func:`llmtap.instrument`),
never per request, and says once per process, at DEBUG, which path was chosen and why. Inside the range
the fast path still checks the layout it reads (its second guard) and falls back on its own where that
differs.

The ends of each range are versions the suite runs: the floor ``make compat`` installs (``COMPAT_OTEL``,
``COMPAT_PROMETHEUS_CLIENT``, ``COMPAT_HTTPX``, ``COMPAT_HTTPX2`` in the Makefile) or the newest the
development venv installs. When a package of the development venv moves past its range, the tests that
check the fast path is taken on it fail until the fast path is checked on the new version and the range
extended (``tests/test_fences.py``).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from importlib import metadata

from llmtap._log import logger

__all__ = ["HEADER_ITEMS", "OTEL_BULK", "PROMETHEUS_BUCKETS", "SPAN_SLIM", "Fence", "Version", "installed", "parse"]

Version = tuple[int, int, int]

_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse(version: str | None) -> Version | None:
    """``major.minor.patch`` of a final release; ``None`` for anything else (a pre-release, a development or
    local build: not a version the suite ran)."""
    if version is None:
        return None
    match = _RELEASE.fullmatch(version.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch)


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``importlib.metadata``), ``None`` if it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


_said: set[str] = set()
_said_lock = threading.Lock()


@dataclass(frozen=True)
class Fence:
    """One fast path into ``distribution``'s private state, taken on ``lowest`` to ``highest`` (included)."""

    path: str
    """What the fast path handles, for the log line."""
    distribution: str
    lowest: Version
    highest: Version
    fast: str
    """What happens on the fast path."""
    public: str
    """What happens instead, through the public API."""

    def open(self) -> bool:
        """Whether the fast path may be taken with the version installed now (asked at set-up, not per
        request); said once per process at DEBUG."""
        raw = installed(self.distribution)
        version = parse(raw)
        inside = version is not None and self.lowest <= version <= self.highest
        if raw is None:
            why = f"{self.distribution} is not installed"
        elif version is None:
            why = f"{self.distribution} {raw} is not a release llmtap was tested on"
        else:
            where = "within" if inside else "outside"
            why = f"{self.distribution} {raw} is {where} the tested {_text(self.lowest)} to {_text(self.highest)}"
        with _said_lock:
            first = self.path not in _said
            _said.add(self.path)
        if first:
            logger.debug("%s %s (%s)", self.path, self.fast if inside else self.public, why)
        return inside


def _text(version: Version) -> str:
    return ".".join(map(str, version))


OTEL_BULK = Fence(
    "OpenTelemetry histogram values",
    "opentelemetry-sdk",
    (1, 45, 2),
    (1, 45, 2),
    fast="go past Histogram.record() into the SDK's aggregations (llmtap._exporters._otel_bulk)",
    public="go through Histogram.record()",
)
"""``_exporters/_otel_bulk.py``. Only the newest SDK: 1.44.0 (``make compat``'s floor) has no
``_ViewInstrumentMatch._get_or_create_aggregation``, so its values went through ``record()`` anyway."""

SPAN_SLIM = Fence(
    "llmtap's ended spans (Settings.slim_spans)",
    "opentelemetry-sdk",
    (1, 44, 0),
    (1, 45, 2),
    fast="reach span processors with plain containers (llmtap._exporters._span_memory)",
    public="reach span processors as the SDK made them",
)
"""``_exporters/_span_memory.py``, asked only when ``Settings.slim_spans`` is on."""

PROMETHEUS_BUCKETS = Fence(
    "Chunk-gap histograms in prometheus-client's multiprocess mode",
    "prometheus-client",
    (0, 20, 0),
    (0, 26, 0),
    fast="are merged into the histograms' bucket values (llmtap._exporters._prometheus_multiprocess)",
    public="are observed one value per gap (Histogram.observe())",
)
"""``_exporters/_prometheus_multiprocess.py``: ``make compat``'s floor (``COMPAT_PROMETHEUS_CLIENT``) to the
newest the development venv runs."""

HEADER_ITEMS: dict[str, Fence] = {
    name: Fence(
        f"{name} response headers",
        name,
        lowest,
        highest,
        fast=f"are read as {name} keeps them (Headers._list, no copy; llmtap._core.stream)",
        public="are read from Headers.raw",
    )
    for name, lowest, highest in (("httpx", (0, 27, 0), (0, 29, 0)), ("httpx2", (2, 0, 0), (2, 17, 0)))
}
"""``_core/stream.py``, by client module, asked when its stream shells are made (the client patched, a
transport wrapped): ``make compat``'s floors (``COMPAT_HTTPX``, ``COMPAT_HTTPX2``) to the development venv's."""
