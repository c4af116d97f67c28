"""Writing the files a user names: whole or not at all, and into FIFOs and
devices without hanging.

:func:`write_whole` is for files we own (a key file, a report): the data go
to a temporary file of our own beside the target, are synced, and only then
take the target's place, so a full disk or a crash never leaves an empty or
half-written file, and a file being replaced survives a write that fails.

:func:`open_for_writing` is for targets that may not be files at all
(``/dev/null``, ``/dev/stdout``, a FIFO): renaming a file over one would
replace the device or pipe itself, and opening a FIFO nobody reads would
block for ever; it fails at once (ENXIO) instead.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_whole", "open_for_writing", "output_path_problem"]


def write_whole(target: Path, data: bytes, *, mode: int | None = None, replace: bool = True) -> None:
    """Put ``data`` at ``target`` whole, or leave ``target`` as it was.

    ``mode`` is the new file's exact mode (default: 0666 less the umask, as
    a plain open gives). ``replace=False`` never overwrites: ``FileExistsError``
    when ``target`` exists by the time the data are in place.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")  # never shared
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # exactly, whatever the umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if the target appeared meanwhile
    finally:
        tmp.unlink(missing_ok=True)  # gone already after os.replace


def open_for_writing(path: Path, flags: int = 0, mode: int = 0o666) -> int:
    """A blocking file descriptor open for writing on ``path`` (``flags``
    added, e.g. ``O_CREAT | O_TRUNC``); ``OSError`` with ENXIO at once for a
    FIFO that nobody reads."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | flags, mode)
    os.set_blocking(fd, True)
    return fd


def output_path_problem(text: str) -> str | None:
    """Why ``text`` cannot name a file to write, or None. Commands check it
    before the work whose output it is, so a mistyped path costs nothing."""
    path = Path(text)
    if not text or text.endswith(os.sep) or path.name in ("", ".", ".."):
        return "names a directory; give a file name"
    if path.is_dir():
        return "is a directory; give a file name"
    if not path.parent.is_dir():
        return f"no directory {str(path.parent)!r} to write it in"
    return None
