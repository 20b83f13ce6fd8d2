"""Bounded label values: whatever a server sends, every sink sees a bounded set of values.

Stop reasons, error types and the response model come from the wire; the request model comes from
the app. Each becomes a label value of every series and span attribute llmtap writes, so each goes
through a :class:`LabelBound` before any sink sees the record:

- the value is sanitised: cut to :data:`MAX_LABEL_LENGTH` characters, C0/C1 control characters and
  lone surrogates (what invalid UTF-8 leaves in a JSON string) removed, so the exposition text
  stays valid and one line per sample;
- values the providers document (their ``stop_reasons`` / ``error_types``) always pass;
- the first ``limit`` other distinct values pass; later ones become the overflow value
  (``Settings.overflow_value``, ``_other`` by default), and each replacement is counted in
  ``llmtap_label_overflows_total{label}``. A value that sanitises to nothing is replaced too.

A value seen before costs one dict lookup without a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from llmtap._log import label_overflow, log_once

if TYPE_CHECKING:
    from llmtap._core.record import AttemptRecord
    from llmtap._providers._catalog import Entry
    from llmtap._settings import Settings

__all__ = ["MAX_LABEL_LENGTH", "LabelBound", "RecordBounds", "sanitize"]

MAX_LABEL_LENGTH = 128
"""Longest label value kept; longer values are cut."""
_MAX_ID_LENGTH = 256  # response and request ids (span attributes only, never labels)


def _unsafe(char: str) -> bool:
    return char < " " or "\x7f" <= char <= "\x9f" or "\ud800" <= char <= "\udfff"


def sanitize(value: str) -> str:
    """``value`` cut to :data:`MAX_LABEL_LENGTH` characters, without control characters or surrogates.

    No regular expression: one whose class reaches the surrogates builds a 64 Ki-entry character map in
    Python when compiled (~180 KiB of RSS at import). ``str.isprintable()`` is true of every label value
    but a few (it also refuses the spaces and format characters kept here), which go through the slow path."""
    if len(value) > MAX_LABEL_LENGTH:
        value = value[:MAX_LABEL_LENGTH]
    if value.isprintable():
        return value
    return "".join(char for char in value if not _unsafe(char))


class LabelBound:
    """Maps the values of one label to at most ``len(known) + limit`` label values plus ``overflow``.

    Thread-safe; a value seen before is one dict lookup, without a lock.
    """

    __slots__ = ("_admitted", "_known", "_lock", "_map", "label", "limit", "overflow", "seen")

    def __init__(self, label: str, limit: int, overflow: str, known: Iterable[str] = ()) -> None:
        self.label = label
        self.limit = limit
        self.overflow = overflow
        self._known = frozenset(sanitize(value) for value in known)
        self._map: dict[str, str] = {value: value for value in self._known}
        self.seen: Mapping[str, str] = self._map
        """Value -> label value, for the values seen (read-only: what a call would answer without one)."""
        self._admitted: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        mapped = self._map.get(value)
        if mapped is not None:
            return mapped
        return self._miss(value)

    def _miss(self, value: str) -> str:
        clean = sanitize(value) if isinstance(value, str) else ""
        with self._lock:
            mapped = self._map.get(value)
            if mapped is not None:
                return mapped
            if clean and (clean in self._known or clean in self._admitted):
                mapped = clean
            elif clean and len(self._admitted) < self.limit:
                self._admitted.add(clean)
                mapped = clean
            else:
                mapped = self.overflow
            # remember mappings while the map is small; past that, replaced values take this path
            if mapped != self.overflow or len(self._map) < 4 * (self.limit + len(self._known)):
                self._map[value] = mapped
        if mapped == self.overflow:
            label_overflow(self.label)
            log_once(
                f"overflow-{self.label}",
                "more than %d distinct %s values; further ones are labelled %r",
                self.limit,
                self.label,
                self.overflow,
            )
        return mapped

    @property
    def admitted(self) -> int:
        """Distinct values admitted beyond the known ones (at most ``limit``)."""
        return len(self._admitted)


class RecordBounds:
    """The bounds of one configured llmtap, applied to every record before any sink sees it."""

    __slots__ = (
        "_attribute_bounds",
        "_server",
        "_servers",
        "error_type",
        "overflow",
        "request_model",
        "response_model",
        "servers",
        "stop_reason",
    )

    def __init__(self, settings: Settings, providers: Iterable[Entry]) -> None:
        providers = tuple(providers)
        overflow = settings.overflow_value
        self.request_model = LabelBound("request_model", settings.max_models, overflow)
        self.response_model = LabelBound("response_model", settings.max_models, overflow)
        stops = (reason for provider in providers for reason in provider.stop_reasons)
        self.stop_reason = LabelBound("stop_reason", settings.max_stop_reasons, overflow, stops)
        errors = (kind for provider in providers for kind in provider.error_types)
        self.error_type = LabelBound("error_type", settings.max_error_types, overflow, (*errors, *_CLIENT_ERRORS))
        self.overflow = overflow
        self._server = LabelBound("server", settings.max_servers, overflow)
        self._servers: dict[tuple[str, int], tuple[str, int]] = {}
        self.servers: Mapping[tuple[str, int], tuple[str, int]] = self._servers
        """(host, port) -> what :meth:`server` answers, for the pairs seen (read-only: the answer without a call)."""
        self._attribute_bounds = tuple(
            (key, LabelBound("attribute", settings.max_attribute_values, overflow)) for key in settings.attribute_labels
        )

    def attribute_labels(self, values: Mapping[str, str]) -> tuple[str, ...]:
        """The ``Settings.attribute_labels`` values of ``values``, each bounded (``""`` when absent)."""
        out = []
        for key, bound in self._attribute_bounds:
            value = values.get(key)
            out.append(bound(value) if value else "")
        return tuple(out)

    def server(self, host: str, port: int) -> tuple[str, int]:
        """The (``server.address``, ``server.port``) attribute values: the pair itself while fewer than
        ``Settings.max_servers`` pairs were seen, else (overflow value, 0). One dict lookup when seen."""
        key = (host, port)
        known = self._servers.get(key)
        if known is not None:
            return known
        bounded = self._server(f"{host}:{port}")
        pair = (self.overflow, 0) if bounded == self.overflow else (sanitize(host), port)
        if len(self._servers) < 4 * self._server.limit:  # past that, replaced pairs take this path
            self._servers[key] = pair
        return pair

    def model_label(self, model: str | None) -> str:
        """The ``gen_ai.request.model`` label value (``""`` when the request named none)."""
        return self.request_model(model) if model else ""

    def apply(self, record: AttemptRecord) -> AttemptRecord:
        """``record`` with its wire-valued labels bounded (the same object when nothing changed). A value
        that passes as itself (seen before: nearly always) is one dict lookup, without a call."""
        changes: dict[str, object] = {}
        value = record.response_model
        if value and self.response_model.seen.get(value) != value:
            bounded = self.response_model(value)
            if bounded != value:
                changes["response_model"] = bounded
        value = record.error_type
        if value and self.error_type.seen.get(value) != value:
            bounded = self.error_type(value)
            if bounded != value:
                changes["error_type"] = bounded
        reasons = record.stop_reasons
        if len(reasons) == 1:  # one choice (all but n > 1)
            value = reasons[0]
            if self.stop_reason.seen.get(value) != value:
                bounded = self.stop_reason(value)
                if bounded != value:
                    changes["stop_reasons"] = (bounded,)
        elif reasons:
            bounded_reasons = tuple(self.stop_reason(reason) for reason in reasons)
            if bounded_reasons != reasons:
                changes["stop_reasons"] = bounded_reasons
        if record.response_id and len(record.response_id) > _MAX_ID_LENGTH:
            changes["response_id"] = record.response_id[:_MAX_ID_LENGTH]
        if record.request_id and len(record.request_id) > _MAX_ID_LENGTH:
            changes["request_id"] = record.request_id[:_MAX_ID_LENGTH]
        return record._replace(**changes) if changes else record  # type: ignore[arg-type]


# error types llmtap itself writes: HTTP statuses, the incomplete-stream marker, transport exceptions
_CLIENT_ERRORS: tuple[str, ...] = (
    *(str(status) for status in (*range(400, 419), 421, 422, 423, 424, 425, 426, 428, 429, 431, 451)),
    *(str(status) for status in (*range(500, 512), 520, 521, 522, 523, 524, 529)),
    "incomplete_stream",
    "ConnectError",
    "ConnectTimeout",
    "ReadError",
    "ReadTimeout",
    "WriteError",
    "WriteTimeout",
    "PoolTimeout",
    "RemoteProtocolError",
    "LocalProtocolError",
    "ProxyError",
    "CloseError",
    "TimeoutError",
    "CancelledError",
    "KeyboardInterrupt",
    "ClientConnectionError",
    "ServerDisconnectedError",
    "ClientPayloadError",
)
