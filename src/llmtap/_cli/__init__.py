"""The ``llmtap`` command: ``run``, ``demo``, ``simulate`` and ``probe``."""
