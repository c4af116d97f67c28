"""Reading and parsing the files and flags a user hands us.

:func:`read_file` reads only regular files: a FIFO given as a manifest or
policy would block the command forever, and a device would never end.

``json`` and ``tomllib`` recurse once per nesting level, so a file or flag
nested a few thousand levels deep (``[[[[…``) makes them raise
``RecursionError`` rather than their decode error, and every caller that
reports a bad file by catching the decode error would let it through as a
traceback. These wrappers turn it into that decode error.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tomllib
from typing import Any

__all__ = ["read_file", "json_loads", "toml_loads"]


def read_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of a regular file (one byte more than
    allowed tells the caller it is too large); ``OSError`` otherwise."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    with open(path, "rb") as fh:
        return fh.read(limit + 1)

_TOO_DEEP = "nested too deeply"


def json_loads(text: str | bytes) -> Any:
    """``json.loads``; ``json.JSONDecodeError`` for any input it cannot take."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(_TOO_DEEP, "", 0) from None


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; ``tomllib.TOMLDecodeError`` for any input it cannot take."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(_TOO_DEEP) from None
