"""Claude on Google Vertex AI (``AnthropicVertex``):
``POST …/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`` and
``:streamRawPredict`` on ``<region>-aiplatform.googleapis.com``, ``aiplatform.googleapis.com``
(``global``) and ``aiplatform.<us|eu>.rep.googleapis.com``.

Wire facts: the body and the SSE stream are the Anthropic Messages API's (parsed by
:class:`~llmtap._providers.anthropic.AnthropicMessages`); the model is the last path segment
(URL-quoted), and ``stream`` stays in the body. Gemini on Vertex (``publishers/google/…
:streamGenerateContent``) is another API, and ``publishers/anthropic/models/count-tokens:rawPredict``
counts tokens, it generates nothing: neither is read here. Errors from Claude itself keep the
Anthropic shape (``overloaded_error`` with 529); errors from Google's front end (quota: 429) are
``{"error": {"code", "message", "status"}}``, read like Gemini's. No rate-limit or request-id
response header is documented for these calls (the response id comes from the body); Anthropic's
(``request-id``, ``anthropic-ratelimit-*``) are read should Vertex pass them through.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from llmtap._providers._base import Facts, model_in_path
from llmtap._providers._catalog import VERTEX_ANTHROPIC
from llmtap._providers.anthropic import AnthropicMessages

__all__ = ["PROVIDER", "AnthropicVertex"]

_PATH = re.compile(r"/publishers/anthropic/models/([^/:]+):(rawPredict|streamRawPredict)$")
_NOT_GENERATION = frozenset({"count-tokens"})


class AnthropicVertex(AnthropicMessages):
    """Anthropic Messages on Vertex AI's ``rawPredict`` / ``streamRawPredict``."""

    name = "gcp.vertex_ai"
    path_suffixes = VERTEX_ANTHROPIC.path_suffixes
    error_types = VERTEX_ANTHROPIC.error_types

    def accepts_path(self, path: str) -> bool:
        match = _PATH.search(path)
        return match is not None and unquote(match.group(1)) not in _NOT_GENERATION

    def model_from_path(self, path: str) -> str | None:
        return model_in_path(_PATH, path)

    def stream_from_path(self, path: str) -> bool | None:
        return path.endswith(":streamRawPredict")

    def on_body(self, facts: Facts, body: object, status: int) -> None:
        if isinstance(body, dict) and "type" not in body and isinstance(body.get("error"), dict):
            facts.server_error = True
            kind = body["error"].get("status")
            facts.error_type = kind if isinstance(kind, str) and kind else "error"
            return
        super().on_body(facts, body, status)


PROVIDER = AnthropicVertex()
