"""``ampcap query`` and ``ampcap invoke``: call a daemon from the shell.

Readable output by default, ``--json`` for scripts (one JSON document on
stdout). While a long invoke runs, PROGRESS updates are shown on stderr.
Failures exit 1 and print ``error <code> <NAME>: <message>`` on stderr (with
``--json`` also ``{"error": {...}}`` on stdout), so ``4003`` is as easy to
grep as to parse.

Results and error details are whatever CBOR the peer sent; both outputs show
them through the packet dump's JSON view (:func:`~ampcap.dump.diag.to_json_value`:
byte strings as ``{"$bytes": hex}``, tags as ``{"$tag": n, "value": …}``,
non-text map keys in diagnostic notation, NaN and infinities as strings), so
any reply prints as strict JSON. A peer's text is shown with its control
characters escaped (:mod:`ampcap.display`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..caps.order import ORDERS
from ..display import json_safe, printable
from ..errors import AmpError
from ..decoders import json_loads
from ..peer.config import RELAY_DID
from ..wire.cbor import MAX_BIGNUM_BYTES, UINT64_MAX
from ..files.identity import default_caller_path
from .argtypes import MAX_SECONDS, did, seconds, semver, semver_range
from .calling import SHOWN_TEXT, call_daemon, interruptible, parse_session_id, to_json
from .errors import UsageError
from .tls_options import add_tls_client_arguments
from .tracing import add_trace_option

if TYPE_CHECKING:
    from ..caps.descriptor import Descriptor

__all__ = ["common_parser", "register", "run_query", "run_invoke"]

# caps.registry's DEFAULT_PAGE_LIMIT and MAX_PAGE_LIMIT, for --limit's help;
# written out because importing the registry costs every command ~50 ms
# (tests/cli/test_cli_robustness.py checks that they agree).
DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT = 100, 1000


def common_parser() -> argparse.ArgumentParser:
    """The options of every command that calls a daemon (query, invoke, pay)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("url", metavar="URL", help="the daemon, e.g. amp://127.0.0.1:7700")
    common.add_argument("--identity", type=Path, default=None, metavar="FILE",
                        help=f"identity key file (default {default_caller_path()}, the callers' own, apart "
                             "from the daemon's; the default file is created if missing, a file given here must "
                             "exist)")
    common.add_argument("--peer-did", default=None, metavar="DID", type=did,
                        help="refuse the connection unless the daemon proves this DID")
    common.add_argument("--timeout", type=seconds(unlimited=True), default=None, metavar="S",
                        help="seconds to wait for the answer (default 30 for query; 60 for invoke, "
                             f"which also asks the provider to stop by then; at most {MAX_SECONDS}, or "
                             "'inf': as long as it allows)")
    common.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    add_tls_client_arguments(common)
    common.add_argument("--to", default=None, metavar="DID", type=did,
                        help="URL is a relay (like the public Rust example's): register there and address "
                             "this agent through it")
    common.add_argument("--relay-did", default=RELAY_DID, metavar="DID", type=did,
                        help=f"with --to: the relay's own DID (default {RELAY_DID})")
    common.add_argument("--relay-profile", choices=("auto", "rfc003", "rust-example"), default="auto",
                        help="with --to: 'rfc003' (ampcap relay: HELLO registers, the reply comes back "
                             "through it) or 'rust-example'; 'auto' (default) = rfc003 when --relay-did is "
                             "not the example's")
    common.add_argument("--compat", choices=("rust-example",), default=None,
                        help="talk like the public Rust example (raw framing + its Sig_Input variant)")
    common.add_argument("--trust", type=Path, default=None, metavar="FILE",
                        help="descriptor trust profile (TOML: require_signatures, owners; docs/payments.md): "
                             "refuse descriptors it requires signed that are unsigned or badly signed (3001), "
                             "or whose schemas cannot be had (5002)")
    return common


def trusted(args: argparse.Namespace, remote: Any) -> Any:
    """``remote`` under ``--trust``'s profile (a TrustedCaller), or None without one."""
    if getattr(args, "trust", None) is None:
        return None
    from ..files.trust import load_trust
    from ..net.api.trusted import TrustedCaller
    from .errors import local_file_errors

    with local_file_errors():
        return TrustedCaller(remote, load_trust(args.trust))


def register(subparsers: Any) -> None:
    common = common_parser()

    q = subparsers.add_parser("query", parents=[common],
                              help="CAP_QUERY: list a capability's versions, or every capability ('*')",
                              description="Ask a daemon which versions of a capability it offers (CAP_QUERY). "
                                          "NAME '*' (quote it from the shell) lists every capability the daemon "
                                          "lets you see, paged as usual: an ampcap extension (ampcap.list-all), "
                                          "asked only of a peer that announced it in HELLO. To any other (another "
                                          "implementation, a relayed --to peer, an http:// URL) nothing is sent: "
                                          "error 4002 says the peer does not offer listing, exit status 1; name "
                                          "the capabilities instead.")
    q.add_argument("name", metavar="NAME", help="capability name, alias or legacy type; '*': every capability")
    q.add_argument("--range", default=None, metavar="R", type=semver_range,
                   help="version range, e.g. '>=1.0.0 <2.0.0'")
    q.add_argument("--limit", type=int, default=None, metavar="N",
                   help=f"versions per page (0 or omitted: the daemon's default, {DEFAULT_PAGE_LIMIT} for ampcap; "
                        f"ampcap serves at most {MAX_PAGE_LIMIT} per page, whatever is asked)")
    q.add_argument("--cursor", default=None, help="continue from a previous page's next_cursor")
    q.add_argument("--order", choices=ORDERS, default=None,
                   help="listing order of the versions (the daemon's default: newest-first)")
    q.add_argument("--show-schema", action="store_true",
                   help="also print each version's params and result JSON Schemas, fetched from the daemon "
                        "(an ampcap daemon hands out the schemas its descriptors reference) and checked against "
                        "the descriptor's hash")
    q.set_defaults(func=run_query)

    i = subparsers.add_parser("invoke", parents=[common], help="CAP_INVOKE: run a capability",
                              description="Invoke a capability by id (name:version) or by name with "
                                          "--version or --range (CAP_INVOKE).")
    i.add_argument("target", metavar="ID|NAME",
                   help="org.x.y:1.0.0, a name with --version/--range, or an OSSA/MCP URI alone (ossa:demo/add@1.0 "
                        "asks for its compatible versions, >=1.0.0 <2.0.0)")
    which = i.add_mutually_exclusive_group()
    which.add_argument("--version", default=None, metavar="V", type=semver, help="exact version (SemVer 2.0.0)")
    which.add_argument("--range", default=None, metavar="R", type=semver_range,
                       help="negotiate within this range, e.g. '>=1.0.0 <2.0.0'")
    i.add_argument("--params", default="{}", metavar="JSON", help="params as JSON (default {})")
    i.add_argument("--delegation", type=Path, default=None, metavar="FILE",
                   help="invoke on a delegator's behalf: a credential file from `ampcap deleg grant` whose "
                        "last link delegates to your identity (RFC 005)")
    i.add_argument("--retry", action="store_true",
                   help="resend the same message (same id, RFC 001 §16.3 back-off) after a local timeout or a "
                        "retryable ERROR such as 5004 OVERLOADED; the provider still runs it at most once")
    i.add_argument("--encrypt", action="store_true",
                   help="send the CAP_INVOKE authcrypted (RFC 001 §8.5) to the daemon's X25519 key, derived from "
                        "its did:key; an ampcap daemon encrypts its replies back")
    i.add_argument("--answer", action="append", default=[], metavar="TEXT",
                   help="answer the capability's questions (RFC 006 INPUT_REQUIRED) with TEXT, in order; "
                        "may be repeated. Without it, questions are asked on the terminal, and declined "
                        "(the invoke then fails 4001) when stdin is not one")
    add_trace_option(i, "this invoke (a client span; its context reaches a daemon that traces too)")
    i.add_argument("--session", default=None, metavar="ID",
                   help="run inside the RFC 006 session ID (32 hex digits, from `ampcap session URL open`): "
                        "it is resumed first, and a pinned capability runs its pinned version")
    i.set_defaults(func=run_invoke)

    from .session import register_session

    register_session(subparsers, common)


def run_query(args: argparse.Namespace) -> int:
    if args.limit is not None and not 0 <= args.limit <= UINT64_MAX:
        raise UsageError(f"--limit must be from 0 to {UINT64_MAX}")

    async def call(remote: Any) -> str:
        page = await remote.query(args.name, range=args.range, limit=args.limit, cursor=args.cursor,
                                  order=args.order, timeout=args.timeout or 30.0)
        for notice in page.deprecations.values():  # R23: said in-band by the provider
            print(f"warning: {notice.line()}", file=sys.stderr, flush=True)
        checker = trusted(args, remote)
        verdicts = [(await checker.check(d)).describe() for d in page.capabilities] if checker else None
        schemas = ([await remote.schemas(d, timeout=args.timeout or 30.0) for d in page.capabilities]
                   if args.show_schema else None)
        if args.json:
            listed = [d.to_wire() for d in page.capabilities]
            if schemas is not None:
                for entry, (params, result) in zip(listed, schemas):
                    entry["schemas"] = {"params": params, "result": result}
            for entry, verdict in zip(listed, verdicts or ()):
                entry["descriptor_verdict"] = verdict
            return to_json({"capabilities": listed, "next_cursor": page.next_cursor})
        lines = [_describe(d) for d in page.capabilities]
        if verdicts is not None:
            lines = [f"{line}  [{verdict}]" for line, verdict in zip(lines, verdicts)]
        if schemas is not None:
            lines = [line + "".join(_schema_lines(which, schema) for which, schema in zip(("params", "result"), pair))
                     for line, pair in zip(lines, schemas)]
        if page.next_cursor:
            lines.append(printable(f"(more: --cursor {page.next_cursor})"))
        return "\n".join(lines)

    return call_daemon(args, call)


def _schema_lines(which: str, schema: Any) -> str:
    if schema is None:
        return f"\n  {which} schema: not available (the peer does not hand it out; a --bundle would hold it)"
    text = json_safe(json.dumps(schema, indent=2, ensure_ascii=False)).replace("\n", "\n    ")
    return f"\n  {which} schema:\n    {text}"


def _describe(d: Descriptor) -> str:
    extra = []
    if d.supported_ranges:
        extra.append("supports " + ", ".join(str(r) for r in d.supported_ranges))
    if d.notes:
        extra.append(d.notes)
    return printable(d.id + (f"  ({'; '.join(extra)})" if extra else ""))


# Integers beyond 64 bits travel as CBOR bignums, which the receiving side
# turns back into integers up to 1024 bits (wire.cbor.plain_integers); a
# larger one would arrive as a tagged byte string, not as a number.
MAX_INT_BITS = 8 * MAX_BIGNUM_BYTES
_TOO_BIG = (f"--params has an integer too large to send: integers may have at most {MAX_INT_BITS} bits "
            f"(2**{MAX_INT_BITS} has {len(str(1 << MAX_INT_BITS))} digits)")


def local_params(text: str) -> Any:
    """``--params`` as the value to send; :class:`UsageError` for anything
    that would fail on its way out (nothing was sent, so no AMP code)."""
    from ..wire.cbor import TooDeep, dumps
    from ..wire.envelope import BODY_MAX_DEPTH

    try:
        params = json_loads(text)
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's own limit on parsing huge integers
            raise UsageError(_TOO_BIG) from None
        raise UsageError(f"--params is not valid JSON: {exc}") from None
    if _has_big_integer(params):
        raise UsageError(_TOO_BIG)
    # The params are a value in the CAP_INVOKE body's map: one level below the body.
    depth = BODY_MAX_DEPTH - 1
    try:
        dumps(params, max_depth=depth)
    except TooDeep:
        raise UsageError(f"--params nests deeper than {depth} levels of arrays and objects (the receiver decodes "
                         f"at most {BODY_MAX_DEPTH + 1}, counting the message around them)") from None
    except AmpError as exc:
        if isinstance(exc.__cause__, UnicodeEncodeError):  # JSON's "\ud800" escape: a lone surrogate
            raise UsageError("--params has text that is not valid Unicode (a lone surrogate such as \\ud800); "
                             "CBOR text must be UTF-8") from None
        raise UsageError(f"--params cannot be sent: {exc.message}") from None
    return params


def _has_big_integer(value: Any) -> bool:
    if type(value) is int:
        return value.bit_length() > MAX_INT_BITS
    if type(value) is dict:
        return any(_has_big_integer(v) for v in value.values())
    if type(value) is list:
        return any(_has_big_integer(v) for v in value)
    return False


def run_invoke(args: argparse.Namespace) -> int:
    params = local_params(args.params)
    from ..caps.names import is_full_id

    from ..caps.names import parse_ossa_uri

    full_id = is_full_id(args.target)
    if full_id and (args.version is not None or args.range is not None):
        raise UsageError(f"{args.target!r} is a full id (name:version) already: drop --version/--range, "
                         "or give the bare name with them")
    try:
        # An OSSA/MCP URI alone carries MAJOR.MINOR: the API asks for OSSA's
        # compatible range (same major, minor at least that).
        uri = parse_ossa_uri(args.target)
    except AmpError as exc:
        raise UsageError(exc.message) from None
    session_id = parse_session_id(args.session) if args.session is not None else None
    if args.version is None and args.range is None and not full_id and uri is None and session_id is None:
        raise UsageError(f"{args.target!r} names no version: give a full id (name:version), --version V or "
                         f"--range R (`ampcap query {args.url} {args.target}` lists the versions)")
    if session_id is not None and args.range is not None:
        raise UsageError("--session with --range: inside a session give --version, a full id, or a pinned name")
    if session_id is not None and uri is not None:
        raise UsageError("--session with an OSSA/MCP URI: inside a session give --version, a full id, or a "
                         "pinned name")
    if session_id is not None and args.retry:
        raise UsageError("--retry with --session: a session resends an interrupted invoke by itself")
    if session_id is not None and args.to is not None:
        raise UsageError("--session with --to: sessions through a relay are not supported")
    if session_id is not None and (args.encrypt or args.delegation is not None):
        raise UsageError("--session with --encrypt or --delegation: not supported inside a session (yet)")
    if args.trust is not None and not full_id and args.version is None:
        raise UsageError("--trust checks one exact descriptor: give a full id or --version")
    chain = None
    if args.delegation is not None:
        from ..files.delegation import load_chain
        from .errors import local_file_errors

        with local_file_errors():
            chain = load_chain(args.delegation)

    def show_progress(pct: int | None, text: str | None) -> None:
        print(f"progress {pct if pct is not None else '?'}%" + (f" {printable(text, SHOWN_TEXT)}" if text else ""),
              file=sys.stderr, flush=True)

    on_input = answers(args.answer)

    async def call(remote: Any) -> str:
        return await interruptible(lambda: invoke(remote))  # Ctrl-C cancels the invoke at the provider too

    async def invoke(remote: Any) -> str:
        if session_id is not None:
            from .session import resumed

            async with resumed(remote, session_id) as session:
                name, _, version = args.target.partition(":") if full_id else (args.target, "", args.version)
                result = await session.invoke(name, version=version or None, params=params,
                                              timeout=args.timeout or 60.0, on_progress=show_progress,
                                              on_input=on_input)
        else:
            checker = trusted(args, remote)
            if checker is not None:
                await checker.descriptor_verdict(args.target if full_id else f"{args.target}:{args.version}")
            result = await remote.invoke(args.target, version=args.version, range=args.range, params=params,
                                         timeout=args.timeout or 60.0, on_progress=show_progress, retry=args.retry,
                                         encrypt=args.encrypt, delegation=chain, on_input=on_input)
        return to_json({"result": result}) if args.json else to_json(result, indent=2)

    return call_daemon(args, call)


def answers(given: list[str]) -> Any:
    """The ``on_input`` of ``ampcap invoke``: the ``--answer`` values in
    order; else, on a terminal, ask there; else decline, saying why."""
    queue = list(given)

    async def on_input(prompt: str, options: tuple[str, ...] | None) -> str | None:
        import trio

        shown_options = f" [{' / '.join(printable(o, 80) for o in options)}]" if options else ""
        if queue:
            answer = queue.pop(0)
            print(f"question: {printable(prompt, SHOWN_TEXT)}{shown_options} -> {printable(answer, 80)} (--answer)",
                  file=sys.stderr, flush=True)
            return answer
        if given or not sys.stdin.isatty():
            why = "no --answer left" if given else "stdin is not a terminal"
            print(f"ampcap: the capability asks: {printable(prompt, SHOWN_TEXT)}{shown_options}; {why}, so the "
                  "question is declined (give --answer TEXT)", file=sys.stderr, flush=True)
            return None
        print(f"question: {printable(prompt, SHOWN_TEXT)}{shown_options}", file=sys.stderr, flush=True)
        print("answer> ", end="", file=sys.stderr, flush=True)
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:  # end of input: decline
            return None
        answer = line.rstrip("\n")
        if options and answer.isdigit() and 1 <= int(answer) <= len(options):
            answer = options[int(answer) - 1]  # "2" picks the second option
        return answer

    return on_input
