"""Provider wire formats. Each provider is one module exporting a :class:`Provider` instance, imported with the
first request of its API; what routing and the label bounds need of it before that is in ``_catalog.py``.

A provider class is named for its wire format (``OpenAIChat``); the simulator serves that format as
``OpenAIChatApi`` and ``_drive`` drives its SDK as ``OpenAIChatSdk``, so each name says its layer."""

from llmtap._providers._base import Facts, Provider, RequestInfo

__all__ = ["Facts", "Provider", "RequestInfo"]
