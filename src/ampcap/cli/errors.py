"""The command line's own failures, apart from AMP outcomes.

An AMP error (a peer's answer, or bytes that break the protocol) prints with
its code and name. The two failures here carry no code, because none applies:
``1001 INVALID_MESSAGE`` on "--timeout must be positive" would blame a
message that was never sent.

- :class:`UsageError`: what was typed is wrong (a flag's value, flags that
  go together). Exit status 2, as for argparse's own complaints.
- :class:`CommandError`: the command line is fine but the command cannot do
  what it asks for a local reason (the key file already exists, an input
  file holds no hex). Exit status 1.

``ampcap.cli.main`` prints either as one line, ``ampcap COMMAND: message``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import AmpError

__all__ = ["UsageError", "CommandError", "local_file_errors", "local_file_error", "EXIT_OK", "EXIT_FAILURE",
           "EXIT_USAGE", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


class UsageError(ValueError):
    """The command line itself is wrong (exit 2)."""


class CommandError(Exception):
    """The command cannot do what was asked, for a local reason (exit 1).
    ``lines``, when given, are printed one per line instead (every problem
    of a file, say)."""

    def __init__(self, message: str, *, lines: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.lines = lines


@contextmanager
def local_file_errors() -> Iterator[None]:
    """Around loading our own files (identity, keyring, policy, manifest).

    Their loaders are library code and report faults as :class:`AmpError`,
    as everything in ampcap does; but a broken key file on this machine is
    not AMP traffic, so the command line prints the message (which names the
    file) as a :class:`CommandError`, without "4001 BAD_REQUEST" in front.
    """
    try:
        yield
    except AmpError as exc:
        raise local_file_error(exc) from None


def local_file_error(exc: AmpError) -> CommandError:
    """``exc``, from loading one of our own files, as the command line
    reports it (see :func:`local_file_errors`). A policy or manifest lists
    every problem in ``details``: all of them are printed, one per line, so
    one run shows everything to fix."""
    every = exc.details if isinstance(exc.details, list) and all(type(d) is str for d in exc.details) else []
    return CommandError(exc.message, lines=tuple(every) if len(every) > 1 else ())
