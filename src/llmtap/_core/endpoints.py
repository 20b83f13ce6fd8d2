"""Which requests are LLM API traffic, and which provider parser reads them.

An API is recognised by the end of the URL path (``/messages``, ``/chat/completions``, ``/responses``,
``:streamGenerateContent``, Bedrock's ``/invoke`` and ``/converse``, Vertex's ``:rawPredict``, ollama's
``/api/chat`` ...), which its parser may confirm from the whole path (:meth:`~llmtap._providers.Provider.accepts_path`:
Claude's publisher on Vertex, a Claude model on Bedrock), on a known public host (``KNOWN_HOSTS``,
``CLOUD_HOSTS``), below a configured base URL, or on any host with ``match_any_host``; ollama's native API
also on ollama's default port (:data:`OLLAMA_PORT`), whatever the host. The provider *name*
(``gen_ai.provider.name``) comes from the user's override, else the known host (``azure.ai.openai`` for
Azure OpenAI), else the parser's own (``openai`` for every OpenAI-compatible server). Decided once per
(host, port, path) and cached; non-LLM traffic costs one dict lookup.

Hosts are compared normalised: lower case, no trailing dot, and ``localhost`` / ``127.0.0.1`` /
``::1`` as one host; a URL without a port has its scheme's default (http 80, https 443). A path that
is an LLM API's on a host none of the rules above covers is still returned, marked *not observed*
(:attr:`Endpoint.observed`): the tap observes it when an official SDK sent it (whatever the host;
:func:`sdk_endpoint` names it), and otherwise names the host once in a log line
(:class:`UnobservedHosts`).
"""

from __future__ import annotations

import re
import threading
from typing import NamedTuple
from urllib.parse import urlsplit

from llmtap._core.bounds import sanitize
from llmtap._log import logger
from llmtap._providers import _catalog
from llmtap._providers._base import Provider

__all__ = ["Endpoint", "EndpointMatcher", "UnobservedHosts", "normalize_host", "sdk_endpoint"]

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
    "claude.googleapis.com": "anthropic",  # AnthropicGoogleCloud
    "ollama.com": "ollama",  # ollama's cloud models (its native API and the OpenAI-compatible one)
}
# Cloud hosts with the region inside the name (full match, after KNOWN_HOSTS). The name follows the
# semconv registry and the anthropic SDK's own ``gen_ai.provider.name``: Claude on Bedrock (its
# runtime and Mantle) is ``aws.bedrock``, on Vertex ``gcp.vertex_ai``; Anthropic's own API served
# from AWS (``AnthropicAWS``) stays ``anthropic``.
CLOUD_HOSTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"bedrock-runtime(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"), "aws.bedrock"),
    (re.compile(r"bedrock-mantle\.[a-z0-9-]+\.api\.aws"), "aws.bedrock"),
    (re.compile(r"aws-external-anthropic\.[a-z0-9-]+\.api\.aws"), "anthropic"),
    (re.compile(r"aiplatform\.[a-z0-9-]+\.rep\.googleapis\.com"), "gcp.vertex_ai"),
)
OLLAMA_PORT = 11434
"""ollama's default port: a request for its native API (``/api/chat``, ``/api/generate``) to this port, on
any host, is observed without configuration (see :meth:`EndpointMatcher._match`)."""
_CACHE_LIMIT = 4096
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_HINTS = 20
"""Hosts named by the "looks like an LLM API but is not observed" log line, at most (per tap)."""


class Endpoint(NamedTuple):
    provider: Provider
    provider_name: str
    observed: bool = True
    """False: the path is an LLM API's but no rule covers the host (observed only inside an SDK call)."""


# APIs only one service speaks: what an SDK sends to them (e.g. a Bedrock VPC endpoint) keeps that
# service's name; the wire formats many servers speak take the SDK's.
_SERVICE_APIS = frozenset({_catalog.BEDROCK.module, _catalog.BEDROCK_CONVERSE.module, _catalog.VERTEX_ANTHROPIC.module})


def sdk_endpoint(endpoint: Endpoint, sdk: str) -> Endpoint:
    """The observed endpoint of a request an official SDK's call sent to a host no rule covers: named
    after the SDK (``anthropic``, ``openai``, ``groq`` ...), or after the service whose own API it is."""
    provider = endpoint.provider
    return Endpoint(provider, provider.name if _module(provider) in _SERVICE_APIS else sdk)


def _module(provider: Provider) -> str:
    """The name of the parser module (:attr:`_catalog.Entry.module`) ``provider`` comes from."""
    return type(provider).__module__.rpartition(".")[2]


def normalize_host(host: str) -> str:
    """The host as matching compares it: lower case, no trailing dot or brackets, loopback as ``localhost``."""
    host = host.lower().rstrip(".").strip("[]")
    return "localhost" if host in _LOOPBACK else host


def _by_suffix(path: str) -> Provider | None:
    """The parser of ``path``'s API (imported by the first path of that API: ``_providers/_catalog.py``)."""
    path = path.rstrip("/")
    for entry in _catalog.ENTRIES:
        for suffix in entry.path_suffixes:
            if path.endswith(suffix):
                provider = _catalog.parser(entry)
                if provider.accepts_path(path):
                    return provider
    return None


def known_host_name(host: str) -> str | None:
    name = KNOWN_HOSTS.get(host)
    if name is not None:
        return name
    for pattern, value in KNOWN_HOSTS.items():
        if pattern[0] in ".-" and host.endswith(pattern):
            return value
    for regex, value in CLOUD_HOSTS:
        if regex.fullmatch(host):
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
            self._bases.append((normalize_host(parts.hostname or ""), port, parts.path.rstrip("/"), names.get(url)))
        # longest base path first, so a more specific base URL wins
        self._bases.sort(key=lambda b: len(b[2]), reverse=True)
        self._any = match_any_host
        self._cache: dict[tuple[str, int, str], Endpoint | None] = {}

    def match(self, host: str, port: int, path: str) -> Endpoint | None:
        """The endpoint observed for this request by configuration alone, else ``None``."""
        found = self.lookup(host, port, path)
        return found if found is not None and found.observed else None

    def lookup(self, host: str, port: int, path: str) -> Endpoint | None:
        """Like :meth:`match`, but an LLM API path on a host no rule covers gives an endpoint marked
        not observed (``None`` still means: not an LLM API)."""
        key = (host, port, path)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = self._match(normalize_host(host), port, path)
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
                if known == "azure.ai.openai" and _module(provider) == _catalog.ANTHROPIC.module:
                    known = "anthropic"  # Claude in Azure AI Foundry: the SDK's own name for it
                return Endpoint(provider, known or provider.name)
            return None
        provider = _by_suffix(path)
        if provider is None:
            return None
        if port == OLLAMA_PORT and _module(provider) in _catalog.OLLAMA_MODULES:
            # ollama's native API on its own port (``localhost:11434`` by default, or a GPU box on the
            # network): both together are specific enough to need no configuration, where a path like
            # ``/api/chat`` alone is not (many web apps have one); any other port needs base_urls
            return Endpoint(provider, provider.name)
        return Endpoint(provider, provider.name, observed=False)


class UnobservedHosts:
    """Names, once each, the hosts whose requests look like an LLM API but are not observed, and the
    setting that would observe them; at most :data:`MAX_HINTS` hosts, then one line saying so.

    A host already named costs one set lookup; only a new one takes the lock.
    """

    def __init__(self) -> None:
        self._named: set[tuple[str, int]] = set()
        self._full = False
        self._lock = threading.Lock()

    def note(self, scheme: str, host: str, port: int, path: str, provider: Provider) -> None:
        key = (host, port)
        if key in self._named or self._full:
            return
        with self._lock:
            if key in self._named or self._full:
                return
            if len(self._named) >= MAX_HINTS:
                self._full = True
                logger.warning("more hosts look like LLM APIs but are not observed; the first %d were named", MAX_HINTS)
                return
            self._named.add(key)
        shown = sanitize(host)
        origin = f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{port}"
        suffix = next((s for s in provider.path_suffixes if path.rstrip("/").endswith(s)), "")
        logger.warning(
            "%s looks like an LLM API (a path ending %s) but is not observed: on a host like this one "
            "llmtap observes the official anthropic / openai SDKs' requests (sdk_calls), other clients' only "
            "when you add %r to Settings.base_urls (LLMTAP_BASE_URLS) or set match_any_host=True "
            "(LLMTAP_MATCH_ANY_HOST)",
            origin,
            suffix,
            origin,
        )
