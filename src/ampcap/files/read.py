"""Reading the files a user names: regular files only, and bounded.

A FIFO given as a manifest or policy would block the command forever, and a
device would never end; a file far larger than any real one of its kind is a
wrong path, not something to hold in memory.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["read_file"]


def read_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of a regular file (one byte more than
    allowed tells the caller it is too large); ``OSError`` otherwise."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    with open(path, "rb") as fh:
        return fh.read(limit + 1)
