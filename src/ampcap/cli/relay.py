"""``ampcap relay``: run an RFC 003 relay (store-and-forward for agents that
are offline, firewalled or mobile; docs/relay.md).

Like ``serve``, it prints one stdout line ``<amp url> <did:key>`` (and with
``--http`` a second, ``<http url> <did:key>``) before it accepts anything;
SIGTERM, Ctrl-C or SIGHUP stops it (GOAWAY on every link) with exit status
0. The queue is in the state store: what the relay accepted is on disk
before it says so, and a restart on the same ``--state-dir`` (or
``--state-url``) delivers it.

:func:`start_relay` is the whole start-up of one relay process, so a
launcher of several worker processes on one store calls it in each.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..net.transport.url import AmpUrl, parse_hostport
from . import startup
from .argtypes import did, state_dir, whole_number
from .errors import CommandError, UsageError, local_file_errors
from .serve import _announce, _stopped_during_startup, fit_to_descriptors, load_or_create_identity

if TYPE_CHECKING:
    from ..net.relay import RelayServer

__all__ = ["register", "run_relay", "start_relay", "DEFAULT_RELAY_LISTEN"]

log = logging.getLogger("ampcap.relay")

DEFAULT_RELAY_LISTEN = "127.0.0.1:7800"
WORKER_IDLE_TICK_S = 0.25


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "relay",
        help="run an RFC 003 relay (prints its amp:// URL and did:key on one line)",
        description=("Carry AMP messages for agents that are offline or behind firewalls (RFC 003): agents "
                     "register by HELLO (AMPS, WebSocket) or a bearer token (HTTP), messages wait on disk "
                     "until their recipient acknowledges them or they expire. Prints '<amp-url> <did:key>' "
                     "(and with --http '<http-url> <did:key>') before accepting; SIGTERM exits 0."))
    p.add_argument("--listen", default=DEFAULT_RELAY_LISTEN, metavar="HOST:PORT",
                   help=f"AMPS address (default {DEFAULT_RELAY_LISTEN}; ':0' = any free port)")
    p.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="also serve HTTP here: POST/GET /amp/v1/messages (submit, poll), /amp/v1/ws and the "
                        "federation endpoints /amp/v1/relay/forward and /commit")
    p.add_argument("--identity", type=Path, default=None, metavar="FILE",
                   help="the relay's identity key file (default: the default identity, created if missing)")
    p.add_argument("--state-dir", type=state_dir, default=None, metavar="DIR|none",
                   help="where the queue lives (SQLite; default $XDG_STATE_HOME/ampcap/<DID fingerprint>/; "
                        "'none' keeps it in memory: lost on exit)")
    p.add_argument("--state-url", default=None, metavar="URL",
                   help="keep the queue in PostgreSQL instead (postgresql://...); several relay processes "
                        "may share it")
    p.add_argument("--routes", type=Path, default=None, metavar="FILE",
                   help="federation peers and routes (TOML, docs/relay.md)")
    p.add_argument("--webhook", action="append", default=[], metavar="DID=URL",
                   help="push messages for DID to this webhook (RFC 002 §6.3, signed by the relay); "
                        "may be repeated")
    p.add_argument("--keyring", type=Path, default=None, metavar="FILE",
                   help="keyring (JSON/TOML) resolving non-did:key senders")
    p.add_argument("--accept-any", action="store_true",
                   help="queue messages for any recipient, registered or not (default: only for DIDs that "
                        "registered here or that a route sends on, else 2001)")
    p.add_argument("--max-queued-per-recipient", type=whole_number("--max-queued-per-recipient", 1, 10**9),
                   default=10_000, metavar="N", help="live messages one recipient may hold (default 10000; "
                                                     "beyond: 2003)")
    p.add_argument("--max-ttl", type=whole_number("--max-ttl", 1, 365 * 86_400), default=7 * 86_400,
                   metavar="S", help="the longest TTL accepted, in seconds (default 604800, a week)")
    p.add_argument("--redeliver", type=whole_number("--redeliver", 1, 86_400), default=30, metavar="S",
                   help="push an unacknowledged message again after this many seconds (default 30)")
    p.add_argument("--claim-lease", type=whole_number("--claim-lease", 1, 3600), default=30, metavar="S",
                   help="how long a push claimed by one relay process stays its own unless renewed (default 30): "
                        "the claims of a process that died are taken over after this")
    p.add_argument("--workers", type=whole_number("--workers", 1, 256), default=1, metavar="N",
                   help="run N relay processes on the same sockets and store (one identity; each claims what it "
                        "pushes, so none pushes an entry another is pushing); a worker that dies is started again")
    p.add_argument("--tls-cert", type=Path, default=None, metavar="FILE", help="serve amps:// with this certificate")
    p.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="private key for --tls-cert")
    p.add_argument("--durability", choices=("process", "power"), default="process",
                   help="what a committed write survives: 'process' (default) a crash of the relay, 'power' "
                        "also a power loss (each commit waits for fsync)")
    p.add_argument("--max-connections", type=int, default=10_000, metavar="N",
                   help="open connections (default 10000)")
    p.set_defaults(func=run_relay)


def _webhooks(values: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise UsageError(f"--webhook {value!r}: expected DID=http(s)://HOST:PORT/PATH")
        try:
            did(name)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"--webhook {value!r}: {exc}") from None
        pairs.append((name, url))
    return tuple(pairs)


def start_relay(args: argparse.Namespace) -> tuple[RelayServer, tuple[str, int], tuple[str, int] | None]:
    """Build one relay process from its parsed options: (server, AMPS
    address, HTTP address). Everything but the event loop."""
    from ..files.relay_routes import load_routes
    from ..net.relay import RelayServer, RelaySettings
    from ..relay import RelayConfig
    from ..errors import AmpError
    from ..store import Durability, open_store
    from ..store.database import default_state_dir
    from ..store.opening import is_store_url
    from .workers import WORKER_ENV
    from .serve import _resolver

    try:
        host, port = parse_hostport(args.listen)
        http = parse_hostport(args.http) if args.http else None
    except ValueError as exc:
        raise UsageError(f"--listen/--http: {exc}") from None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    webhooks = _webhooks(args.webhook)
    identity = load_or_create_identity(args.identity)
    if args.state_url is not None and args.state_dir is not None:
        raise UsageError("--state-dir and --state-url name two stores: give one")
    if args.state_url is not None and not is_store_url(args.state_url):
        raise UsageError(f"--state-url {args.state_url!r}: expected postgresql://...")
    with local_file_errors():
        routes = load_routes(args.routes) if args.routes is not None else None
        if args.state_url is not None:
            try:
                store = open_store(args.state_url, durability=Durability(args.durability))
            except AmpError as exc:  # not our file: the database said no (or is not there)
                raise CommandError(exc.message) from None
        else:
            directory = default_state_dir(identity.did) if args.state_dir is None else args.state_dir
            store = open_store(directory, durability=Durability(args.durability))
        ssl_context = None
        if args.tls_cert is not None:
            from ..net.transport.tls import server_context

            ssl_context = server_context(args.tls_cert, args.tls_key)
    resolver, _ = _resolver(args.keyring)
    config = RelayConfig(relay_did=identity.did, accept_unregistered=args.accept_any,
                         max_queued_per_recipient=args.max_queued_per_recipient, max_ttl_ms=args.max_ttl * 1000,
                         redeliver_ms=args.redeliver * 1000, lease_ms=args.claim_lease * 1000)
    # Workers: an agent's link is in one process, a message for it may
    # arrive at another, whose timer cannot wake the first; each looks in
    # the store for its linked agents' new entries this often.
    settings = RelaySettings(webhooks=webhooks, max_connections=fit_to_descriptors(args.max_connections))
    if os.environ.get(WORKER_ENV):
        settings = replace(settings, idle_tick_s=WORKER_IDLE_TICK_S)
    server = RelayServer(identity, store, config=config, routes=routes, resolver=resolver, settings=settings,
                         ssl_context=ssl_context)
    return server, (host, port), http


def _run_workers(args: argparse.Namespace) -> int:
    """``relay --workers N``: the parent binds, the workers relay (cli/workers.py)."""
    from .main import main
    from .workers import launch, worker_argv

    if args.state_dir == "none":
        raise UsageError("--workers N share one queue: not with --state-dir none")
    load_or_create_identity(args.identity)  # once, here: N workers would race to create the default key
    try:
        addresses = [parse_hostport(args.listen)] + ([parse_hostport(args.http)] if args.http else [])
    except ValueError as exc:
        raise UsageError(f"--listen/--http: {exc}") from None
    child = worker_argv(getattr(args, "argv", None) or sys.argv[1:])
    return launch(main, child, args.workers, addresses, what="relay")


def run_relay(args: argparse.Namespace) -> int:
    import trio

    if args.workers > 1:
        return _run_workers(args)
    if _stopped_during_startup():
        return 0
    server, amps, http = start_relay(args)
    if _stopped_during_startup():
        return 0
    trio.run(serve_relay_until_signal, server, amps, http)
    return 0


async def serve_relay_until_signal(server: RelayServer, amps: tuple[str, int], http: tuple[str, int] | None) -> None:
    """Serve until SIGTERM/SIGINT/SIGHUP, printing the URL line(s) first."""
    import trio

    from ..net.relay.http_front import RelayHttpFront

    tls = server.listener.ssl_context is not None
    with trio.open_signal_receiver(*startup.STOP_SIGNALS) as signals:
        if _stopped_during_startup():
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            bound = (await nursery.start(server.listen, *amps))[0].socket.getsockname()
            lines = [f"{AmpUrl('amps' if tls else 'amp', bound[0], bound[1])} {server.identity.did}"]
            if http is not None:
                front = RelayHttpFront(server, ssl_context=server.listener.ssl_context)
                http_bound = (await nursery.start(front.serve, *http))[0].socket.getsockname()
                lines.append(f"{AmpUrl('https' if tls else 'http', http_bound[0], http_bound[1])} "
                             f"{server.identity.did}")
            for line in lines:
                _announce(line)
            async for signum in signals:
                log.info("%s: stopping (the queue is on disk)", signal.Signals(signum).name)
                break
            server.stop()
            with trio.move_on_after(2):
                while server.listener.active:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    server.store.close()
    log.info("relay stopped (pid %d)", os.getpid())
