"""ollama's native completion API (``POST /api/generate``), streamed (NDJSON) and not; the wire facts
are in ``_ollama_common.py``."""

from __future__ import annotations

from llmtap._providers._catalog import OLLAMA_GENERATE
from llmtap._providers._ollama_common import OllamaNative

__all__ = ["PROVIDER", "OllamaGenerate"]


class OllamaGenerate(OllamaNative):
    """Parser for ``/api/generate``: each chunk's output is ``response`` or ``thinking`` (``image`` for
    image-generation models)."""

    operation = "text_completion"
    chat = False
    path_suffixes = OLLAMA_GENERATE.path_suffixes
    stop_reasons = OLLAMA_GENERATE.stop_reasons
    error_types = OLLAMA_GENERATE.error_types


PROVIDER = OllamaGenerate()
