"""Which requests are LLM API traffic, and which provider parser reads them.

An API is recognised by the end of the URL path (``/messages``, ``/chat/completions``,
``/responses``, ``:streamGenerateContent`` ...) on a known public host, below a configured base URL,
or on any host with ``match_any_host``. The provider *name* (``gen_ai.provider.name``) comes from the
user's override, else the known host (``azure.ai.openai`` for Azure OpenAI), else the parser's own
(``openai`` for every OpenAI-compatible server). Decided once per (host, port, path) and cached;
non-LLM traffic costs one dict lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from llmtap._providers import anthropic, cohere, gemini, openai_chat, openai_responses
from llmtap._providers._base import Provider

__all__ = ["Endpoint", "EndpointMatcher"]

PROVIDERS: tuple[Provider, ...] = (
    anthropic.PROVIDER,
    openai_chat.PROVIDER,
    openai_responses.PROVIDER,
    gemini.PROVIDER,
    cohere.PROVIDER,
)
# exact host, or ".suffix" / "-suffix" for every matching host -> gen_ai.provider.name
KNOWN_HOSTS: dict[str, str] = {
    "api.anthropic.com": "anthropic",
    "api.openai.com": "openai",
    ".openai.azure.com": "azure.ai.openai",
    ".services.ai.azure.com": "azure.ai.openai",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "aiplatform.googleapis.com": "gcp.vertex_ai",
    "-aiplatform.googleapis.com": "gcp.vertex_ai",
    "openrouter.ai": "openai",
    "api.deepseek.com": "deepseek",
    "api.x.ai": "x_ai",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.perplexity.ai": "perplexity",
    "api.cohere.com": "cohere",
    "api.cohere.ai": "cohere",
}
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Endpoint:
    provider: Provider
    provider_name: str


def _by_suffix(path: str) -> Provider | None:
    path = path.rstrip("/")
    for provider in PROVIDERS:
        for suffix in provider.path_suffixes:
            if path.endswith(suffix):
                return provider
    return None


def known_host_name(host: str) -> str | None:
    name = KNOWN_HOSTS.get(host)
    if name is not None:
        return name
    for pattern, value in KNOWN_HOSTS.items():
        if pattern[0] in ".-" and host.endswith(pattern):
            return value
    return None


class EndpointMatcher:
    """Matches requests to endpoints: known public hosts, configured base URLs, optionally any host."""

    def __init__(
        self,
        base_urls: tuple[str, ...] = (),
        provider_names: dict[str, str] | None = None,
        match_any_host: bool = False,
    ) -> None:
        names = {k.rstrip("/"): v for k, v in (provider_names or {}).items()}
        self._bases: list[tuple[str, int, str, str | None]] = []
        for url in base_urls:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self._bases.append(((parts.hostname or "").lower(), port, parts.path.rstrip("/"), names.get(url)))
        # longest base path first, so a more specific base URL wins
        self._bases.sort(key=lambda b: len(b[2]), reverse=True)
        self._any = match_any_host
        self._cache: dict[tuple[str, int, str], Endpoint | None] = {}

    def match(self, host: str, port: int, path: str) -> Endpoint | None:
        key = (host, port, path)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = self._match(host.lower(), port, path)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = found
        return found

    def _match(self, host: str, port: int, path: str) -> Endpoint | None:
        for base_host, base_port, base_path, name in self._bases:
            if host == base_host and port == base_port and path.startswith(base_path):
                provider = _by_suffix(path)
                if provider is not None:
                    return Endpoint(provider, name or known_host_name(host) or provider.name)
        known = known_host_name(host)
        if known is not None or self._any:
            provider = _by_suffix(path)
            if provider is not None:
                return Endpoint(provider, known or provider.name)
        return None
