"""The response headers that matter, what each means, and a thread-safe log of what was seen."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from ._report import HeaderInfo, HeaderReport

__all__ = ["MEANINGS", "HeaderLog"]

#: header name (lowercase) or regex → meaning. Order is the report's order.
MEANINGS: tuple[tuple[str, str], ...] = (
    ("request-id", "the server's id for this request (the name Anthropic gives it); quote it in support tickets"),
    ("x-request-id", "the provider's id for this request (OpenAI and most compatible servers)"),
    ("anthropic-ratelimit-requests-limit", "requests allowed per window (Anthropic rate limit)"),
    ("anthropic-ratelimit-requests-remaining", "requests left in the current window"),
    ("anthropic-ratelimit-requests-reset", "when the request window refills (RFC 3339 time)"),
    ("anthropic-ratelimit-tokens-limit", "tokens (input + output) allowed per window"),
    ("anthropic-ratelimit-tokens-remaining", "tokens left in the current window"),
    ("anthropic-ratelimit-tokens-reset", "when the token window refills"),
    ("anthropic-ratelimit-input-tokens-limit", "input tokens allowed per window"),
    ("anthropic-ratelimit-input-tokens-remaining", "input tokens left"),
    ("anthropic-ratelimit-input-tokens-reset", "when the input-token window refills"),
    ("anthropic-ratelimit-output-tokens-limit", "output tokens allowed per window"),
    ("anthropic-ratelimit-output-tokens-remaining", "output tokens left"),
    ("anthropic-ratelimit-output-tokens-reset", "when the output-token window refills"),
    ("x-ratelimit-limit-requests", "requests allowed per window (OpenAI rate limit)"),
    ("x-ratelimit-remaining-requests", "requests left in the current window"),
    ("x-ratelimit-reset-requests", "time until the request window refills (Go duration, e.g. 6ms, 1m2s)"),
    ("x-ratelimit-limit-tokens", "tokens allowed per window"),
    ("x-ratelimit-remaining-tokens", "tokens left in the current window"),
    ("x-ratelimit-reset-tokens", "time until the token window refills"),
    ("retry-after", "seconds to wait before retrying (HTTP standard: whole seconds or an HTTP date)"),
    ("retry-after-ms", "milliseconds to wait before retrying (non-standard; the SDKs prefer it)"),
    ("x-should-retry", "the server tells the SDK whether this failure is worth retrying"),
    ("openai-processing-ms", "server-side processing time in ms, as OpenAI reports it"),
    ("x-envoy-upstream-service-time", "ms the upstream service took, measured by an Envoy proxy in front of it"),
    ("openai-version", "API version that served the request"),
    ("server", "the software (or edge proxy) that answered"),
    ("via", "proxies the response passed through"),
    ("cf-ray", "Cloudflare edge request id (the request crossed Cloudflare)"),
    ("x-cache", "whether a cache in front answered"),
)
_KNOWN = {name for name, _ in MEANINGS}
#: identifiers of the account: presence reported, value withheld
_WITHHELD = re.compile(r"organization|project|account|user|key|token$|cookie", re.IGNORECASE)


class HeaderLog:
    """Counts response header names over every response of the probe; keeps example values only for
    the known headers (and the ones the user asked about), never for account identifiers."""

    def __init__(self, expected: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self.responses = 0
        self.statuses: Counter[int] = Counter()
        self.names: Counter[str] = Counter()
        self._names_by_status: dict[int, Counter[str]] = {}
        self.examples: dict[str, str] = {}
        self.error_examples: dict[str, str] = {}
        self._keep = _KNOWN | {e.lower() for e in expected}

    def add(self, status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        items = headers.items() if isinstance(headers, Mapping) else headers
        with self._lock:
            self.responses += 1
            self.statuses[status] += 1
            seen: set[str] = set()
            for raw_name, value in items:
                name = raw_name.lower()
                if name in seen:
                    continue
                seen.add(name)
                self.names[name] += 1
                self._names_by_status.setdefault(status, Counter())[name] += 1
                if name not in self._keep or _WITHHELD.search(name):
                    continue
                target = self.examples if 200 <= status < 300 else self.error_examples
                target.setdefault(name, value[:200])

    def missing(self, name: str) -> dict[int, int]:
        """Status → how many responses with that status lacked the header (statuses with none left out)."""
        name = name.lower()
        with self._lock:
            lacking = {s: n - self._names_by_status.get(s, Counter())[name] for s, n in self.statuses.items()}
        return {s: n for s, n in lacking.items() if n}

    def example(self, name: str) -> str | None:
        name = name.lower()
        return self.examples.get(name, self.error_examples.get(name))

    def report(self) -> HeaderReport:
        with self._lock:
            infos = [
                HeaderInfo(name, meaning, self.names[name], self.example(name))
                for name, meaning in MEANINGS
                if self.names.get(name)
            ]
            other = tuple(sorted(n for n in self.names if n not in _KNOWN))
            return HeaderReport(self.responses, tuple(infos), other)
