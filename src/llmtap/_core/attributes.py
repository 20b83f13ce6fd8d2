"""Attribution: the app says which feature, route or tenant a call belongs to.

::

    with llmtap.attributes(feature="search", tenant="acme"):
        client.messages.create(...)        # async code: the same ``with`` (or ``async with``)

Every attempt begun inside the block carries the values: always as span attributes, and as metric
labels for the keys ``Settings.attribute_labels`` names, each bounded like the models
(``Settings.max_attribute_values`` per key; overflow counted in
``llmtap_label_overflows_total{label="attribute"}``). Blocks nest (inner values win). The values live
in a context variable, so they follow the code into threads started with ``contextvars.copy_context``
and into asyncio tasks, and never leak between concurrent requests.

Zero-code apps (``llmtap run``) can take them from OpenTelemetry baggage instead
(``Settings.baggage_attributes``): web-framework instrumentations put the incoming request's W3C
``baggage`` header into the context, so ``baggage: feature=search`` on the request to the app labels
the LLM calls it makes.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping
from types import MappingProxyType, TracebackType

__all__ = ["CURRENT", "KEY_PATTERN", "attributes", "current"]

KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""Attribute keys: lower-case letters, digits and ``_`` (a valid Prometheus label name and OTel key)."""

_EMPTY: Mapping[str, str] = MappingProxyType({})
CURRENT: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("llmtap_attributes", default=_EMPTY)
"""The attributes of the innermost :class:`attributes` block (empty outside any): ``CURRENT.get()``."""


def current() -> Mapping[str, str]:
    """The attributes of the innermost :class:`attributes` block (empty outside any)."""
    return CURRENT.get()


class attributes:  # lower case: used like a function, ``with llmtap.attributes(feature="search"):``
    """Attach ``values`` to every LLM attempt begun inside the ``with`` block (sync or async).

    Raises:
        ValueError: a key is not ``[a-z][a-z0-9_]*`` (at most 64 characters).
    """

    __slots__ = ("_token", "_values")

    def __init__(self, **values: str | int | float | bool) -> None:
        for key in values:
            if not KEY_PATTERN.match(key):
                raise ValueError(f"llmtap.attributes: key {key!r} must match {KEY_PATTERN.pattern}")
        self._values = {key: str(value) for key, value in values.items()}
        self._token: contextvars.Token[Mapping[str, str]] | None = None

    def __enter__(self) -> attributes:
        merged = {**CURRENT.get(), **self._values}
        self._token = CURRENT.set(MappingProxyType(merged))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._token is not None:
            CURRENT.reset(self._token)
            self._token = None

    async def __aenter__(self) -> attributes:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)
