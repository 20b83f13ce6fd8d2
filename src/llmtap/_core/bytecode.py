"""What the caller's frames and bytecode say about a stream's end: whether the generators being unwound were
closed by the app (a ``close()`` / ``aclose()`` call, or leaving a ``for`` loop over them) or dropped.

The shells (:mod:`llmtap._core.stream`) ask it as a body's generator unwinds; the answer decides between
``client_closed`` and ``abandoned``. Reading an opcode is a contract with one interpreter version:
:data:`LOOP_EXITS` lists the opcode per Python llmtap is tested on (``tests/test_stream.py`` pins each reading
on each), and :func:`python_checked` says once, at ``instrument()``, when this Python is not one of them.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import sys
from typing import Any

from llmtap._log import log_once

__all__ = ["LOOP_EXITS", "closed_by_the_app", "python_checked"]

_GENERATORS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_CLOSE_NAMES = frozenset({"close", "aclose"})


def closed_by_the_app(stops: bool = False) -> bool:
    """Whether the generators being unwound were closed by a ``close()`` / ``aclose()`` call (the
    app's, or ``contextlib.closing``'s): the first frame outside the chain of generator frames (and
    the ``contextlib`` frames of the ``with`` blocks inside them) is at a call of a method of that
    name. With ``stops``, leaving a ``for`` loop over them (``break``, or ``return`` from inside it)
    counts too: that frame is at the instruction that drops the loop's iterator. A dropped generator is
    finalised at whatever instruction dropped it (a ``del``, a rebinding, a function's end; the event
    loop's finaliser for an async one). A collection that interrupts the app's own call of some other
    ``close()`` (or, with ``stops``, a loop's exit) would be misread as a close: rare, and app-side
    either way. This may run inside the garbage collector: it only reads frames and bytecode (no lock,
    no logging), and decodes instructions only when the frame is at a call.

    Why frames and bytecode, not the generator's or the response's state: a ``break`` and a ``del``
    reach llmtap the same way (the last reference to the app's generator goes, and its finalisation
    closes the generators under it), in the same state (suspended at a ``yield``, the response open and
    not read to its end). Only the instruction that let the reference go tells them apart. What is not
    read for sure reads as no close: the attempt is then ``abandoned``, never a close the app did not
    make, and nothing here raises (the reading is guarded)."""
    try:
        frame: Any = sys._getframe(1)
        in_generators = False
        while frame is not None:
            code = frame.f_code
            if code.co_flags & _GENERATORS:
                in_generators = True
            elif in_generators:
                if code.co_filename != contextlib.__file__:
                    return _at_a_close(frame, stops)
                if _at_a_close(frame, False):  # ``contextlib.closing``'s ``close()``
                    return True
            frame = frame.f_back
    except Exception:  # an interpreter laid out otherwise: no close read
        return False
    return False


LOOP_EXITS: dict[tuple[int, int], frozenset[str]] = {
    (3, 11): frozenset({"POP_TOP"}),
    (3, 12): frozenset({"POP_TOP"}),
    (3, 13): frozenset({"POP_TOP"}),
}
"""The opcode the app's frame is at when it leaves a ``for`` loop by ``break`` or ``return`` (the loop's
iterator is dropped there), on each Python llmtap is tested on (``tests/test_stream.py`` pins each reading on
each, ``make pythons`` runs it on all of them). On any other Python no loop exit is read: such a stream
reads ``abandoned`` (:func:`python_checked` says so once, at ``instrument()``)."""

_LOOP_EXITS = LOOP_EXITS.get(sys.version_info[:2], frozenset())


def _at_a_close(frame: Any, stops: bool) -> bool:
    code = frame.f_code
    lasti = frame.f_lasti
    op = dis.opname[code.co_code[lasti]] if 0 <= lasti < len(code.co_code) else ""
    if op in _LOOP_EXITS:  # a loop's iterator dropped by ``break`` / ``return``
        return stops
    # CALL*, or 3.11's PRECALL (a specialised one makes the call itself); SEND: ``await x.aclose()``
    if "CALL" not in op and op != "SEND":
        return False
    name = None
    for instruction in dis.get_instructions(code):
        if instruction.offset > lasti:
            break
        if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            name = instruction.argval
    return name in _CLOSE_NAMES


def python_checked() -> None:
    """Log once (WARNING) when this Python is not one llmtap reads stream endings on (:data:`LOOP_EXITS`):
    called by ``instrument()``. Everything else works the same there; that one reading does not."""
    version = sys.version_info[:2]
    if version not in LOOP_EXITS:
        tested = ", ".join(f"{major}.{minor}" for major, minor in LOOP_EXITS)
        log_once(
            "python-version",
            "Python %d.%d is not one llmtap is tested on (%s): a stream the app leaves with `break` "
            "or `return` reads `abandoned`, not `client_closed` (that reading depends on the interpreter's "
            "bytecode); everything else is observed as usual",
            *version,
            tested,
        )
