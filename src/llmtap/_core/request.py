"""What is known about a request before it is sent: model, stream flag and output-token limit.

One extractor for every route: the SDKs' request options (a ``dict`` already), or the JSON body of a
raw httpx request, read with a byte scan when that is unambiguous and parsed properly otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from llmtap._providers._base import RequestInfo, as_int

__all__ = ["UNKNOWN", "info_from_body", "info_from_content", "info_from_json", "info_from_options"]

UNKNOWN = RequestInfo(None, None, None)
_new = tuple.__new__

# Anthropic and Chat Completions (legacy), Chat Completions, Responses, Bedrock Converse (``inferenceConfig``:
# the byte scan finds it there when it is the body's only one).
_MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "maxTokens")

_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')
_STREAM_RE = re.compile(rb'"stream"\s*:\s*(true|false)')
_MAX_TOKENS_RE = re.compile(rb'"(?:' + b"|".join(k.encode() for k in _MAX_TOKENS_KEYS) + rb')"\s*:\s*(\d{1,9})[\s,}]')


def info_from_json(data: Mapping[str, Any]) -> RequestInfo:
    """From a request's JSON object."""
    model = data.get("model")
    stream = data.get("stream")
    max_tokens = None
    for key in _MAX_TOKENS_KEYS:
        value = data.get(key)
        if value is not None:
            max_tokens = as_int(value)
            if max_tokens is not None:
                break
    return _new(  # without the named tuple's Python-level __new__ (once per SDK call)
        RequestInfo,
        (
            model if isinstance(model, str) else None,
            stream if isinstance(stream, bool) else None,
            max_tokens,
        ),
    )


def info_from_options(options: Any) -> RequestInfo | None:
    """From the official SDKs' ``FinalRequestOptions`` (its ``json_data``); ``None`` when it has none."""
    data = getattr(options, "json_data", None)
    # a dict nearly always: its type is checked before the (slower) abstract Mapping
    return info_from_json(data) if type(data) is dict or isinstance(data, Mapping) else None


def info_from_content(content: bytes | Mapping[str, Any]) -> RequestInfo:
    """From a request's content: its raw JSON body, or the object a client will serialise (aiohttp's ``json=``)."""
    return info_from_json(content) if isinstance(content, Mapping) else info_from_body(content)


def info_from_body(body: bytes) -> RequestInfo:
    """From a raw JSON request body, without a full parse when unambiguous.

    A JSON string cannot contain an unescaped quote, so ``"model":"..."`` only matches keys; when a
    key occurs more than once (a nested object with a ``model`` or ``stream`` key: an earlier tool
    call's input) the body is parsed properly.
    """
    models = _MODEL_RE.findall(body)
    tokens = _MAX_TOKENS_RE.findall(body)
    streams = _STREAM_RE.findall(body)
    if len(models) > 1 or len(tokens) > 1 or len(streams) > 1:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        return info_from_json(data) if isinstance(data, dict) else UNKNOWN
    return RequestInfo(
        models[0].decode("utf-8", "replace") if models else None,
        streams[0] == b"true" if streams else None,
        int(tokens[0]) if tokens else None,
    )
