"""Exporters (sinks): fed finished attempt and call records, knowing nothing of providers."""

from llmtap._exporters._base import Sink

__all__ = ["Sink"]
