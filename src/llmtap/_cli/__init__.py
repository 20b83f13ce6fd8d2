"""The ``llmtap`` command: ``run``, ``demo``, ``simulate`` and ``probe``."""

__all__: list[str] = []
