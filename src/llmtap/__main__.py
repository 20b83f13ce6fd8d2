"""``python -m llmtap``: the ``llmtap`` command."""

import sys

from llmtap._cli.main import main

__all__: list[str] = []

sys.exit(main())
