"""What to probe and how much (:class:`ProbeOptions`), and where that points (:func:`resolve`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from llmtap.simulator import Scenario

from ._formula import CLAIM_KINDS, parse_band, parse_formula

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_SIM_SCENARIO",
    "KEY_ENV",
    "PROVIDERS",
    "SIM_MODEL",
    "ProbeOptions",
    "Resolved",
    "clean_url",
    "resolve",
]

PROVIDERS = ("anthropic", "openai", "openai-compatible")
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
DEFAULT_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4o-mini"}
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY"}
#: what the embedded simulator does when no key is given: a 50 ms ± 5 ms TTFT plus 20 µs per input
#: token, 4 ms per output token, answers as long as max_tokens allows
DEFAULT_SIM_SCENARIO = "fill,count_input,ttft=0.05,jitter=0.005,prefill=0.00002,gap=0.004"
SIM_MODEL = "sim-model"


@dataclass(frozen=True)
class ProbeOptions:
    """What to probe and how much. Claims are parsed here, so a bad one fails before any request.

    ``api_key`` ``None`` reads ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``; with no key and no
    ``base_url`` the embedded simulator is probed (``simulate=None``). The key is never printed,
    logged or put in the report.
    """

    provider: str = "anthropic"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    models: tuple[str, ...] = ()
    #: streaming requests per model in the latency phase
    requests: int = 20
    #: the largest max_tokens asked for; the requests spread from max_tokens/8 up to it
    max_tokens: int = 64
    #: the prompt is padded with 0 .. prompt_words filler words, to vary input tokens
    prompt_words: int = 400
    #: total budget in seconds: no request starts after it and none runs past it
    timeout: float = 120.0
    expect_headers: tuple[str, ...] = ()
    expect_latency: str | None = None
    expect_ttft: str | None = None
    #: the order to list the claims in: the kind ("header", "ttft", "latency") of each claim as it
    #: was given (``llmtap probe`` passes its command-line order); default: headers, TTFT, latency
    claim_order: tuple[str, ...] = ()
    aborts: bool = True
    #: provoke throttling (bounded): simulator, one call told to get 429 twice; real endpoint, a burst
    throttle: bool = False
    throttle_requests: int = 30
    #: None: the simulator when there is no key and no base URL
    simulate: bool | None = None
    sim_scenario: str = DEFAULT_SIM_SCENARIO
    seed: int = 0

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, got {self.provider!r}")
        if self.requests < 1 or self.max_tokens < 1 or self.timeout <= 0 or self.prompt_words < 0:
            raise ValueError("requests and max_tokens must be >= 1, timeout > 0, prompt_words >= 0")
        if self.expect_latency is not None:
            parse_formula(self.expect_latency)
        if self.expect_ttft is not None:
            parse_band(self.expect_ttft)
        if unknown := set(self.claim_order) - set(CLAIM_KINDS):
            raise ValueError(f"claim_order takes {', '.join(CLAIM_KINDS)}, got {', '.join(sorted(unknown))}")
        Scenario.parse(self.sim_scenario)


@dataclass(frozen=True)
class Resolved:
    """The options resolved against the environment: what is actually probed."""

    simulate: bool
    models: tuple[str, ...]
    #: the key to send (None: the simulator's, or none at all)
    key: str | None = field(repr=False)
    #: the endpoint's base URL (None: the simulator's, known once it runs)
    base_url: str | None


def resolve(o: ProbeOptions) -> Resolved:
    """Key, simulator or not, models and base URL. Raises ValueError before anything is started."""
    key = o.api_key if o.api_key is not None else os.environ.get(KEY_ENV[o.provider])
    simulate = o.simulate if o.simulate is not None else (not key and o.base_url is None)
    if not simulate and o.provider == "openai-compatible" and o.base_url is None:
        raise ValueError("openai-compatible needs a base URL")
    models = o.models or ((SIM_MODEL,) if simulate else (DEFAULT_MODELS.get(o.provider, ""),))
    if not all(models):
        raise ValueError("give at least one model (--model) for an openai-compatible endpoint")
    base_url = None if simulate else (o.base_url or DEFAULT_BASE_URLS[o.provider]).rstrip("/")
    return Resolved(simulate, tuple(models), None if simulate else key, base_url)


def clean_url(url: str) -> str:
    """The URL without credentials, query or fragment (it goes into the report)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
