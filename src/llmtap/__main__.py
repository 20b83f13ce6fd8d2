import sys

from llmtap.cli import main

sys.exit(main())
