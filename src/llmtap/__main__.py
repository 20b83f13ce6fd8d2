import sys

from llmtap._cli import main

sys.exit(main())
