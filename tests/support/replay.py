"""Feeding recorded or synthetic bodies through the pure attempt observer: ``tests/_replay.py`` until the
observer branch (which edits it today) has landed, then moved here (see ``tests/README.md``)."""

from __future__ import annotations

from tests._replay import (
    CONFIG,
    START,
    Fed,
    body_bytes,
    expected_anthropic,
    expected_openai_chat,
    expected_openai_responses,
    load,
    make_observer,
    replay,
    splits,
    wire_headers,
)

__all__ = [
    "CONFIG",
    "START",
    "Fed",
    "body_bytes",
    "expected_anthropic",
    "expected_openai_chat",
    "expected_openai_responses",
    "load",
    "make_observer",
    "replay",
    "splits",
    "wire_headers",
]
