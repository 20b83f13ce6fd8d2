"""Behaviour knobs of the simulator, and their compact string form.

A :class:`Scenario` travels per request in the ``x-llmtap-sim`` request header, e.g.::

    x-llmtap-sim: tokens=8,ttft=0.2,gap=0.01,fail=2,fail_status=529,retry_after=0.05

Pairs are ``key=value`` separated by commas, semicolons or whitespace; boolean knobs may be
given bare (``gzip``, ``no_stop``) or as ``gzip=1`` / ``gzip=false``. Dashes in keys are read
as underscores (``no-stop`` == ``no_stop``). An empty string is the all-defaults scenario.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Final

__all__ = [
    "ERROR_TYPES",
    "FAIL_STATUSES",
    "SCENARIO_HEADER",
    "STOP_REASONS",
    "Scenario",
    "ScenarioError",
    "delta_text",
]

SCENARIO_HEADER: Final = "x-llmtap-sim"

#: Statuses ``fail_status`` accepts, with the Anthropic ``error.type`` each is answered with.
FAIL_STATUSES: Final[dict[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}

#: ``error_type`` values for ``error_event_at`` (mid-stream error events).
ERROR_TYPES: Final = ("overloaded_error", "api_error", "rate_limit_error", "invalid_request_error")

STOP_REASONS: Final = ("end_turn", "max_tokens", "tool_use", "stop_sequence", "refusal")

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})
_SPLIT: Final = re.compile(r"[,;\s]+")


class ScenarioError(ValueError):
    """An ``x-llmtap-sim`` string (or Scenario field) is invalid; the server answers 400."""


def delta_text(index: int) -> str:
    """The text of content delta number ``index`` (0-based): ``"tok0 "``, ``"tok1 "``, ..."""
    return f"tok{index} "


@dataclass(frozen=True)
class Scenario:
    """How the simulator answers one request. Every field is optional; in the ``x-llmtap-sim`` header each
    is a key (``fail=2``; a boolean also bare: ``gzip``), see the module docs and ``docs/reference/simulator.md``
    (generated from these fields)."""

    headers_delay: float = 0.0
    """Seconds before the status line and headers are sent."""
    ttft: float = 0.0
    """Seconds between the headers and the first content delta (streaming)."""
    gap: float = 0.0
    """Seconds between subsequent content deltas (a schedule: delta ``i`` is due ``ttft + i * gap`` after
    the preamble, so sleep overshoot does not accumulate)."""
    tokens: int = 5
    """Number of content deltas (one word each: ``tok0 tok1 ...``); also the output-token usage."""
    jitter: float = 0.0
    """TTFT jitter: the time to the first delta is drawn uniformly from ``ttft ± jitter`` (at least 0)."""
    prefill: float = 0.0
    """Prefill time: seconds added to the time to the first delta per input token."""
    fill: bool = False
    """The answer is as long as the request allows: ``tokens`` = the request's max_tokens
    (``max_completion_tokens``, ``max_output_tokens``, ``maxOutputTokens``), stop reason ``max_tokens``."""
    count_input: bool = False
    """Input tokens are counted from the request (one per whitespace-separated word of its text) instead of
    taken from ``input``."""
    fail: int = 0
    """The first ``fail`` attempts of a call are answered with ``fail_status`` (then the answer comes). An
    attempt's number is the one the client sends (``x-stainless-retry-count`` of the OpenAI, Anthropic and
    Groq SDKs; ``amz-sdk-request``'s attempt - 1 of boto3 and aiobotocore); from a client that sends none
    (LiteLLM's own retries, google-genai, mistralai, cohere, ollama, plain httpx or aiohttp) it is how many
    requests of the same path, model and ``x-llmtap-sim`` value came before, since the simulator started
    or was cleared: so give each such call its own model to fail every call's first attempts."""
    fail_status: int = 529
    """The status of a failed attempt (``fail``), with the API's error body: 400, 401, 403, 404, 408, 413,
    429, 500, 503 or 529."""
    retry_after: float | None = None
    """``retry-after`` (integer ceil) and ``retry-after-ms`` on failed attempts; None: not sent."""
    error_event_at: int | None = None
    """After this many deltas of a streamed 200, send an SSE error event and end the body."""
    error_type: str = "overloaded_error"
    """The error event's type (``error_event_at``): overloaded_error, api_error, rate_limit_error or
    invalid_request_error."""
    drop_at: int | None = None
    """After this many deltas, drop the connection abruptly (no chunked terminator)."""
    no_stop: bool = False
    """End the stream cleanly but without ``message_delta`` / ``message_stop`` (or the other APIs' end
    events)."""
    stall_at: int | None = None
    """After this many deltas, sleep ``stall`` seconds, then continue."""
    stall: float = 0.0
    """Seconds of the stall at ``stall_at``."""
    stall_until_closed: bool = False
    """The stall lasts until the client closes the connection (``stall`` is then only a cap): the end of the
    stream cannot arrive before the client leaves, however late it is scheduled."""
    corrupt_at: int | None = None
    """Bedrock only: content delta number ``corrupt_at`` (from 0) is sent with a payload byte flipped after
    its CRCs were computed (a wire fault: the client's event-stream decoder rejects the message)."""
    gzip: bool = False
    """``content-encoding: gzip`` (per-event sync-flushed when streaming)."""
    input: int = 25
    """Input tokens reported in the usage."""
    cache_read: int = 0
    """Prompt-cache read tokens reported in the usage."""
    cache_write: int = 0
    """Prompt-cache write tokens reported in the usage."""
    reasoning: int = 0
    """OpenAI only: ``output_tokens_details.reasoning_tokens`` (added to the output total)."""
    stop_reason: str = "end_turn"
    """The stop reason (each API's spelling of it): end_turn, max_tokens, tool_use, stop_sequence or refusal."""
    model: str | None = None
    """The response's model; None echoes the request's model."""
    ratelimit_remaining: int | None = None
    """Overrides the requests-remaining rate-limit header."""
    tool_call: bool = False
    """Streams only (Anthropic, OpenAI Chat and Responses, Cohere; ollama's comes whole in delta 0): the
    answer is one tool call; delta 0 names the tool (``lookup``), the others are pieces of its JSON
    arguments (:meth:`tool_piece`)."""

    _FLAGS: ClassVar[frozenset[str]] = frozenset(
        {"gzip", "no_stop", "fill", "count_input", "stall_until_closed", "tool_call"}
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, (bool, str)):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise ScenarioError(f"{f.name} must be finite, got {value!r}")
            if isinstance(value, (int, float)) and value < 0:
                raise ScenarioError(f"{f.name} must be >= 0, got {value!r}")
        if self.fail_status not in FAIL_STATUSES:
            allowed = "|".join(str(s) for s in FAIL_STATUSES)
            raise ScenarioError(f"fail_status must be one of {allowed}, got {self.fail_status}")
        if self.error_type not in ERROR_TYPES:
            raise ScenarioError(f"error_type must be one of {'|'.join(ERROR_TYPES)}, got {self.error_type!r}")
        if self.stop_reason not in STOP_REASONS:
            raise ScenarioError(f"stop_reason must be one of {'|'.join(STOP_REASONS)}, got {self.stop_reason!r}")
        if self.model is not None and not self.model:
            raise ScenarioError("model must not be empty")

    # ------------------------------------------------------------------ string form

    @classmethod
    def known_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(cls, s: str) -> Scenario:
        """Parse the compact ``key=value,...`` form. Raises :class:`ScenarioError`."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for item in _SPLIT.split(s.strip()):
            if not item:
                continue
            key, eq, raw = item.partition("=")
            key = key.strip().lower().replace("-", "_")
            raw = raw.strip()
            if key not in types:
                raise ScenarioError(f"unknown {SCENARIO_HEADER} key {key!r}; known keys: {', '.join(cls.known_keys())}")
            if key in values:
                raise ScenarioError(f"{SCENARIO_HEADER} key {key!r} given twice")
            values[key] = cls._convert(key, str(types[key]), raw if eq else None)
        return cls(**values)

    @classmethod
    def _convert(cls, key: str, type_name: str, raw: str | None) -> Any:
        if key in cls._FLAGS:
            if raw is None or raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ScenarioError(f"{key} must be a boolean (1/0/true/false), got {raw!r}")
        if raw is None or raw == "":
            raise ScenarioError(f"{SCENARIO_HEADER} key {key!r} needs a value ({key}=...)")
        if type_name.startswith("str"):
            return raw
        if type_name.startswith("int"):
            try:
                return int(raw)
            except ValueError:
                raise ScenarioError(f"{key} must be an integer, got {raw!r}") from None
        try:
            return float(raw)
        except ValueError:
            raise ScenarioError(f"{key} must be a number (seconds), got {raw!r}") from None

    def to_header(self) -> str:
        """The compact form of the non-default knobs; ``Scenario.parse(s.to_header()) == s``."""
        parts: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            if isinstance(value, bool):
                parts.append(f.name if value else f"{f.name}=0")
            else:
                parts.append(f"{f.name}={value}")
        return ",".join(parts)

    def headers(self) -> dict[str, str]:
        """``{"x-llmtap-sim": self.to_header()}``, ready for an SDK's ``extra_headers=``."""
        return {SCENARIO_HEADER: self.to_header()}

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some knobs changed (validated)."""
        return dataclasses.replace(self, **changes)

    def resolve(self, max_tokens: int | None, input_words: int, rng: random.Random | None = None) -> Scenario:
        """The concrete behaviour for one request: ``fill``, ``count_input``, ``jitter`` and ``prefill``
        applied (and reset), so :attr:`Served.scenario` carries what was really injected."""
        if not (self.fill or self.count_input or self.jitter or self.prefill):
            return self
        changes: dict[str, Any] = {"fill": False, "count_input": False, "jitter": 0.0, "prefill": 0.0}
        if self.fill and max_tokens is not None:
            changes["tokens"] = max_tokens
            changes["stop_reason"] = "max_tokens"
        inp = input_words if self.count_input else self.input
        changes["input"] = inp
        ttft = self.ttft + self.prefill * inp
        if self.jitter:
            ttft += (rng or random).uniform(-self.jitter, self.jitter)
        changes["ttft"] = max(0.0, ttft)
        return dataclasses.replace(self, **changes)

    def tool_piece(self, index: int) -> str:
        """With ``tool_call``: the piece of the arguments delta ``index`` (>= 1) carries."""
        return ('{"q":"' if index == 1 else "") + delta_text(index)

    def tool_closing(self) -> str:
        """With ``tool_call``: the last piece of the arguments, sent after the deltas."""
        return ('{"q":"' if self.tokens < 2 else "") + '"}'

    def tool_arguments(self) -> str:
        """With ``tool_call``: the whole arguments (``{"q":"tok1 tok2 ... "}``)."""
        return "".join(self.tool_piece(i) for i in range(1, self.tokens)) + self.tool_closing()

    def expected_text(self) -> str:
        """The full text a complete response carries: ``"tok0 tok1 ... "``."""
        return "".join(delta_text(i) for i in range(self.tokens))
