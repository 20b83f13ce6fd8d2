"""The bounded buffer of one non-streaming response body (JSON), parsed once at its end."""

from __future__ import annotations

__all__ = ["BodyBuffer"]


class BodyBuffer:
    """Holds the pieces of one body up to ``max_bytes``; past that it drops them and holds nothing more."""

    __slots__ = ("_max", "_parts", "_size", "overflowed")

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self.overflowed = False
        """The body exceeded ``max_bytes``: nothing is kept (an attribute: read once per attempt)."""

    def add(self, data: bytes) -> bool:
        """Keep ``data``; ``False`` only for the piece that makes the body exceed the bound (the caller
        counts it once); later pieces are ignored."""
        if self.overflowed:
            return True
        self._size += len(data)
        if self._size > self._max:
            self._parts.clear()
            self.overflowed = True
            return False
        self._parts.append(data)
        return True

    def take(self) -> bytes | None:
        """The whole body (``None``: nothing kept), emptying the buffer."""
        parts = self._parts
        if not parts:
            return None
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._parts = []
        return body
