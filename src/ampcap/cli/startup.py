"""Stop signals that reach ``ampcap serve`` before it can drain.

``serve`` promises that SIGTERM, Ctrl-C (SIGINT) and SIGHUP drain it and
exit 0. Its own handling (trio's signal receiver, in
:func:`ampcap.cli.serve.serve_until_signal`) starts only once the daemon is
built and the event loop runs, a few tenths of a second after the process
starts; before that Python's defaults would end it with 143, 130 (and a
KeyboardInterrupt traceback) or 129. So as soon as the command line says
``serve`` (:func:`hold_for`, before the rest of the command line is even
imported), these signals are only noted here; serve asks :func:`noted` before
it builds the daemon, before the event loop and once trio's receiver is in
place, and stops there with status 0: nothing was served, nothing to drain.

Only the interpreter's own start-up and ``import ampcap`` come before this
module can run; a signal in those first milliseconds still meets Python's
defaults.

This module imports nothing but the standard library's ``signal``: it runs
before everything else.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["STOP_SIGNALS", "command_of", "hold_for", "hold", "release", "noted"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_HELD_BY = "serve"  # the one command that drains on these signals
_noted: list[int] = []
_previous: dict[int, Any] | None = None


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand word of an ``ampcap`` command line, found without
    building the parser: the first argument that is not an option (the
    top-level options take no value)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def hold_for(argv: Sequence[str]) -> bool:
    """:func:`hold` when ``argv`` runs ``serve``; True when this call held them."""
    return command_of(argv) == _HELD_BY and hold()


def hold() -> bool:
    """Note SIGTERM/SIGINT/SIGHUP instead of dying of them. True when this
    call installed the handlers (False: held already, or not the main thread,
    where Python cannot set them)."""
    global _previous
    if _previous is not None or threading.current_thread() is not threading.main_thread():
        return False
    _previous = {signum: signal.signal(signum, _note) for signum in STOP_SIGNALS}
    return True


def release() -> None:
    """Put back the handlers :func:`hold` replaced, and forget what was noted
    (for a process that goes on: the tests, which run ``main`` in-process)."""
    global _previous
    if _previous is None:
        return
    for signum, handler in _previous.items():
        signal.signal(signum, handler)
    _previous = None
    _noted.clear()


def noted() -> str | None:
    """The name of the first stop signal noted so far (``SIGTERM``), or None."""
    return signal.Signals(_noted[0]).name if _noted else None


def _note(signum: int, frame: Any) -> None:
    _noted.append(signum)
