"""``ampcap serve``: run a capability daemon.

On start it prints exactly one stdout line, ``<amp url> <did:key>``, and
flushes it *before* accepting connections, so scripts can read the URL
(``--listen :0`` picks a free port; the line shows the real one). SIGTERM,
Ctrl-C or SIGHUP drains: GOAWAY to every peer, running invokes get up to
``--drain-timeout`` seconds, whatever still runs gets its one terminal
CAP_RESULT, and the exit status is 0. A second signal ends the drain at once
(the invokes still running get 5002 now); a signal during start-up (a slow
``--connect`` dial, or before the daemon is even built: see
:mod:`ampcap.cli.startup`) stops it too, with 0.
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AmpError, Unreachable
from ..net.transport.url import AmpUrl, parse_hostport
from ..peer.config import RELAY_DID, ConnectionConfig, rust_example_config
from ..wire.frames import Framing
from ..files.identity import default_identity_path, load_or_create
from ..wire.identity import ChainResolver, DidKeyResolver, Identity, KeyResolver
from ..wire.registry import ErrorCode
from . import startup
from .argtypes import MAX_SECONDS, did, seconds, state_dir, whole_number
from .errors import CommandError, UsageError, local_file_errors
from .tls_options import add_tls_client_arguments, tls_advice, tls_client_context
from .tracing import add_trace_option

if TYPE_CHECKING:
    import ssl

    from ..caps.manifest import Manifest

__all__ = ["register", "run_serve", "load_or_create_identity", "parse_listen", "DEFAULT_LISTEN"]

log = logging.getLogger("ampcap.serve")

DEFAULT_LISTEN = "127.0.0.1:7700"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run a capability daemon (prints its amp:// URL and did:key on one line)",
        description=("Serve capabilities over AMP. Prints one line '<amp-url> <did:key>' on stdout "
                     "before accepting; SIGTERM, Ctrl-C or SIGHUP drains and exits 0 (a second one "
                     "ends the drain at once)."),
    )
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to listen on (default {DEFAULT_LISTEN}; ':0' = 127.0.0.1, any free port)")
    p.add_argument("--identity", type=Path, default=None, metavar="FILE",
                   help=f"identity key file (default {default_identity_path()}; the default file is created "
                        "if missing, a file given here must exist)")
    p.add_argument("--manifest", type=Path, action="append", default=[], metavar="FILE",
                   help="capability manifest (TOML); may be repeated")
    p.add_argument("--demo", action="store_true", help="serve the built-in demo capabilities")
    p.add_argument("--payments", action="store_true",
                   help="serve RFC 007 payments: the capability org.agentries.payment.workflow:1.0.0 (its "
                        "descriptor signed by this daemon's identity), settled on a local ledger in the state "
                        "store; with --demo also the paid capability org.ampcap.demo.paid_echo (5.00 USD a "
                        "call) and a demo balance for every new payer (docs/payments.md)")
    p.add_argument("--mcp", action="append", default=[], metavar="NAME=COMMAND",
                   help="offer every tool of an MCP server as a capability mcp.NAME.TOOL, without a manifest "
                        "(COMMAND runs it over stdio, split like a shell line; or NAME=http(s)://URL); "
                        "may be repeated; needs pip install 'ampcap[mcp]' (docs/bindings.md)")
    from .import_mcp import add_selection_arguments

    add_selection_arguments(p, "mcp-")
    p.add_argument("--policy", type=Path, default=None, metavar="FILE", help="access policy file (TOML)")
    p.add_argument("--keyring", type=Path, default=None, metavar="FILE",
                   help="keyring (JSON/TOML) resolving non-did:key senders")
    p.add_argument("--max-chain-depth", type=whole_number("--max-chain-depth", 3, 64), default=3, metavar="N",
                   help="longest RFC 005 delegation chain accepted, in links (default 3, the least RFC 005 "
                        "allows; at most 64)")
    p.add_argument("--revocation-publisher", default=None, metavar="URL",
                   help="ask this daemon (DELEG_QUERY) whether the delegations presented here are revoked; a "
                        "status it has not confirmed recently is refused 5002, retryable (RFC 005 strict mode)")
    p.add_argument("--revocation-publisher-did", default=None, metavar="DID", type=did,
                   help="the publisher's DID, checked when connecting (default: whoever answers at the URL)")
    p.add_argument("--state-dir", type=_state_dir_arg, default=None, metavar="DIR|none",
                   help="where the daemon keeps its durable state (R19; one SQLite file, state.sqlite3): the "
                        "invoke journal (a retry after a restart gets the same reply, an invoke a restart "
                        "interrupted gets 5002), sessions, credentials and revocations; default "
                        "$XDG_STATE_HOME/ampcap/<DID fingerprint>/; 'none' keeps everything in memory")
    p.add_argument("--state-url", default=None, metavar="postgresql://...",
                   help="keep the durable state in PostgreSQL instead (psycopg 3: pip install 'ampcap[postgres]'): "
                        "the store that several workers and machines of one identity share (docs/scaling.md); "
                        "not with --state-dir")
    p.add_argument("--framing", choices=("rfc002", "raw"), default=None,
                   help="stream framing (default rfc002; raw = bare 4-byte length, R3)")
    p.add_argument("--compat", choices=("rust-example",), default=None,
                   help="talk to the public Rust example (raw framing + its Sig_Input variant; "
                        "not with --framing rfc002)")
    p.add_argument("--ack", action="store_true",
                   help="acknowledge every CAP_INVOKE on receipt with an ACK (RFC 001 §16.1), before validating it")
    p.add_argument("--connect", action="append", default=[], metavar="URL",
                   help="also dial this peer and keep the connection open (dialled again, with backoff, "
                        "when lost); either side may then invoke the other over it; may be repeated")
    p.add_argument("--relay", action="append", default=[], metavar="URL",
                   help="also register at this relay (one like the public Rust example's: raw framing, "
                        "forwards by 'to') and serve invokes arriving through it (registered again, with "
                        "backoff, when the link is lost); may be repeated")
    p.add_argument("--relay-did", default=RELAY_DID, metavar="DID", type=did,
                   help=f"the relay's own DID, to which the registration frame is addressed (default {RELAY_DID})")
    p.add_argument("--relay-profile", choices=("auto", "rfc003", "rust-example"), default="auto",
                   help="what the --relay speaks: 'rfc003' (ampcap relay: HELLO registers, messages are "
                        "acknowledged once the journal holds them), 'rust-example'; 'auto' (default) = rfc003 "
                        "when --relay-did names another DID than the example's")
    p.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="also serve the RFC 002 HTTP and WebSocket bindings here (POST/GET /amp/v1/messages, "
                        "/amp/v1/ws; https:// and wss:// with --tls-cert), into the same daemon; prints a "
                        "second line '<http-url> <did:key>'")
    p.add_argument("--tls-cert", type=Path, default=None, metavar="FILE", help="serve amps:// with this certificate")
    p.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="private key for --tls-cert")
    add_tls_client_arguments(p, "the peers and relays it dials")
    p.add_argument("--drain-timeout", type=seconds(), default=10.0, metavar="S",
                   help="on SIGTERM, how many seconds running invokes may take to finish (default 10, "
                        f"at most {MAX_SECONDS}; a second signal cuts it short)")
    p.add_argument("--max-in-flight", type=int, default=1024, metavar="N",
                   help="running invokes for the whole daemon (default 1024; beyond: 5004)")
    p.add_argument("--max-in-flight-per-connection", type=int, default=64, metavar="N",
                   help="running invokes per connection (default 64; beyond: 5004)")
    p.add_argument("--max-connections", type=int, default=10_000, metavar="N",
                   help="open connections (default 10000)")
    p.add_argument("--invoke-cache", type=int, default=100_000, metavar="N",
                   help="finished invokes kept in memory for retries (default 100000); with a state store, "
                        "a retry memory forgot is answered from the store")
    p.add_argument("--durability", choices=("process", "power"), default="process",
                   help="what a committed write survives: 'process' (default) a crash of the daemon, "
                        "'power' also a power loss or kernel crash (each commit waits for fsync)")
    p.add_argument("--metrics", default=None, metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (invokes by capability and "
                        "outcome, latency, in flight, connections, store commits, claim conflicts; with "
                        "--workers, summed over the workers); `ampcap status http://HOST:PORT` prints them")
    add_trace_option(p, "every invoke served (and every invoke a served capability makes)")
    p.add_argument("--workers", type=whole_number("--workers", 1, 256), default=1, metavar="N",
                   help="run N processes of this daemon on the same listening sockets and state store (they "
                        "claim each invoke in the store, so a retry reaching any of them is answered once; "
                        "docs/scaling.md); default 1")
    p.set_defaults(func=run_serve)


def parse_listen(text: str) -> tuple[str, int]:
    """``--listen``'s value as (host, port); UsageError when it is none."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise UsageError(f"--listen: {exc}") from None


def load_or_create_identity(path: Path | None, *, caller: bool = False) -> Identity:
    """Load ``path`` (or the default identity file; the caller's default with
    ``caller``); create the default one if missing, and say so on stderr."""
    with local_file_errors():
        identity, created = load_or_create(path, os.urandom, caller=caller)
    if created is not None:
        print(f"ampcap: created identity {identity.did} in {created}", file=sys.stderr)
    return identity


_SPARE_DESCRIPTORS = 64  # stdio, listeners, logs, the pipes of running command bindings


def fit_to_descriptors(max_connections: int) -> int:
    """Every connection holds a file descriptor. Raise the soft limit to the
    hard one, as daemons do; if it still cannot hold ``max_connections``
    (and some to spare), serve fewer, so that clients past the limit get
    5004 OVERLOADED instead of the listener failing to accept (EMFILE,
    logged every 100 ms while it lasts)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or max_connections + _SPARE_DESCRIPTORS <= soft:
        return max_connections
    fitted = max(1, soft - _SPARE_DESCRIPTORS)
    log.warning(
        "--max-connections %d does not fit the limit of %d open files (ulimit -n): serving at most %d",
        max_connections, soft, fitted)
    return fitted


def _state_dir_arg(text: str) -> Path | str:
    # "none" kept as text: build_daemon tells it from "not given" (None).
    value = state_dir(text)
    return "none" if value is None else value


def _resolver(keyring: Path | None) -> tuple[KeyResolver, list[bytes]]:
    """The key resolver, and the keyring's X25519 secrets: authcrypt to us
    may use one of them (an earlier key of ours, RFC 001 §8.9)."""
    if keyring is None:
        return DidKeyResolver(), []
    from ..files.keyring import load_keyring

    with local_file_errors():
        ring = load_keyring(keyring)
    return ChainResolver(DidKeyResolver(), ring), ring.x25519_secrets()


def _manifests(args: argparse.Namespace) -> list[Manifest]:
    from ..files.manifest import load_manifest

    found: list[Manifest] = []
    if args.demo:
        from ..caps.demo import demo_manifest

        found.append(demo_manifest())
    # Bindings are checked now: a missing module or program is one line at start,
    # not a 5001 on every invoke of that capability.
    with local_file_errors():
        found.extend(load_manifest(path, check_bindings=True) for path in args.manifest)
    if args.mcp:
        from .import_mcp import serve_mcp_manifests

        found.extend(serve_mcp_manifests(args.mcp, include=args.mcp_include, exclude=args.mcp_exclude,
                                         read_only=args.mcp_read_only))
    if not found and not getattr(args, "payments", False):
        raise UsageError("nothing to serve: pass --demo, --manifest FILE, --mcp NAME=COMMAND and/or --payments")
    return found


def build_daemon(args: argparse.Namespace) -> tuple[Any, str, int]:
    """Everything ``serve`` needs, built before the event loop starts (so
    every configuration error is one clear line, not a traceback)."""
    # The daemon's layers load here, when serving, not for every `ampcap` command.
    from ..caps.catalog import Catalog
    from ..caps.params import ParamsValidator
    from ..deleg.chain import VerifierConfig
    from ..net.daemon.core import Daemon, DaemonConfig
    from ..peer.executor import ExecutorConfig
    from ..files.policy import load_policy
    from ..peer.policy import ALLOW_ALL

    host, port = parse_listen(args.listen)
    if getattr(args, "http", None) is not None:
        args.http_address = parse_listen(args.http)
        if args.compat is not None or args.framing == "raw":
            raise UsageError("--http speaks RFC 002 as written: not with --compat or --framing raw")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.compat == "rust-example" and args.framing == "rfc002":
        raise UsageError("--compat rust-example frames raw (bare 4-byte lengths): drop --framing rfc002")
    for name in ("max_in_flight", "max_in_flight_per_connection", "max_connections", "invoke_cache"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    manifests = _manifests(args)  # files before the identity: a mistake in them creates no key file
    priced = tuple(spec for m in manifests for spec in m.capabilities if spec.price is not None)
    if priced and not getattr(args, "payments", False):
        raise UsageError(f"{priced[0].id} has a price: serve it with --payments (docs/payments.md)")
    with local_file_errors():
        policy = load_policy(args.policy) if args.policy is not None else ALLOW_ALL
    ssl_context = None
    if args.tls_cert is not None:
        from ..net.transport.tls import server_context

        try:
            ssl_context = server_context(args.tls_cert, args.tls_key)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    identity = load_or_create_identity(args.identity)
    if getattr(args, "state_url", None) is not None and args.state_dir is not None:
        raise UsageError("--state-url and --state-dir name two stores: give one")
    from .serve_state import open_state_store  # here: client commands import this module

    with local_file_errors():
        state = open_state_store(args.state_dir, args.durability, identity.did, getattr(args, "state_url", None))
        # descriptor_signer: a key file is read here; "identity" is this daemon's key.
        from ..files.manifest import sign_descriptors

        manifests = [sign_descriptors(m, identity) for m in manifests]
    payment_handlers: dict[str, Any] = {}
    if getattr(args, "payments", False):
        from ..net.features.payments import DEMO_CREDIT, PAID_ECHO_ID, PAID_ECHO_PRICE, PaymentService

        try:
            payments = PaymentService(identity, state, prices={PAID_ECHO_ID: PAID_ECHO_PRICE} if args.demo else {},
                                      demo_credit=DEMO_CREDIT if args.demo else None, priced=priced)
        except AmpError as exc:
            raise UsageError(exc.message) from None
        manifests.append(payments.manifest())
        payment_handlers = payments.handlers()
    if len(manifests) == 1:
        store = manifests[0].schema_store()
    else:
        from ..caps.bundle import SchemaStore

        store = SchemaStore([m.bundle for m in manifests], offline=True)
    from ..caps.artifacts import artifact_service

    specs = [spec for m in manifests for spec in m.capabilities]
    service, handlers = artifact_service(specs, store)  # the schemas our descriptors reference, by hash
    catalog = Catalog(specs + service, cursor_key=os.urandom(32))
    connection = ConnectionConfig(framing=Framing.RAW if args.framing == "raw" else Framing.RFC002)
    if args.compat == "rust-example":
        connection = rust_example_config(connection)
    config = DaemonConfig(
        connection=connection, executor=ExecutorConfig(ack_on_receipt=args.ack, cache_entries=args.invoke_cache),
        max_in_flight=args.max_in_flight, max_in_flight_per_connection=args.max_in_flight_per_connection,
        max_connections=fit_to_descriptors(args.max_connections), drain_timeout_s=args.drain_timeout,
        profile=connection.profile, revocation_publisher=args.revocation_publisher,
        delegation=VerifierConfig(max_chain_depth=args.max_chain_depth),
        revocation_publisher_did=args.revocation_publisher_did)
    resolver, secrets = _resolver(args.keyring)
    handlers = {**handlers, **payment_handlers}
    # One store for everything durable: credentials and revocations (RFC 005),
    # the invoke journal and the sessions (RFC 006).
    daemon = Daemon(identity, catalog, config=config, policy=policy, params=ParamsValidator(store),
                    handlers=handlers, resolver=resolver, ssl_context=ssl_context, decrypt_with=secrets, store=state)
    return daemon, host, port


def _run_workers(args: argparse.Namespace) -> int:
    """``serve --workers N``: the parent binds, the workers serve (cli/workers.py)."""
    from .main import main
    from .serve_state import METRICS_CHILD_ENV, args_address
    from .workers import launch, worker_argv

    if args.state_dir == "none":
        raise UsageError("--workers N share one state store: not with --state-dir none")
    load_or_create_identity(args.identity)  # once, here: N workers would race to create the default key
    addresses = [parse_listen(args.listen)]
    if getattr(args, "http", None) is not None:
        addresses.append(parse_listen(args.http))
    child = worker_argv(getattr(args, "argv", None) or sys.argv[1:])
    if args.metrics is None:
        return launch(main, child, args.workers, addresses)
    import shutil
    import tempfile

    # prometheus_client's multiprocess mode: each worker writes its figures
    # to files in this directory, the parent serves their sum.
    directory = tempfile.mkdtemp(prefix="ampcap-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    os.environ[METRICS_CHILD_ENV] = "1"
    try:
        from ..net.daemon.metrics import serve_metrics
        from prometheus_client import multiprocess

        address = parse_listen(args.metrics)
        try:
            serve_metrics(address, multiprocess_dir=directory)
        except OSError as exc:
            raise CommandError(f"--metrics: cannot listen on {args_address(address)}: {exc.strerror or exc}") \
                from None
        return launch(main, child, args.workers, addresses,
                      on_exit=lambda pid: multiprocess.mark_process_dead(pid, directory))
    except ImportError:
        raise CommandError("--metrics needs prometheus_client: pip install 'ampcap[metrics]'") from None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_serve(args: argparse.Namespace) -> int:
    import trio

    from ..net.transport.url import UrlError, parse_endpoints, parse_url

    publisher = [args.revocation_publisher] if args.revocation_publisher else []
    for flag, urls in (("--relay", args.relay), ("--connect", args.connect), ("--revocation-publisher", publisher)):
        for url in urls:
            try:
                if flag == "--relay" and parse_url(url).binding != "amps" and args.relay_profile == "rust-example":
                    raise UrlError("a relay like the public Rust example's is dialled over amp:// or amps://")
                parse_endpoints(url)
            except UrlError as exc:
                raise UsageError(f"{flag} {url!r}: {exc}") from None
    dial_tls = tls_client_context(args, [*args.relay, *args.connect])
    if args.trace is not None:  # before any worker starts: a missing extra is one line, once
        from .tracing import check_tracing

        check_tracing(args.trace)
    if args.workers > 1:
        return _run_workers(args)
    # A stop signal before serving (held by cli.startup) ends serve here, with
    # 0: checked before the daemon is built, before the event loop starts, and
    # (serve_until_signal) once trio's own signal handling is in place.
    if _stopped_during_startup():
        return 0
    daemon, host, port = build_daemon(args)
    if _stopped_during_startup():
        return 0
    if args.metrics is not None:
        from .serve_state import METRICS_CHILD_ENV, start_metrics

        start_metrics(daemon, parse_listen(args.metrics), serve=not os.environ.get(METRICS_CHILD_ENV))
    if args.trace is not None:  # after --metrics: both observe the daemon's actions
        from .tracing import start_tracing

        start_tracing(daemon, args.trace, service="ampcap serve")
    # What start-up built (modules, classes, the schemas, the catalog) lives
    # as long as the process. Frozen, the collector no longer walks it: a
    # full collection (every ~20,000 invokes of `serve --demo`) walked all
    # ~35,000 of these objects and paused the daemon ~22 ms; it now walks
    # what serving made, ~4.5 ms. No gc.collect() first: on every start it
    # would cost as much as the walk it saves; the unreachable start-up
    # leftovers it would free (~900 objects) stay.
    gc.freeze()
    # Errors from inside the nurseries (a port in use...) arrive wrapped in an
    # exception group; main reports a lone one as one line.
    rfc003 = args.relay_profile == "rfc003" or (args.relay_profile == "auto" and args.relay_did != RELAY_DID)
    try:
        trio.run(functools.partial(serve_until_signal, daemon, host, port, args.tls_cert is not None,
                                   tuple(args.relay), args.relay_did, tuple(args.connect), dial_tls,
                                   http=getattr(args, "http_address", None), rfc003_relay=rfc003))
    finally:
        if daemon.tracing is not None:  # the spans still batched reach the exporter
            daemon.tracing.shutdown()
    return 0


async def serve_until_signal(daemon: Any, host: str, port: int, tls: bool, relays: tuple[str, ...] = (),
                             relay_did: str = RELAY_DID, peers: tuple[str, ...] = (),
                             dial_tls: ssl.SSLContext | None = None, *, http: tuple[str, int] | None = None,
                             rfc003_relay: bool = False) -> None:
    """Listen (and with ``http``, serve HTTP and WebSocket there too), register at relays, dial peers (``dial_tls`` verifies the
    amps:// ones), print the URL line, serve until SIGTERM/SIGINT/SIGHUP,
    then drain. A second signal ends the drain's wait: the invokes still
    running get their 5002 at once. Either way the exit is orderly (0)."""
    import trio

    stop = trio.Event()
    starting = trio.CancelScope()  # a signal during start-up (a slow dial) ends it too

    async def watch(signals: Any) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            if not stop.is_set():
                log.info("%s: stopping (GOAWAY, then drain; a second signal ends the drain at once)", name)
                stop.set()
                starting.cancel()
            else:
                log.info("%s again: the invokes still running end now", name)
                daemon.hurry()

    with trio.open_signal_receiver(*startup.STOP_SIGNALS) as signals:
        if _stopped_during_startup():  # it came before trio's handlers replaced cli.startup's
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, signals)
            await nursery.start(daemon.run)
            if getattr(daemon, "metrics", None) is not None:
                nursery.start_soon(daemon.metrics.run)
            with starting:
                listeners = await daemon.listen(host, port)
                bound = listeners[0].socket.getsockname()
                url_line = f"{AmpUrl('amps' if tls else 'amp', bound[0], bound[1])} {daemon.identity.did}"
                http_line = None
                if http is not None:
                    from ..net.transport.http_server import HttpFront  # the HTTP stack only when asked for

                    front = HttpFront(daemon, ssl_context=daemon.listener.ssl_context)
                    http_bound = (await nursery.start(front.serve, *http))[0].socket.getsockname()
                    http_line = f"{AmpUrl('https' if tls else 'http', http_bound[0], http_bound[1])} {daemon.identity.did}"
                for flag, url in [*(("--relay", u) for u in relays), *(("--connect", u) for u in peers)]:
                    if flag == "--relay" and rfc003_relay:
                        from ..net.features import relay_agent

                        dial = functools.partial(relay_agent.join, daemon, url, timeout_s=10.0, ssl_context=dial_tls,
                                                 relay_did=None if relay_did == RELAY_DID else relay_did)
                    else:
                        dial = (functools.partial(daemon.join_relay, url, relay_did=relay_did,
                                                  ssl_context=dial_tls, probe_s=RELAY_PROBE_S)
                                if flag == "--relay" else functools.partial(daemon.connect, url, ssl_context=dial_tls))
                    try:
                        link = await dial()
                    except AmpError as exc:  # the URL alone would not say which dial failed
                        raise _dial_error(flag, url, exc, given_ca=dial_tls is not None) from None
                    nursery.start_soon(_keep_linked, daemon, f"{flag} {url}", dial, link)
                _announce(url_line)
                if http_line is not None:
                    _announce(http_line)
            await stop.wait()
            await daemon.drain()
            nursery.cancel_scope.cancel()


def _dial_error(flag: str, url: str, exc: AmpError, *, given_ca: bool) -> AmpError:
    """A failed start-up dial, named by its flag: ``--connect URL: …``."""
    from ..net.transport.url import parse_url

    if isinstance(exc, Unreachable):
        return AmpError(ErrorCode.UNAVAILABLE, f"{flag} {url}: cannot reach it: {exc.reason}")
    named = f"{parse_url(url)}: " if "," not in url else ""  # a list of endpoints: the daemon names the one it tried
    message = exc.message.removeprefix(named)  # the daemon names the URL too
    return AmpError(exc.code, f"{flag} {url}: {tls_advice(message, given_ca=given_ca)}")


def _stopped_during_startup() -> bool:
    name = startup.noted()
    if name is not None:
        log.info("%s during start-up: stopping before serving (nothing to drain)", name)
    return name is not None


# How often a --relay link checks that the relay still forwards our DID to it
# (Daemon.join_relay): a caller that registered there with this daemon's key
# makes the relay forget us when it leaves; the link is then dialled again.
RELAY_PROBE_S = 30.0

# How long a redialled --connect/--relay link must stay up to count as back:
# only then does the backoff start again from 1 s. A peer that accepts and
# drops at once would otherwise be dialled every second, for ever.
STABLE_S = 30.0


async def _keep_linked(daemon: Any, what: str, dial: Any, link: Any, *, stable_s: float = STABLE_S,
                       jitter: Any = None) -> None:
    """A --connect or --relay link is the operator's standing order: when it
    is lost, dial again, waiting as RFC 001 §16.3 has a retry wait (from 1 s,
    doubling to at most 60 s, with jitter), until the daemon drains.

    The wait keeps growing across dials that connect but do not last: it
    goes back to 1 s only once a link has stayed up ``stable_s``. Until
    then the log says at WARNING only that the link was lost, why the first
    redial failed and that it is back; every redial after that is one INFO
    line (the link lost again, or a dial that failed), not two WARNINGs per
    dial for as long as the peer keeps dropping the link.
    """
    import random

    import trio

    from ..peer.invoker import RetryPolicy

    backoff = RetryPolicy()
    jitter = jitter or (lambda: random.uniform(0.5, 1.0))
    redials = 0  # since the link was last stable
    said_restored = failed_before = False
    while True:
        up_since = trio.current_time()
        if redials:
            with trio.move_on_after(stable_s):
                await link.driver.closed.wait()
            if not link.driver.closed.is_set():
                log.debug("%s: link up for %gs: the next loss starts from a short wait again", what, stable_s)
                redials = 0
        await link.driver.closed.wait()
        if daemon.closing:
            return
        if redials:
            log.info("%s: link lost again after %.1fs; redial %d within %gs", what, trio.current_time() - up_since,
                     redials + 1, backoff.backoff_ms(redials + 1, 1.0) / 1000)
        else:
            log.warning("%s: link lost; dialling again", what)
            said_restored = failed_before = False
        while True:
            redials += 1
            await trio.sleep(backoff.backoff_ms(redials, jitter()) / 1000)
            if daemon.closing:
                return
            try:
                link = await dial()
            except AmpError as exc:
                reason = exc.reason if isinstance(exc, Unreachable) else exc
                log.log(logging.INFO if failed_before else logging.WARNING,
                        "%s: cannot reach it (%s); next try within %gs", what, reason,
                        backoff.backoff_ms(redials + 1, 1.0) / 1000)
                failed_before = True
                continue
            if said_restored:
                log.debug("%s: dialled again (redial %d)", what, redials)
            else:
                log.warning("%s: link restored", what)
                said_restored = True
            break


def _announce(line: str) -> None:
    """The one line scripts wait for, flushed before anything can be served.
    With stdout closed (as some supervisors start daemons) or its reader
    gone, nobody waits for it: the daemon serves on, and says so. Of
    ``serve --workers``, only the first worker's first start prints it, and
    tells the group it has started (cli/workers.py: from then on a worker
    whose start fails is started again, not taken for a bad configuration)."""
    if os.environ.get("AMPCAP_WORKER", "0 0") != "0 0":
        return
    if "AMPCAP_WORKER" in os.environ:
        from .workers import serving

        serving()
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError) as exc:
        log.warning("could not print the URL line (%s); serving on", exc)
        sys.stdout = None  # nothing more will be written there
