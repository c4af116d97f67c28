"""``ampcap dump``: decode AMP traffic from a file, stdin, a pcap or a live tap.

Exit status: 0 when the input was read (findings are output, not failures,
and input cut short is a finding; ``--strict`` makes any finding exit 1), 1
for unreadable files, bad input encodings or a capture file that cannot be
written, 2 for usage errors (options that contradict each other included:
the tap reads no INPUT). ``--help`` says the same.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import io
import os
import signal
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from ..files.write import open_for_writing, output_path_problem
from ..wire.frames import DEFAULT_MAX_SIZE, Framing
from .errors import CommandError, UsageError, local_file_errors

if TYPE_CHECKING:
    from ..dump.records import Record
    from ..dump.session import DumpSession
    from ..dump.streams import StreamEvent

__all__ = ["register", "run"]

_PCAP_MAGICS = (b"\xa1\xb2\xc3\xd4", b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x4d\x3c\xb2\xa1",
                b"\x0a\x0d\x0d\x0a")
_CHUNK = 1 << 16


# Upper bounds for numeric options, so nonsense is a usage error (exit 2)
# instead of an overflow deep inside the decoder: a frame length field is
# 32 bits, and time checks use signed 64-bit Unix milliseconds.
_MAX_SIZE_CAP = (1 << 32) - 1
_MAX_NOW_MS = (1 << 63) - 1


def _bounded_int(low: int, high: int | None) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


_EPILOG = """\
Input: INPUT, or stdin when INPUT is left out or is '-'. Raw frames and
pcap/pcapng captures are told apart by their first bytes; hex text needs --hex.
Live tap: --listen and --upstream instead of INPUT. It prints one line
'tapping HOST:PORT -> HOST:PORT' on stderr once it listens (with the port it
got, for :0), forwards every byte unchanged and dumps a copy until Ctrl-C or
SIGTERM (then the summary, exit 0).

Input that ends early (a frame, a capture record or header cut short) shows
everything before the cut and one finding saying where it was cut.

Exit status: 0 when the input was read, findings included (they are output,
not failures); 1 with --strict when anything was reported, when the input
cannot be read (a missing file, no capture, bad hex, a port in use, a
--write-pcap file that cannot be written), or when not one frame could be
decoded from it: then one line on stderr says what the input looks like
(hex text, another framing, text, compressed data, not AMP at all) and
which option reads it; 2 for a usage error (options that do not go
together, a value out of range). At a terminal, a bare `ampcap dump` says
on stderr that it reads stdin."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "dump", help="decode AMP frames from a file, stdin, a pcap/pcapng capture or a live tap",
        description="Print every frame: type, envelope, body, signature/expiry/CDDL verdicts, findings\n"
                    "with their AMP codes, and request/reply correlation.",
        usage="%(prog)s [OPTIONS] [INPUT | -] [--hex] [--port N]\n"
              "       %(prog)s [OPTIONS] --listen HOST:PORT --upstream HOST:PORT [--write-pcap FILE]",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", default=None, metavar="INPUT",
                   help="file to read (raw bytes, hex with --hex, or pcap/pcapng); left out or '-': "
                        "read stdin. Not with --listen")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p.add_argument("--framing", choices=("rfc002", "raw", "none"),
                   help="rfc002 (default), raw (bare length, Rust example) or none (one bare message)")
    p.add_argument("--hex", action="store_true", help="INPUT is hex text (whitespace ignored); not with --listen")
    p.add_argument("--keyring", metavar="FILE", help="keyring JSON/TOML (public keys; secrets decrypt)")
    p.add_argument("--now", type=_bounded_int(0, _MAX_NOW_MS), metavar="MS",
                   help="evaluate time checks at this Unix time in ms (default: packet time for "
                        "captures, the current clock otherwise)")
    p.add_argument("--compat", choices=("rust-example",),
                   help="interop profile (R15): raw framing + the Rust example's Sig_Input")
    p.add_argument("--strict", action="store_true", help="exit 1 when any finding is reported")
    p.add_argument("--max-size", type=_bounded_int(1, _MAX_SIZE_CAP), default=DEFAULT_MAX_SIZE, metavar="BYTES",
                   help=f"largest payload accepted (default {DEFAULT_MAX_SIZE})")
    p.add_argument("--port", type=_bounded_int(1, 65535),
                   help="pcap/pcapng INPUT: only TCP connections with this port (1-65535)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="live tap: accept clients here (port 0: any free port, printed on stderr)")
    p.add_argument("--upstream", metavar="HOST:PORT", help="live tap: forward to this server")
    p.add_argument("--write-pcap", default=None, metavar="FILE",
                   help="live tap: also record the forwarded traffic to this pcap file")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text output (auto: when stdout is a terminal)")
    p.add_argument("--type", dest="type_filter", metavar="NAME|CODE",
                   help="only this message/frame type: a name (CAP_INVOKE, HANDSHAKE) or a type code "
                        "(0x22; a CBOR unsigned integer, at most 64 bits)")
    p.add_argument("--did", metavar="DID", help="only messages from or to this DID")
    p.add_argument("--capability", metavar="NAME", help="only CAP_* messages about this capability")
    p.add_argument("--summary", action=argparse.BooleanOptionalAction, default=None,
                   help="print a summary at the end (default: on in text mode)")
    p.add_argument("--by-session", action="store_true",
                   help="print the messages grouped by RFC 006 session (control messages, messages with a "
                        "body.session context, and their replies), each session in order of first appearance, "
                        "the rest last; every message names its session either way. Not with --listen")
    p.add_argument("--bytes", type=_bounded_int(0, None), default=24, metavar="N", dest="max_bytes",
                   help="shorten byte strings longer than N in text mode (0 = never)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: BinaryIO | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    if out is None:  # started with stdout closed (`>&-`)
        raise CommandError("stdout is closed; there is nowhere to write the dump")
    if stdin is None:
        if sys.stdin is None:
            # Started with stdin closed (`ampcap dump <&-`): there is no
            # stream to read, only a message to give.
            if args.input in (None, "-") and not args.listen:
                print("ampcap dump: stdin is closed; give an INPUT file", file=sys.stderr)
                return 1
            stdin = io.BytesIO()
        else:
            stdin = sys.stdin.buffer
            if args.input in (None, "-") and not args.listen and sys.stdin.isatty():
                # Otherwise a bare `ampcap dump` just sits there, waiting.
                print("ampcap dump: reading AMP frames from stdin (raw bytes; --hex for hex text); end with "
                      "Ctrl-D, or give an INPUT file (see --help)", file=sys.stderr)
    try:
        return _run(args, stdin, out)
    except UsageError as exc:
        print(f"ampcap dump: {exc}", file=sys.stderr)
        return 2


def _framing(args: argparse.Namespace) -> Framing | None:
    name = args.framing or ("raw" if args.compat == "rust-example" else "rfc002")
    return None if name == "none" else Framing(name)


def _now_function(args: argparse.Namespace) -> Any:
    if args.now is not None:
        return args.now
    wall = int(time.time() * 1000)  # read once: the dump's notion of "now"
    # A capture is judged at its own time: each record at its packet time.
    return lambda rec: int(rec.at * 1000) if rec.at is not None else wall


def _run(args: argparse.Namespace, stdin: BinaryIO, out: TextIO) -> int:
    # Imported here, not at module level, so `ampcap --help` stays fast.
    from ..dump.records import Inspector, load_schemas
    from ..dump.render import Style, dumps_json, render_text
    from ..dump.session import DumpSession, RecordFilter
    from ..wire.cbor import DecodeLimits
    from ..files.keyring import load_keyring
    from ..wire.keyring import default_resolver
    from ..wire.signing import Profile

    _check_usage(args)
    with local_file_errors():
        keyring = load_keyring(args.keyring) if args.keyring else None
    profile = Profile.RUST_EXAMPLE if args.compat == "rust-example" else Profile.RFC
    framing = _framing(args)
    limits = DecodeLimits(max_bytes=max(args.max_size, 1 << 20))
    inspector = Inspector(default_resolver(keyring), decrypt_with=keyring.x25519_secrets() if keyring else (),
                          profile=profile, schemas=load_schemas(), limits=limits, now_ms=_now_function(args))
    session = DumpSession(inspector, RecordFilter(args.type_filter, args.did, args.capability))
    color = args.color == "always" or (args.color == "auto" and out.isatty())
    style = Style(color=color and not args.json)
    show_summary = args.summary if args.summary is not None else not args.json

    def emit(rec: Record) -> None:
        if args.json:
            out.write(dumps_json(rec) + "\n")
        else:
            out.write(render_text(rec, style, max_bytes=args.max_bytes) + "\n")
        out.flush()

    seen = _Seen()
    if args.listen:
        _run_tap(args, framing, session, emit)
    elif args.by_session:
        shown: list[Record] = []
        session.run_all(_file_events(args, stdin, framing, seen), shown.append)
        groups: dict[str | None, list[Record]] = {}
        for rec in shown:
            groups.setdefault(rec.session, []).append(rec)
        for sid, records in sorted(groups.items(), key=lambda item: item[0] is None):  # stable: first seen first
            if not args.json:
                out.write(style.bold(f"== session {sid} ({len(records)} messages) ==" if sid is not None
                                     else f"== no session ({len(records)} frames) ==") + "\n")
            for rec in records:
                emit(rec)
    else:
        events = _file_events(args, stdin, framing, seen)
        session.run_all(events, emit)
    if show_summary:
        out.write(session.summary.render(style) + "\n")
    if session.records and not session.framed and not args.listen and not seen.capture:
        # Not one frame: the finding above describes one bogus "frame header"
        # (a capture's own findings, a cut or a gap, are not about its kind);
        # what the input is and which option reads it says more.
        out.flush()
        print(f"ampcap dump: {_shown(args.input)}: not one AMP frame could be decoded: "
              f"{seen.diagnosis(args, framing)}", file=sys.stderr)
        return 1
    return 1 if args.strict and session.any_findings else 0


class _Seen:
    """What reading INPUT met: its first bytes, and whether it is a capture."""

    def __init__(self) -> None:
        self.head = b""
        self.capture = False

    def keep(self, chunk: bytes) -> None:
        from ..dump.sniff import SNIFF_BYTES

        if len(self.head) < SNIFF_BYTES:
            self.head += chunk[:SNIFF_BYTES - len(self.head)]

    def diagnosis(self, args: argparse.Namespace, framing: Framing | None) -> str:
        from ..dump.sniff import describe_undecodable

        return describe_undecodable(self.head, framing=framing, hex_given=args.hex)


def _check_usage(args: argparse.Namespace) -> None:
    """Refuse option values and combinations that could only be ignored."""
    from ..dump.session import MAX_TYPE_CODE, known_type_filter

    if args.type_filter is not None and not known_type_filter(args.type_filter):
        raise UsageError(f"--type {args.type_filter!r} is no message or frame type: give a name (CAP_INVOKE, "
                         f"HANDSHAKE) or a type code from 0 to {MAX_TYPE_CODE:#x} (0x22)")
    if args.did is not None and not args.did.startswith("did:"):
        raise UsageError(f"--did {args.did!r} is not a DID (did:key:…, did:web:…)")
    if (args.listen is None) != (args.upstream is None):
        raise UsageError("--listen and --upstream go together")
    if args.write_pcap is not None and args.listen is None:
        raise UsageError("--write-pcap records a live tap: use it with --listen and --upstream")
    if args.listen is not None:
        # The tap reads the network: what only applies to reading INPUT
        # would be silently ignored.
        if args.input is not None:
            raise UsageError(f"INPUT ({args.input!r}) and --listen exclude each other: the tap reads what "
                             "passes between client and server, not a file; drop one of them")
        for flag, given in (("--hex", args.hex), ("--port", args.port is not None), ("--by-session", args.by_session)):
            if given:
                raise UsageError(f"{flag} and --listen exclude each other: {flag} applies to reading INPUT, "
                                 "the tap decodes the binary traffic it forwards")
    if args.max_size < 1:
        raise UsageError("--max-size must be positive")


# ------------------------------------------------------------------ inputs


def _open_input(path: str | None, stdin: BinaryIO) -> BinaryIO:
    if path is None or path == "-":
        return stdin
    return open(path, "rb")  # OSError → one line from cli.main


def _file_events(args: argparse.Namespace, stdin: BinaryIO, framing: Framing | None,
                 seen: _Seen) -> Iterator[StreamEvent]:
    from ..dump.streams import FramedStream, PrefixedReader, Where, read_fully

    source = _open_input(args.input, stdin)
    fp: Any = source
    try:
        if args.hex:
            fp = _HexReader(fp)
        head = fp.read(4) if fp.seekable() else read_fully(fp, 4)
        if fp.seekable():
            fp.seek(0)
        else:
            fp = PrefixedReader(head, fp)
        if not head:
            return  # empty (at a terminal, Ctrl-D: reading on would wait for a second one)
        if head in _PCAP_MAGICS:
            from ..dump.pcap import read_capture  # dpkt only when a capture is read

            seen.capture = True
            yield from read_capture(fp, framing=framing, max_size=args.max_size, port=args.port)
            return
        if args.port is not None:
            raise UsageError(f"--port selects TCP connections in a pcap/pcapng capture, and {_shown(args.input)} "
                             "is not one: drop --port")
        stream = FramedStream(Where(), framing, args.max_size)
        for chunk in iter(functools.partial(fp.read, _CHUNK), b""):
            seen.keep(chunk)
            yield from stream.feed(chunk, None)
            if stream.dead:
                # A broken frame leaves nothing decodable after it: reading on
                # would only wait for the end of an input that may have none
                # (`ampcap dump /dev/zero`, a stuck pipe).
                return
        yield from stream.close(None)
    finally:
        if source is not stdin:
            source.close()


def _shown(path: str | None) -> str:
    return "stdin" if path is None or path == "-" else repr(path)


class _HexReader(io.RawIOBase):
    """Decodes hex text (whitespace ignored) chunk by chunk.

    Streaming keeps memory proportional to a chunk, not to the input: a
    50 MB hex file must not be held as text, joined text and bytes at once.
    """

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self._carry = ""     # an odd trailing hex digit waiting for its pair
        self._buffer = b""   # decoded bytes not yet handed out
        self._offset = 0     # characters consumed, for error messages
        self._eof = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        if self._eof:
            return False
        raw = self._source.read(_CHUNK)
        if not raw:
            self._eof = True
            if self._carry:
                raise CommandError("--hex input is not hex text: odd number of hex digits")
            return False
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise CommandError(f"--hex input is not hex text: non-ASCII byte near offset {self._offset}") from None
        digits = self._carry + "".join(text.split())
        keep = len(digits) - len(digits) % 2
        try:
            self._buffer += bytes.fromhex(digits[:keep])
        except ValueError:
            raise CommandError(f"--hex input is not hex text near offset {self._offset}") from None
        self._carry = digits[keep:]
        self._offset += len(raw)
        return True

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            while self._fill():
                pass
            data, self._buffer = self._buffer, b""
            return data
        while len(self._buffer) < n and self._fill():
            pass
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data


def _run_tap(args: argparse.Namespace, framing: Framing | None, session: DumpSession, emit: Any) -> list[Record]:
    import trio

    from ..net.features.tap import run_tap
    from ..net.transport.url import format_hostport, parse_hostport

    try:
        listen, upstream = parse_hostport(args.listen), parse_hostport(args.upstream)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if upstream[1] == 0:
        raise UsageError(f"--upstream {args.upstream}: port 0 names no server; give the port the server "
                         "listens on (0 is for --listen: any free port)")

    def on_event(event: StreamEvent) -> None:
        rec = session.record(event)
        if session.shown(rec):
            emit(rec)

    recorder = None
    if args.write_pcap is not None:
        problem = output_path_problem(args.write_pcap)
        if problem is not None:
            raise CommandError(f"--write-pcap {args.write_pcap}: {problem}")
        recorder = _PcapOnceListening(Path(args.write_pcap))

    async def serve_until_signal() -> None:
        # SIGINT/SIGTERM end the tap cleanly (summary printed, exit 0) instead
        # of a KeyboardInterrupt surfacing from inside the nursery.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(functools.partial(run_tap, listen, upstream, framing=framing,
                                                             max_size=args.max_size, on_event=on_event,
                                                             clock=time.time, recorder=recorder))
                if recorder is not None:
                    recorder.start()  # listening: now the file may be replaced
                # The one line that says where clients go (the port it got,
                # for :0). On stderr: stdout is the dump, JSON lines with --json.
                print(f"tapping {format_hostport(listen[0], port)} -> {format_hostport(*upstream)}", file=sys.stderr,
                      flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(serve_until_signal)
    except BaseExceptionGroup as group:
        # Surface a port in use / bad address as the plain OSError the CLI
        # reports in one line, not as a nested exception group.
        leaf = _first_leaf(group)
        raise leaf from None
    finally:
        if recorder is not None:
            recorder.finish()
    return session.finish()


class _PcapOnceListening:
    """``--write-pcap``: the file is created (or emptied) only once the tap
    listens, so a tap that cannot start (its port in use) leaves an existing
    capture as it was."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fp: BinaryIO | None = None
        self._writer: Any = None
        self._failed = False

    def start(self) -> Any:
        if self._writer is None:
            from ..dump.pcapwrite import PcapWriter

            try:  # a FIFO nobody reads would otherwise stop the whole tap here
                fd = open_for_writing(self._path, os.O_CREAT | os.O_TRUNC)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    raise CommandError(f"--write-pcap {self._path}: a FIFO with no reader") from None
                raise
            self._fp = os.fdopen(fd, "wb")
            with self._writing():
                self._writer = PcapWriter(self._fp)
                self._fp.flush()  # the file header: a full disk shows now, not at the first client
        return self._writer

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write that fails ends the tap with the file's name in the
        message (an OSError from a write has none: 'No space left on
        device', but where?)."""
        try:
            yield
        except OSError as exc:
            self._failed = True
            raise CommandError(f"--write-pcap {self._path}: cannot write it: {exc.strerror or exc}") from None

    def open(self, conn: int, client: str, server: str, ts: float) -> None:
        writer = self.start()
        with self._writing():
            writer.open(conn, client, server, ts)

    def data(self, conn: int, direction: str, payload: bytes, ts: float) -> None:
        writer = self.start()
        with self._writing():
            writer.data(conn, direction, payload, ts)

    def close(self, conn: int, direction: str, ts: float) -> None:
        writer = self.start()
        with self._writing():
            writer.close(conn, direction, ts)

    def finish(self) -> None:
        if self._fp is None:
            return
        if self._failed:  # already reported; what is left in the buffer cannot be written either
            with contextlib.suppress(OSError):
                self._fp.close()
            return
        with self._writing():
            self._fp.close()


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
