"""ollama's native chat API (``POST /api/chat``), streamed (NDJSON) and not; the wire facts are in
``_ollama_common.py``."""

from __future__ import annotations

from llmtap._providers._catalog import OLLAMA_CHAT
from llmtap._providers._ollama_common import OllamaNative

__all__ = ["PROVIDER", "OllamaChat"]


class OllamaChat(OllamaNative):
    """Parser for ``/api/chat``: each chunk's output is in ``message`` (``content``, ``thinking``,
    ``tool_calls``)."""

    operation = "chat"
    chat = True
    path_suffixes = OLLAMA_CHAT.path_suffixes
    stop_reasons = OLLAMA_CHAT.stop_reasons
    error_types = OLLAMA_CHAT.error_types


PROVIDER = OllamaChat()
