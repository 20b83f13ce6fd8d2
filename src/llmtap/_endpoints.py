"""Which requests are LLM API traffic, and which provider parser reads them. Decided per
(host, port, path) once and cached; non-LLM traffic costs one dict lookup."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from llmtap.providers import anthropic
from llmtap.providers._base import Provider

__all__ = ["Endpoint", "EndpointMatcher"]

# API path suffix -> provider parser
_PATHS: dict[str, Provider] = {
    "/v1/messages": anthropic.PROVIDER,
}
_KNOWN_HOSTS: dict[str, str] = {
    "api.anthropic.com": "anthropic",
}
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Endpoint:
    provider: Provider
    provider_name: str


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
        self._any = match_any_host
        self._cache: dict[tuple[str, int, str], Endpoint | None] = {}

    def match(self, host: str, port: int, path: str) -> Endpoint | None:
        key = (host, port, path)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = self._match(host, port, path)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = found
        return found

    def _match(self, host: str, port: int, path: str) -> Endpoint | None:
        host = host.lower()
        for base_host, base_port, base_path, name in self._bases:
            if host == base_host and port == base_port and path.startswith(base_path):
                endpoint = self._by_path(path[len(base_path) :] or "/", name)
                if endpoint is None and not base_path.endswith("/v1"):
                    continue
                if endpoint is None:
                    endpoint = self._by_path("/v1" + path[len(base_path) :], name)
                if endpoint is not None:
                    return endpoint
        if host in _KNOWN_HOSTS or self._any:
            return self._by_path(path, None)
        return None

    @staticmethod
    def _by_path(path: str, name: str | None) -> Endpoint | None:
        provider = _PATHS.get(path.rstrip("/"))
        if provider is None:
            return None
        return Endpoint(provider, name or provider.name)
