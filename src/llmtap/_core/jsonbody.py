"""``json.loads`` of a response body, without the Python layers around the C scanner for the usual case."""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable

__all__ = ["loads"]

# the C scanner json.loads ends in (typeshed types make_scanner as a class taking itself)
_scan: Callable[[str, int], tuple[object, int]] = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_WHITESPACE = " \t\n\r"


def loads(body: bytes) -> object:
    """What ``json.loads(body)`` returns, and the same errors (a ``ValueError``, or ``RecursionError``).

    A body starting with ``{`` is UTF-8 (``json.detect_encoding`` says so: no BOM, no NUL byte
    first) and goes straight to the scanner ``json.loads`` would end in; anything else is
    ``json.loads``'s own.
    """
    if body[:1] != b"{":
        return json.loads(body)
    text = body.decode("utf-8", "surrogatepass")  # as json.loads decodes it
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    if end != len(text) and text[end:].strip(_WHITESPACE):
        raise json.JSONDecodeError("Extra data", text, end)
    return value
