"""``ampcap interop``: run the interop vectors against another implementation.

    ampcap interop amp://host:port [--compat rust-example] [--capability ID]
                   [--params JSON] [--report FILE] [--json] [--timeout S]
    ampcap interop --self
    ampcap interop --relay amp://relay:7002 [--relay-did DID] [--relay-forward URL]

Prints a pass/fail/skip table (or, with ``--json``, the report itself),
writes ``interop-report.json`` (valid against the suite schema) and exits
1 when any vector failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..display import json_safe, printable
from ..files.write import output_path_problem
from ..errors import AmpError
from ..decoders import json_loads
from ..net.transport.url import AmpUrl, UrlError, parse_url
from ..peer.config import RELAY_HELLO_VERSION
from ..wire.frames import Framing
from ..wire.signing import Profile
from .argtypes import MAX_SECONDS, did, seconds
from .errors import EXIT_FAILURE, EXIT_OK, CommandError, UsageError, local_file_errors
from .tls_options import add_tls_client_arguments, tls_advice, tls_client_context

# The harness (trio, probes, vectors) loads when `interop` runs, not for
# every `ampcap` command that builds the parser.
if TYPE_CHECKING:
    from ..interop.probe import ProbeSettings
    from ..interop.runner import RunResult
    from ..interop.vectors import Subject

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "interop", help="run the AMP interop vectors against a peer (amp(s)://, http(s)://, ws(s)://), --self or a --relay",
        description="Drive RFC 001/002/004 scenario vectors against a target (RFC 003 ones against --relay, the "
                    "RFC 001 byte vectors with --self) and write interop-report.json, in which every required "
                    "vector of the suite appears.")
    p.add_argument("target", nargs="?", help="amp://host:port or amps://host:port")
    p.add_argument("--relay", metavar="URL", default=None,
                   help="also drive the RFC 003 relay vectors (003:A.1, A.5, A.15...) against this relay; "
                        "alone (no TARGET), test only the relay")
    p.add_argument("--relay-did", metavar="DID", type=did, default=None,
                   help="the relay's own DID, named in relay_path by 003:A.5 (default: learned from its ERROR "
                        "in 003:A.1)")
    p.add_argument("--relay-framing", choices=("raw", "rfc002"), default="raw",
                   help="how the relay frames: raw 4-byte lengths like the public Rust example's relay and "
                        "tools/stand_in_relay.py (default), or RFC 002")
    p.add_argument("--relay-identity", metavar="FILE", type=Path, default=None,
                   help="the identity the harness hands messages off as, an upstream relay (003:A.5/A.6): a relay "
                        "answers its federation endpoints only for trusted peers, so list this key's DID as a "
                        "trusted peer in the relay's routes file (default: a fresh identity)")
    p.add_argument("--relay-forward", metavar="URL", default=None,
                   help="http(s) URL of the relay's POST /amp/v1/relay/forward endpoint (RFC 002 §6.5) for "
                        "003:A.5/A.6 (default: http on the relay's own host and port)")
    p.add_argument("--self", dest="self_test", action="store_true",
                   help="start an in-process ampcap daemon with the demo capabilities and RFC 007 payments "
                        "(serve --demo --payments) and test it")
    p.add_argument("--compat", choices=["rust-example"],
                   help="talk like the public Rust example: raw 4-byte framing and its Sig_Input variant")
    p.add_argument("--capability", metavar="ID",
                   help="capability name or name:version the RFC 004 vectors use "
                        "(default: the demo echo capability of `ampcap serve --demo`)")
    p.add_argument("--params", metavar="JSON", help="valid params for --capability")
    p.add_argument("--invalid-params", metavar="JSON",
                   help="params missing a required field, for vector 004:A.6 (default {})")
    p.add_argument("--alias", metavar="TYPE", help="a legacy type alias of --capability (vector 004:A.7)")
    p.add_argument("--target-did", metavar="DID", type=did,
                   help="the target's DID (needed with --compat, where no HELLO tells it)")
    p.add_argument("--vector", action="append", metavar="ID",
                   help="run only this vector, e.g. 004:A.5 (repeatable)")
    p.add_argument("--report", metavar="FILE", default="interop-report.json",
                   help="where to write the report (default ./interop-report.json; '-' for none)")
    p.add_argument("--json", action="store_true", help="print the report JSON instead of the table")
    p.add_argument("--timeout", type=seconds(unlimited=True), default=5.0, metavar="S",
                   help=f"seconds to wait for the connection and for each reply (default 5; at most {MAX_SECONDS}, "
                        "or 'inf' for no limit)")
    add_tls_client_arguments(p, "the target")
    p.set_defaults(func=run)


def _check_report_path(text: str) -> None:
    problem = output_path_problem(text)
    if problem is not None:
        raise CommandError(f"--report {text}: {problem} (or '-' for no report)")


def _json_arg(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return json_loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc.msg} at column {exc.colno}") from None


def subject_from_args(args: argparse.Namespace) -> Subject:
    from ..caps.names import is_capability_name
    from ..caps.semver import Version
    from ..interop.vectors import DEMO_SUBJECT, Subject, demo_subject

    params = _json_arg(args.params, "--params")
    invalid = _json_arg(args.invalid_params, "--invalid-params")
    if args.capability is None or args.capability.partition(":")[0] == DEMO_SUBJECT:
        subject = demo_subject()
        if args.capability is not None and ":" in args.capability:
            subject.pinned_version = args.capability.partition(":")[2]
    else:
        name, _, version = args.capability.partition(":")
        if not is_capability_name(name):
            raise UsageError(f"--capability {args.capability!r}: expected a reverse-domain name or name:version "
                             "(e.g. org.example.tool:1.0.0)")
        if version:
            try:
                Version.parse(version)
            except AmpError as exc:
                raise UsageError(f"--capability {args.capability!r}: {exc.message}") from None
        subject = Subject(name=name, pinned_version=version or None, invalid_params={})
    if params is not None:
        subject.params = params
    if invalid is not None:
        subject.invalid_params = invalid
    if args.alias is not None:
        subject.alias = args.alias
    return subject


def settings_from_args(args: argparse.Namespace, url: AmpUrl | None) -> ProbeSettings:
    from ..interop.probe import ProbeSettings

    ssl_context = tls_client_context(args, [url] if url is not None else [])
    if args.compat == "rust-example":
        return ProbeSettings(framing=Framing.RAW, profile=Profile.RUST_EXAMPLE, hello_versions=(RELAY_HELLO_VERSION,),
                             timeout_s=args.timeout, ssl_context=ssl_context)
    if url is not None and url.binding == "ws":  # one WebSocket message per AMP message, HELLO first
        return ProbeSettings(framing=Framing.RAW, binding="ws", timeout_s=args.timeout, ssl_context=ssl_context)
    if url is not None and url.binding == "http":
        return ProbeSettings(binding="http", timeout_s=args.timeout, ssl_context=ssl_context)
    return ProbeSettings(timeout_s=args.timeout, ssl_context=ssl_context)


async def _run_self(settings: ProbeSettings, subject: Subject, only: list[str] | None,
                    relay: AmpUrl | None, relay_options: dict[str, Any]) -> RunResult:
    import trio

    from ..interop.runner import run_vectors
    from ..interop.selftarget import QuietSelfTarget, serve_self

    # Without -v the target's own warnings stay out of the report's way.
    quiet = QuietSelfTarget()
    root = logging.getLogger()
    handlers = list(root.handlers) if root.level >= logging.WARNING else []
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_self)
            if relay is None:
                # The relay vectors too: ampcap's own relay, trusting the
                # harness as an upstream relay for the federation ones.
                import os

                from ..interop.selftarget import serve_self_relay
                from ..wire.identity import Identity

                upstream = Identity.generate(os.urandom)
                relay, relay_http, relay_did = await nursery.start(serve_self_relay, upstream.did)
                relay_options = {"relay_did": relay_did, "relay_framing": "rfc002",
                                 "relay_forward": str(relay_http), "relay_upstream": upstream}
            try:
                return await run_vectors(url, settings, subject, only=only, self_test=True, relay=relay,
                                         **relay_options)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def _first_amp_error(group: BaseExceptionGroup) -> AmpError | None:
    for exc in group.exceptions:
        if isinstance(exc, AmpError):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (inner := _first_amp_error(exc)) is not None:
            return inner
    return None


def run(args: argparse.Namespace) -> int:
    import trio

    from ..interop.report import build_report, render_table, write_report
    from ..interop.runner import run_vectors
    from ..interop.suite import known_ids

    # A UsageError here is reported by cli.main: one line, exit status 2.
    known = known_ids()
    for vector in args.vector or ():
        if vector not in known:
            raise UsageError(f"--vector {vector!r} is not a vector; choose from {', '.join(known)}")
    if args.self_test and args.target:
        raise UsageError("give exactly one of TARGET or --self")
    if not (args.self_test or args.target or args.relay):
        raise UsageError("give a TARGET, --self, or --relay URL")
    if args.self_test and args.compat:
        raise UsageError("--self tests ampcap in its default profile; --compat needs a TARGET")
    if args.self_test and args.target_did:
        raise UsageError("--target-did names a TARGET's DID; --self tests an ampcap whose DID it knows")
    if args.compat and args.target and not args.target_did:
        raise UsageError("--compat rust-example needs --target-did: without HELLO nothing names the peer")
    if args.report != "-":
        _check_report_path(args.report)  # now, not after every vector has run
    try:
        url = parse_url(args.target) if args.target else None
        relay = parse_url(args.relay) if args.relay else None
    except UrlError as exc:
        raise UsageError(str(exc)) from None
    if args.compat and url is not None and url.binding != "amps":
        raise UsageError("--compat rust-example speaks raw TCP framing: give an amp:// or amps:// URL")
    settings = settings_from_args(args, url or relay)
    relay_options: dict[str, Any] = {"relay_did": args.relay_did, "relay_framing": args.relay_framing,
                                     "relay_forward": args.relay_forward}
    if args.relay_identity is not None:
        from ..files.identity import load_identity

        with local_file_errors():
            relay_options["relay_upstream"] = load_identity(args.relay_identity)
    if relay is None and (args.relay_did or args.relay_forward or args.relay_identity):
        raise UsageError("--relay-did and --relay-forward describe the relay of --relay URL; give --relay")
    if args.relay_forward is not None:
        from urllib.parse import urlsplit

        parts = urlsplit(args.relay_forward)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--relay-forward {args.relay_forward!r}: expected http://HOST:PORT[/PATH] or https://…")
    subject = subject_from_args(args)
    try:
        if args.self_test:
            result = trio.run(_run_self, settings, subject, args.vector, relay, relay_options)
        else:
            result = trio.run(lambda: run_vectors(url, settings, subject, target_did=args.target_did,
                                                  only=args.vector, relay=relay, **relay_options))
    except BaseExceptionGroup as group:  # trio nurseries wrap errors; report the AMP one plainly
        amp = _first_amp_error(group)
        if amp is None:
            raise
        raise amp from None
    note = f"framing {settings.framing.value}, Sig_Input profile {settings.profile.value}, " \
           f"capability {subject.name}"
    if relay is not None:
        note += f", relay {relay}"
    # --self: the implementation under test is this ampcap, whatever its HELLO says.
    report = build_report(result, settings_note=note,
                          implementation={"id": "ampcap", "version": __version__} if args.self_test else None)
    # The results are printed first: a report that cannot be written (a full
    # disk, a FIFO nobody reads) must not take the whole run with it.
    if args.json:
        print(json_safe(json.dumps(report, indent=2, ensure_ascii=False)), flush=True)
    elif result.unreachable is None:
        print(render_table(result), flush=True)
    if args.report != "-":
        try:
            write_report(report, args.report)
        except OSError as exc:
            raise CommandError(f"cannot write the report to {args.report}: {exc.strerror or exc}") from None
        if not args.json and result.unreachable is None:
            print(f"report written to {args.report}")
    if result.unreachable is not None and not args.json:
        # One line, not a table of the same reason: every vector failed unrun.
        written = f" (report, every vector failed: {args.report})" if args.report != "-" else ""
        reason = tls_advice(result.unreachable.message, given_ca=args.ca_file is not None)
        raise AmpError(result.unreachable.code, f"{printable(reason)}; no vector ran{written}")
    return EXIT_FAILURE if result.failures else EXIT_OK
