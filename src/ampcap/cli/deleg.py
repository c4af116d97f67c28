"""``ampcap deleg grant|revoke|show``: RFC 005 delegation credentials from the shell.

``grant`` signs a credential with the local identity (the delegator) and
writes a credential file (a chain: ``--parent`` extends one the identity
holds); ``revoke`` signs a revocation and records it in the identity's state
directory, which the daemon serving that identity consults (R19, R20);
``show`` explains a chain, link by link, and its verdict for a caller and a
capability, in the RFC 005 §6.1 order. Credential files are described in
``docs/delegation.md``; ``ampcap invoke --delegation FILE`` presents one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from ..display import printable
from ..errors import AmpError
from ..files.identity import default_identity_path
from .argtypes import did, state_dir, whole_number
from .errors import EXIT_FAILURE, EXIT_OK, CommandError, UsageError, local_file_errors

__all__ = ["register", "duration_ms"]

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_MAX_DURATION_MS = 366 * 86_400_000


def duration_ms(text: str) -> int:
    """``90s``, ``30m``, ``1h``, ``7d`` → milliseconds. The unit is required:
    a bare ``1`` once meant one second where people meant an hour or a day."""
    match = re.fullmatch(r"(\d{1,9})([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 30m, 1h, 7d)")
    if not match.group(2):
        raise argparse.ArgumentTypeError(f"{text!r} has no unit: say {match.group(1)}s, {match.group(1)}m, "
                                         f"{match.group(1)}h or {match.group(1)}d")
    value = int(match.group(1)) * _UNITS[match.group(2)]
    if not 0 < value <= _MAX_DURATION_MS:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be more than 0 and at most 366 days")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "deleg", help="RFC 005 delegation: grant, revoke, explain, send and query credentials",
        description="Issue delegation credentials (RFC 005) signed by your identity, revoke them, explain "
                    "a chain and its verdict, deliver them to a daemon and ask a daemon about them. "
                    "Credentials are files; present one with `ampcap invoke --delegation FILE`. Exit status: "
                    "0 done (show: allowed), 1 failure (show: denied; send/query: the AMP error), 2 usage error.")
    sub = p.add_subparsers(dest="deleg_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: _usage(p))
    ident_help = f"identity key file (default {default_identity_path()}; the default file is created if missing)"
    state_help = ("state directory to record it in, as `serve --state-dir` (default: your identity's; "
                  "'none' records nothing)")

    g = sub.add_parser(
        "grant", help="sign a credential delegating capabilities to another DID",
        description="Sign a delegation credential from your identity to --to and write the credential file "
                    "(stdout unless --out). With --parent, extend a chain whose last link delegates to you; "
                    "the result is checked (narrowing, subdelegation, depth) before it is written. At least "
                    "one of --capability, --action, --resource is needed; each may repeat.")
    g.add_argument("--to", required=True, type=did, metavar="DID", help="the delegate")
    g.add_argument("--capability", action="append", default=None, metavar="ID",
                   help="an exact capability name or id (name:version); no wildcards")
    g.add_argument("--action", action="append", default=None, metavar="A", help="an allowed action (e.g. invoke)")
    g.add_argument("--resource", action="append", default=None, metavar="R", help="an allowed resource id")
    g.add_argument("--expires", type=duration_ms, default=duration_ms("1h"), metavar="DURATION",
                   help="validity from now, with its unit (s, m, h, d): 90s, 30m, 1h (default), 7d")
    g.add_argument("--aud", action="append", default=None, type=did, metavar="DID",
                   help="only this verifier may accept it (repeatable)")
    g.add_argument("--allow-subdelegation", action="store_true", help="let the delegate delegate further")
    g.add_argument("--max-depth", type=whole_number("--max-depth", 1, 64, "further links allowed"), default=None, metavar="N",
                   help="at most N further links after this one")
    g.add_argument("--parent", type=Path, default=None, metavar="FILE",
                   help="the chain you hold (its last link delegates to you); the new link extends it")
    g.add_argument("--id", default=None, metavar="ID", help="the delegation_id (default: a random one)")
    g.add_argument("--identity", type=Path, default=None, metavar="FILE", help=ident_help)
    g.add_argument("--out", "-o", type=Path, default=None, metavar="FILE", help="write here instead of stdout")
    g.add_argument("--force", action="store_true", help="overwrite an existing --out file (as `keygen --force`)")
    g.add_argument("--state-dir", type=state_dir, default=argparse.SUPPRESS, metavar="DIR|none", help=state_help)
    g.set_defaults(func=run_grant)

    r = sub.add_parser(
        "revoke", help="sign a revocation for a credential you issued",
        description="Sign a revocation of delegation ID (issued by your identity) and record it in your state "
                    "directory: a daemon serving your identity with that directory denies the credential "
                    "from then on (3004), and answers DELEG_QUERY with status 'revoked'. --out also writes "
                    "the signed revocation, to hand to other verifiers.")
    r.add_argument("delegation_id", metavar="ID", help="the delegation_id to revoke")
    r.add_argument("--reason", default=None, help="a short reason, kept in the signed revocation")
    r.add_argument("--identity", type=Path, default=None, metavar="FILE", help=ident_help)
    r.add_argument("--out", "-o", type=Path, default=None, metavar="FILE", help="also write the revocation file")
    r.add_argument("--force", action="store_true", help="overwrite an existing --out file (as `keygen --force`)")
    r.add_argument("--state-dir", type=state_dir, default=argparse.SUPPRESS, metavar="DIR|none", help=state_help)
    r.set_defaults(func=run_revoke)

    s = sub.add_parser(
        "show", help="explain a credential file and its verdict",
        description="Print each link of a chain (delegator, delegate, scope, validity) and the verdict of the "
                    "RFC 005 §6.1 checks for --caller (default: the last delegate) and --capability (without "
                    "it the scope check is left out). Exit 0 when allowed, 1 when denied.")
    s.add_argument("file", type=Path, metavar="FILE", help="a credential file (from `ampcap deleg grant`)")
    s.add_argument("--caller", type=did, default=None, metavar="DID", help="who presents it")
    s.add_argument("--capability", default=None, metavar="ID", help="the capability name or id asked for")
    s.add_argument("--action", default="invoke", metavar="A", help="the action asked for (default invoke)")
    s.add_argument("--resource", default=None, metavar="R", help="the resource asked for")
    s.add_argument("--verifier", type=did, default=None, metavar="DID", help="the verifier's DID, for aud")
    s.add_argument("--keyring", type=Path, default=None, metavar="FILE", help="keyring for non-did:key signers")
    s.add_argument("--now", type=int, default=None, metavar="MS", help="evaluate at this Unix time in ms")
    s.add_argument("--state-dir", type=state_dir, default=None, metavar="DIR",
                   help="also consult the revocations recorded in this state directory")
    s.add_argument("--json", action="store_true", help="the explanation as one JSON document")
    s.set_defaults(func=run_show)

    from ..peer.config import RELAY_DID
    from .argtypes import seconds
    from .tls_options import add_tls_client_arguments

    def client_options(c: argparse.ArgumentParser) -> None:
        c.add_argument("url", metavar="URL", help="the daemon, e.g. amp://127.0.0.1:7700")
        c.add_argument("--identity", type=Path, default=None, metavar="FILE", help=ident_help)
        c.add_argument("--peer-did", default=None, metavar="DID", type=did, help="the daemon's DID, checked")
        c.add_argument("--timeout", type=seconds(), default=None, metavar="S", help="seconds to wait (default 10)")
        c.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
        add_tls_client_arguments(c)
        c.set_defaults(compat=None, to=None, relay_did=RELAY_DID)

    q = sub.add_parser(
        "query", help="ask a daemon about a delegation (DELEG_QUERY)",
        description="Send DELEG_QUERY to a daemon (a verifier or revocation publisher) and print its status for "
                    "the delegation: active, revoked, expired or unknown, with its freshness (updated_at, "
                    "max_age_s). Without --delegator, an id two issuers use is refused 4001.")
    client_options(q)
    q.add_argument("delegation_id", metavar="ID", help="the delegation_id")
    q.add_argument("--delegator", type=did, default=None, metavar="DID", help="the issuer (recommended)")
    q.set_defaults(func=run_query)

    snd = sub.add_parser(
        "send", help="deliver a credential or revocation file to a daemon (DELEG_GRANT / DELEG_REVOKE)",
        description="Send the last credential of a credential file as DELEG_GRANT, or a revocation file (from "
                    "`deleg revoke --out`) as DELEG_REVOKE, to the daemon at URL, which verifies and keeps it.")
    client_options(snd)
    snd.add_argument("file", type=Path, metavar="FILE", help="a credential or revocation file")
    snd.set_defaults(func=run_send)


def _usage(parser: argparse.ArgumentParser) -> int:
    raise UsageError("choose a subcommand: grant, revoke, show, send or query (ampcap deleg --help)")


def _now() -> int:
    return time.time_ns() // 1_000_000


def _identity(path: Path | None) -> Any:
    from .serve import load_or_create_identity

    return load_or_create_identity(path)


def _delegation_store(state_dir: Path | None, identity_did: str, explicit: bool) -> Any:
    from ..store import StateStore, default_state_dir
    from ..store.delegation import DelegationStore

    directory = state_dir if explicit else default_state_dir(identity_did)
    if directory is None:
        return None
    with local_file_errors():
        return DelegationStore(StateStore.open(directory))


def _check_out(out: Path | None, force: bool) -> None:
    """Refuse an --out that cannot be written, or that exists without
    --force (as ``keygen`` does), before anything is signed or recorded."""
    if out is None:
        return
    from ..files.write import output_path_problem

    if (problem := output_path_problem(str(out))) is not None:
        raise CommandError(f"{out}: {problem}")
    if not force and (out.exists() or out.is_symlink()):
        raise CommandError(f"{out} already exists; pass --force to replace it")


def _write(document: dict[str, Any], out: Path | None, force: bool = False) -> None:
    text = json.dumps(document, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    from ..files.write import write_whole

    try:
        write_whole(out, text.encode(), replace=force)
    except FileExistsError:  # made since _check_out looked
        raise CommandError(f"{out} already exists; pass --force to replace it") from None
    except OSError as exc:
        raise CommandError(f"{out}: cannot write: {exc.strerror or exc}") from None


def run_grant(args: argparse.Namespace) -> int:
    from ..deleg.chain import ChainVerifier, VerifierConfig
    from ..deleg.credential import issue
    from ..deleg.document import chain_document
    from ..deleg.revocation import MemoryRevocations, RevocationChecker
    from ..wire.identity import DidKeyResolver
    from ..wire.registry import MessageType

    if not (args.capability or args.action or args.resource):
        raise UsageError("give at least one of --capability, --action, --resource (RFC 005 §4.2)")
    explicit_state = hasattr(args, "state_dir")
    _check_out(args.out, args.force)
    parent: list[Any] = []
    if args.parent is not None:
        from ..files.delegation import load_chain

        with local_file_errors():
            parent = load_chain(args.parent)
    identity = _identity(args.identity)
    if parent and parent[-1].delegate != identity.did:
        raise CommandError(f"{args.parent}: its last link delegates to {printable(parent[-1].delegate)}, "
                           f"not to this identity ({identity.did})")
    now = _now()
    delegation_id = args.id or f"delegation:{os.urandom(8).hex()}"
    try:
        cred = issue(identity, delegation_id=delegation_id, delegate=args.to, issued_at=now,
                     expires_at=now + args.expires, capabilities=args.capability, actions=args.action,
                     resources=args.resource, allow_subdelegation=args.allow_subdelegation,
                     max_chain_depth=args.max_depth, aud=args.aud)
    except AmpError as err:
        raise UsageError(f"cannot issue this credential: {err.message}") from None
    chain = [*parent, cred]
    verifier = ChainVerifier(DidKeyResolver(), RevocationChecker(store=MemoryRevocations()),
                             VerifierConfig(verifier_did=args.aud[0] if args.aud else None,
                                            max_chain_depth=max(3, len(chain))))
    decision = verifier.evaluate(typ=int(MessageType.CAP_INVOKE), evidence={"chain": [c.envelope() for c in chain]},
                                 caller=args.to, target=None, now_ms=now)
    if decision.error is not None and not (decision.error.code == 3004 and "audience" in decision.error.message):
        raise CommandError(f"the chain would not be accepted: {decision.error}")
    store = _delegation_store(getattr(args, "state_dir", None), identity.did, explicit_state)
    if store is not None:
        with local_file_errors():
            store.record_credential(cred, now)
    _write(chain_document(chain), args.out, args.force)
    print(f"ampcap: granted {delegation_id} to {args.to} until "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(cred.expires_at / 1000))}"
          + (f" (written to {args.out})" if args.out else ""), file=sys.stderr)
    return EXIT_OK


def run_revoke(args: argparse.Namespace) -> int:
    from ..deleg.credential import revoke
    from ..deleg.document import revocation_document

    explicit_state = hasattr(args, "state_dir")
    _check_out(args.out, args.force)
    identity = _identity(args.identity)
    if not args.delegation_id or len(args.delegation_id) > 512:
        raise UsageError("ID must be a delegation_id of 1 to 512 characters")
    rev = revoke(identity, delegation_id=args.delegation_id, revoked_at=_now(), reason=args.reason)
    store = _delegation_store(getattr(args, "state_dir", None), identity.did, explicit_state)
    if store is None and args.out is None:
        raise UsageError("with --state-dir none, give --out FILE: the revocation must go somewhere")
    if store is not None:
        with local_file_errors():
            store.record_revocation(rev, _now())
    if args.out is not None:
        _write(revocation_document(rev), args.out, args.force)
    where = [str(store.store.path or "memory")] if store is not None else []
    where += [str(args.out)] if args.out is not None else []
    print(f"ampcap: revoked {printable(args.delegation_id)} (recorded in {', '.join(where)})", file=sys.stderr)
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    from ..deleg.explain import explain_chain
    from ..files.delegation import load_chain

    with local_file_errors():
        chain = load_chain(args.file)
    resolver: Any = None
    if args.keyring is not None:
        from .serve import _resolver

        resolver = _resolver(args.keyring)
    store = None
    if args.state_dir is not None:
        from ..store import StateStore
        from ..store.delegation import DelegationStore

        with local_file_errors():
            store = DelegationStore(StateStore.open(args.state_dir))
    report = explain_chain(chain, caller=args.caller, capability=args.capability, action=args.action,
                           resource=args.resource, verifier_did=args.verifier, now_ms=args.now or _now(),
                           resolver=resolver, revocations=store)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for line in report["lines"]:
            print(printable(line))
    return EXIT_OK if report["verdict"]["decision"] == "allow" else EXIT_FAILURE


def run_query(args: argparse.Namespace) -> int:
    from .calling import call_daemon, to_json

    async def call(remote: Any) -> str:
        status = await remote.deleg_query(args.delegation_id, delegator=args.delegator,
                                          timeout=args.timeout or 10.0)
        doc = status.to_wire()
        if args.json:
            return to_json(doc)
        extra = "".join(f" {k}={doc[k]}" for k in ("expires_at", "revoked_at", "updated_at", "max_age_s") if k in doc)
        return printable(f"{doc['status']} {doc['delegation_id']} by {doc['delegator']}{extra}")

    return call_daemon(args, call)


def run_send(args: argparse.Namespace) -> int:
    from ..decoders import json_loads
    from ..deleg.document import REVOCATION_KIND, chain_from_document, revocation_from_document
    from ..files.read import read_file
    from .calling import call_daemon, to_json

    try:
        raw = read_file(args.file, 1 << 20)
        data = json_loads(raw)
    except (OSError, ValueError) as exc:
        raise CommandError(f"{args.file}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    with local_file_errors():
        if isinstance(data, dict) and data.get("kind") == REVOCATION_KIND:
            item: Any = revocation_from_document(data, str(args.file))
            what = "revocation"
        else:
            item = chain_from_document(data, str(args.file))[-1]
            what = "credential"

    async def call(remote: Any) -> str:
        if what == "revocation":
            await remote.deleg_revoke(item, timeout=args.timeout or 10.0)
        else:
            await remote.deleg_grant(item, timeout=args.timeout or 10.0)
        done = {"sent": what, "delegation_id": item.delegation_id, "delegator": item.delegator}
        return to_json(done) if args.json else printable(f"{what} {item.delegation_id} accepted")

    return call_daemon(args, call)
