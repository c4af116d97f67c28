"""The ``ampcap`` command: one argparse parser, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (a callable taking the parsed namespace and returning the
exit code). Errors a user can cause are reported as one line on stderr with a
non-zero exit status, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

from .. import __version__
from ..display import printable
from ..errors import AmpError
from . import startup
from .errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CommandError, UsageError

# Commands that still do their job with stdout closed: a daemon started by a
# supervisor that closed it (its URL line then goes nowhere).
_WITHOUT_OUTPUT = frozenset({"serve", "relay"})

# Subcommand modules, in the order ``ampcap --help`` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "serve",    # ampcap serve
    "relay",    # ampcap relay
    "client",   # ampcap query, ampcap invoke
    "caps",     # ampcap caps validate/list/show
    "dump",     # ampcap dump
    "interop",  # ampcap interop
    "deleg",    # ampcap deleg grant/revoke/show
    "pay",      # ampcap pay quote/authorize/capture/cancel/refund/status/buy
    "mcp",      # ampcap mcp
    "keys",     # ampcap keygen, ampcap id
    "status",   # ampcap status
)


# The commands each module registers: a command line naming one builds (and
# imports) only that module's parser (tests/cli/test_startup_imports.py
# checks this table against the full parser).
COMMAND_MODULES: dict[str, str] = {
    "serve": "serve", "relay": "relay", "query": "client", "invoke": "client", "session": "client", "caps": "caps", "dump": "dump",
    "interop": "interop", "deleg": "deleg", "mcp": "mcp", "keygen": "keys", "id": "keys", "pay": "pay",
    "status": "status",
}


def _command_module(argv: Sequence[str]) -> str | None:
    """The module of the command ``argv`` names, when nothing before it can
    change the parse (only -v flags); None: build every parser."""
    for arg in argv:
        if arg == "--verbose" or (len(arg) > 1 and arg.startswith("-") and set(arg[1:]) == {"v"}):
            continue
        return COMMAND_MODULES.get(arg)
    return None


class OneLineParser(argparse.ArgumentParser):
    """argparse with a mistake reported as one line (the README's promise):
    the error and where the usage is, not argparse's usage block, which
    for invoke or deleg grant is eight lines above the one that matters.
    Subcommand parsers are this class too (add_subparsers takes the
    parent's class)."""

    def error(self, message: str) -> NoReturn:
        _report(f"{self.prog}: error: {message} (see {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``ampcap`` parser: every subcommand's, or, given the command line
    about to be parsed, only the one it names (a one-shot call does not pay
    for building, or importing, the others)."""
    parser = OneLineParser(
        prog="ampcap",
        description="Capability messaging for AMP: a peer daemon, a packet dump and an interop harness.",
    )
    parser.add_argument("--version", action="version", version=f"ampcap {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = _command_module(argv) if argv is not None else None
    for name in (only,) if only is not None else SUBCOMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    return parser


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)parser ``args`` went through (``caps list``'s, say)."""
    while True:
        subparsers = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        chosen = getattr(args, subparsers[0].dest, None) if subparsers else None
        if not isinstance(chosen, str) or chosen not in subparsers[0].choices:
            return parser
        parser = subparsers[0].choices[chosen]


class OneLineFormatter(logging.Formatter):
    """One event, one line: a peer's text in a message (a GOAWAY reason, an
    error message) cannot add lines or terminal escapes to the log. A
    traceback, added after the message at DEBUG, keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


def _report(line: str) -> None:
    """Print one error line on stderr, whatever bytes the paths in it hold.

    A non-UTF-8 file name arrives as surrogate escapes; a strict stderr
    (pipes, captured output) cannot encode those, so they become backslash
    escapes instead of a UnicodeEncodeError traceback.
    """
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    line = printable(line)  # the message may quote a peer
    print(line.encode(encoding, "backslashreplace").decode(encoding, "replace"), file=sys.stderr)


def _stdout_reader_gone() -> bool:
    """Is stdout a pipe whose reading end has closed? (A broken pipe can
    also come from a socket, which is an error worth reporting.)"""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no real stdout (captured, closed)
        return False


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit
    does not fail on the closed pipe a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _reportable(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a command's trio nurseries let out, as main reports it: Ctrl-C
    or a lone error of a kind reported in one line comes out as itself;
    anything else stays the group (a bug: traceback).

    Ctrl-C wins over whatever else the group holds: trio raises it in
    whichever task runs when the signal lands (the reader, inside a progress
    callback), and the errors beside it (the call failing because that
    reader's connection closed) are its consequences, not news."""
    leaves = list(_leaves(group))
    interrupted = [leaf for leaf in leaves if isinstance(leaf, KeyboardInterrupt)]
    if interrupted:
        return interrupted[0]
    if len(leaves) == 1 and isinstance(leaves[0], (UsageError, CommandError, AmpError, OSError)):
        return leaves[0]
    return group


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _prepare_streams() -> None:
    """Streams as main needs them, whatever the shell gave.

    A closed stderr (``2>&-``) would make ``print(file=sys.stderr)`` write
    to stdout, into output a script parses: messages then go nowhere. And
    output quotes file names and peers' text: what the encoding cannot take
    (a non-UTF-8 file name's surrogate escapes) comes out as backslash
    escapes instead of a UnicodeEncodeError.
    """
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change its error handler
                pass


def main(argv: Sequence[str] | None = None) -> int:
    _prepare_streams()
    # The console script (cli.entry) holds serve's stop signals before it even
    # imports this module; run any other way (python -m ampcap.cli.main, a
    # test), hold them here, before the parser imports every subcommand, and
    # put them back afterwards.
    held = startup.hold_for(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while still parsing or importing, before a command runs
        return EXIT_INTERRUPTED
    finally:
        if held:
            startup.release()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given (serve --workers hands it on)
    if extra:
        # argparse leaves arguments no subcommand took to the top parser,
        # which would print the top-level usage; the subcommand's says more.
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    configure_logging(args.verbose)
    if sys.stdout is None and args.command not in _WITHOUT_OUTPUT:
        # Started with stdout closed (`>&-`): the command's output would be
        # lost, after the work (an invoke) was done. Say so and do nothing.
        _report(f"ampcap {args.command}: standard output is closed; there is nowhere to write the output")
        return EXIT_FAILURE
    try:
        try:
            return int(args.func(args) or 0)
        except BaseExceptionGroup as group:
            raise _reportable(group) from None
    except UsageError as exc:
        _report(f"ampcap {args.command}: {exc}")
        return EXIT_USAGE
    except CommandError as exc:
        for line in exc.lines or (str(exc),):
            _report(f"ampcap {args.command}: {line}")
        return EXIT_FAILURE
    except AmpError as exc:
        _report(f"ampcap {args.command}: error {exc}")
        return EXIT_FAILURE
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():
            _report(f"ampcap {args.command}: {exc.strerror or exc}")
            return EXIT_FAILURE
        # `ampcap … | head`: the reader has all it wanted; nobody is left to tell.
        _detach_stdout()
        return EXIT_OK
    except OSError as exc:
        # Files that do not exist, ports in use, refused connections…
        _report(f"ampcap {args.command}: {exc.strerror or exc}"
                + (f": {exc.filename}" if getattr(exc, "filename", None) else ""))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
