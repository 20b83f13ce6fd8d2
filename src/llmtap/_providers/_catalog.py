"""What routing and the label bounds know of each provider before its parser is loaded.

A request is routed to a parser by the end of its URL path (:attr:`Entry.path_suffixes`), and the label
bounds admit every stop reason and error type a provider documents (``_core/bounds.py``) from the first
request on. The parser modules themselves (10-20 KiB each of code and classes) are imported when a path
first matches one of their suffixes (:func:`parser`): a process loads the parsers of the APIs it calls,
not all ten. Each parser class declares these values from its entry here.
"""

import importlib
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from llmtap._providers._base import Provider

__all__ = [
    "ANTHROPIC",
    "BEDROCK",
    "BEDROCK_CONVERSE",
    "COHERE",
    "ENTRIES",
    "GEMINI",
    "OLLAMA_CHAT",
    "OLLAMA_GENERATE",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "VERTEX_ANTHROPIC",
    "Entry",
    "parser",
]


class Entry(NamedTuple):
    module: str
    """The parser's module in ``llmtap._providers`` (it exports ``PROVIDER``)."""
    path_suffixes: tuple[str, ...]
    """The API is recognised by the end of the URL path (the parser may still refuse the whole path)."""
    stop_reasons: frozenset[str]
    """The stop reasons the provider documents: always admitted as label values."""
    error_types: frozenset[str]
    """The error types the provider documents: always admitted as label values."""


ANTHROPIC_STOP_REASONS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
ANTHROPIC_ERROR_TYPES = frozenset(
    {
        "invalid_request_error", "authentication_error", "billing_error", "permission_error", "not_found_error",
        "request_too_large", "rate_limit_error", "api_error", "overloaded_error", "timeout_error", "error",
    }
)  # fmt: skip
OPENAI_ERROR_TYPES = frozenset(
    {
        "invalid_request_error", "invalid_api_key", "authentication_error", "permission_error", "not_found_error",
        "model_not_found", "rate_limit_exceeded", "rate_limit_error", "insufficient_quota", "tokens_exceeded",
        "context_length_exceeded", "server_error", "api_error", "service_unavailable", "overloaded_error",
        "content_filter", "invalid_prompt", "vector_store_timeout", "unsupported_value", "error",
    }
)  # fmt: skip
"""The error codes / types the OpenAI APIs document (and OpenAI-compatible servers commonly send)."""

GEMINI_STOP_REASONS = frozenset(
    {
        "FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "LANGUAGE", "OTHER",
        "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL", "IMAGE_SAFETY",
        "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "BLOCK_REASON_UNSPECIFIED",
    }
)  # fmt: skip
GOOGLE_ERROR_TYPES = frozenset(
    {
        "INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED", "NOT_FOUND", "RESOURCE_EXHAUSTED",
        "INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "UNAUTHENTICATED", "CANCELLED",
    }
)  # fmt: skip
"""The ``status`` of Google API errors (Gemini's, and Vertex AI's around Claude)."""
BEDROCK_ERROR_TYPES = frozenset(
    {
        "internalServerException", "modelStreamErrorException", "validationException", "throttlingException",
        "modelTimeoutException", "serviceUnavailableException",
        # x-amzn-errortype of error responses
        "AccessDeniedException", "InternalServerException", "ModelErrorException", "ModelNotReadyException",
        "ModelTimeoutException", "ResourceNotFoundException", "ServiceQuotaExceededException",
        "ServiceUnavailableException", "ThrottlingException", "ValidationException",
    }
)  # fmt: skip
"""Bedrock's own error types (its stream's exception messages and ``x-amzn-errortype``), beyond Anthropic's."""

ANTHROPIC = Entry("anthropic", ("/messages",), ANTHROPIC_STOP_REASONS, ANTHROPIC_ERROR_TYPES)
OPENAI_CHAT = Entry(
    "openai_chat",
    ("/chat/completions",),
    frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"}),
    OPENAI_ERROR_TYPES,
)
OPENAI_RESPONSES = Entry(
    "openai_responses",
    ("/responses",),
    frozenset({"stop", "tool_calls", "max_output_tokens", "content_filter", "incomplete"}),
    OPENAI_ERROR_TYPES,
)
GEMINI = Entry(
    "gemini", (":generateContent", ":streamGenerateContent"), GEMINI_STOP_REASONS, GOOGLE_ERROR_TYPES | {"error"}
)
COHERE = Entry(
    "cohere",
    ("/v2/chat",),
    frozenset({"COMPLETE", "STOP_SEQUENCE", "MAX_TOKENS", "TOOL_CALL", "ERROR", "TIMEOUT"}),
    frozenset({"ERROR", "TIMEOUT"}),
)
BEDROCK = Entry(
    "bedrock",
    ("/invoke", "/invoke-with-response-stream"),
    ANTHROPIC_STOP_REASONS,
    ANTHROPIC_ERROR_TYPES | BEDROCK_ERROR_TYPES,
)
BEDROCK_CONVERSE_STOP_REASONS = frozenset(
    {
        "end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened", "content_filtered",
        "malformed_model_output", "malformed_tool_use", "model_context_window_exceeded",
    }
)  # fmt: skip
"""The ``StopReason`` values of Bedrock's Converse API (botocore's ``bedrock-runtime`` service model)."""
BEDROCK_CONVERSE = Entry(
    "bedrock_converse",
    ("/converse", "/converse-stream"),
    BEDROCK_CONVERSE_STOP_REASONS,
    BEDROCK_ERROR_TYPES,
)
VERTEX_ANTHROPIC = Entry(
    "vertex_anthropic",
    (":rawPredict", ":streamRawPredict"),
    ANTHROPIC_STOP_REASONS,
    ANTHROPIC_ERROR_TYPES | GOOGLE_ERROR_TYPES,
)
OLLAMA_STOP_REASONS = frozenset({"stop", "length", "load", "unload"})
"""ollama's ``done_reason`` values: generation stopped, hit ``num_predict``, a model loaded or unloaded by a
request without a prompt."""
OLLAMA_CHAT = Entry("ollama_chat", ("/api/chat",), OLLAMA_STOP_REASONS, frozenset({"error"}))
OLLAMA_GENERATE = Entry("ollama_generate", ("/api/generate",), OLLAMA_STOP_REASONS, frozenset({"error"}))
OLLAMA_MODULES = frozenset({OLLAMA_CHAT.module, OLLAMA_GENERATE.module})
ENTRIES: tuple[Entry, ...] = (
    ANTHROPIC,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    GEMINI,
    COHERE,
    BEDROCK,
    BEDROCK_CONVERSE,
    VERTEX_ANTHROPIC,
    OLLAMA_CHAT,
    OLLAMA_GENERATE,
)
"""In matching order: the first entry with a suffix ending the path whose parser accepts the path wins."""


def parser(entry: Entry) -> "Provider":
    """The parser of ``entry``, its module imported now if it is not yet."""
    provider: Provider = importlib.import_module(f"llmtap._providers.{entry.module}").PROVIDER
    return provider
