"""Moved to ``tests/support/otlp.py``; this name stays while test files of other branches import it (see
``tests/README.md``, "In transition"), and goes once they import ``tests.support.otlp``."""

from __future__ import annotations

from tests.support.otlp import Receiver, _Handler, otlp_receiver, receiver, value_of

__all__ = ["Receiver", "_Handler", "otlp_receiver", "receiver", "value_of"]
