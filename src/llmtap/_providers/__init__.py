"""Provider wire formats. Each provider is one module exporting a :class:`Provider` instance."""

from llmtap._providers._base import Facts, Provider, RequestInfo

__all__ = ["Facts", "Provider", "RequestInfo"]
