"""What is llmtap's own code: a file under the imported package's directory, whatever the paths around it.

The one answer to "is this llmtap's?" for every test that asks it (reference cycles, memory attribution).
By directory, never by a name pattern: a clone of the repository lands in a folder named ``llmtap`` by
default, and its virtualenv (``<clone>/.venv/lib/python3.X/site-packages/pydantic/...``) matches
``*/llmtap/*`` although none of it is llmtap's.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import llmtap

__all__ = ["PACKAGE", "is_own_file"]

PACKAGE = Path(llmtap.__file__).resolve().parent
"""The directory of the llmtap package this interpreter imported (the source tree for an editable install)."""

_PREFIX = str(PACKAGE) + os.sep


@functools.lru_cache(maxsize=4096)
def is_own_file(filename: str) -> bool:
    """Whether ``filename`` (a code object's ``co_filename``, a traceback's file) lies under :data:`PACKAGE`."""
    if not filename or filename.startswith("<"):  # <string>, <frozen ...>: nobody's file
        return False
    return os.path.realpath(filename).startswith(_PREFIX)
