"""How much CPU does an invoke cost before any I/O? The protocol work alone.

Two daemons in this process, one serving ``--demo`` and one calling it, each
with a :class:`~ampcap.peer.connection.Connection` whose bytes are handed
across by this script: no sockets, no event-loop waits, no scheduling. A
round starts N invokes on the calling side (seal, sign, frame), feeds the
bytes to the serving side (parse, verify, CDDL check, replay cache, the
executor's §7.2 steps, the demo echo, CAP_RESULT sealed and signed) and its
reply back (parse, verify, correlate, outcome). Each side's time per invoke
is printed next to an Ed25519 sign plus verify measured in the same run:
everything above that is decoding, checking and encoding in Python.

This is the floor under ``tools/bench_daemon.py``'s figures: a process that
spends D µs per invoke here cannot serve more than 1e6/D invokes per second
on one core, and a sequential round trip cannot take less than the two
sides' batch-of-1 times added up, whatever the transport does.

    python tools/bench_protocol.py [--rounds 150] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_daemon import PARAMS, crypto_floor_us  # noqa: E402

from ampcap.cli.main import build_parser  # noqa: E402
from ampcap.cli.serve import build_daemon  # noqa: E402
from ampcap.net.daemon.core import Daemon, Link  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402
from ampcap.net.transport.stream import ConnectionDriver  # noqa: E402
from ampcap.peer.connection import Connection, Role  # noqa: E402
from ampcap.peer.events import MessageReceived  # noqa: E402
from ampcap.files.identity import save_identity  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

CAPABILITY = ("org.ampcap.demo.echo", "1.0.0")
P = TypeVar("P", bound="Pair")
# What a round is timed with; tools/bench_cancel.py times CPU (time.thread_time).
CLOCK: Callable[[], float] = time.perf_counter


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Pair:
    """A calling and a serving daemon joined by two hand-pumped connections."""

    def __init__(self, server: Daemon, client: Daemon) -> None:
        self.server, self.client = server, client
        self.sconn = self._connection(server, Role.SERVER)
        self.cconn = self._connection(client, Role.CLIENT)
        # A driver with no stream: send_nowait seals into the connection's
        # outgoing buffer, which this script empties itself.
        self.slink = Link(driver=ConnectionDriver(self.sconn, None), outbound=False)  # type: ignore[arg-type]
        self.clink = Link(driver=ConnectionDriver(self.cconn, None), outbound=True)  # type: ignore[arg-type]
        now = _now_ms()
        self.sconn.start(now)
        self.cconn.start(now)
        for _ in range(4):  # HANDSHAKE, HELLO, HELLO_ACK
            self._pump(self.cconn, self.sconn)
            self._pump(self.sconn, self.cconn)
        for conn in (self.sconn, self.cconn):
            while conn.next_event() is not None:
                pass
        if self.cconn.peer_did != server.identity.did:
            raise SystemExit("handshake did not complete")

    @staticmethod
    def _connection(daemon: Daemon, role: Role) -> Connection:
        return Connection(role=role, identity=daemon.identity, pipeline=daemon.pipeline,
                          config=daemon._conn_config, entropy=os.urandom)

    @staticmethod
    def _pump(src: Connection, dst: Connection) -> None:
        data = src.data_to_send()
        if data:
            dst.receive_data(data, _now_ms())

    @staticmethod
    def _deliver(conn: Connection, daemon: Daemon, link: Link) -> None:
        while (event := conn.next_event()) is not None:
            if type(event) is not MessageReceived:
                raise SystemExit(f"unexpected event {event!r}")
            daemon._on_message(link, event)

    def invokes(self, batch: int, *, encrypt: bool = False,
                delegations: Sequence[Mapping[str, Any] | None] | None = None) -> tuple[float, float, bytes]:
        """``batch`` invokes there and back, authcrypted if ``encrypt``, invoke
        i carrying ``delegations[i]`` if given: (client s, server s, the
        invokes' bytes)."""
        client, server = self.client, self.server
        t0 = CLOCK()
        calls = []
        for i in range(batch):
            handle, out = client.invoker.start_invoke(self.clink, CAPABILITY, PARAMS, timeout_ms=60_000,
                                                      to=self.cconn.peer_did, encrypt=encrypt,
                                                      delegation=None if delegations is None else delegations[i],
                                                      now_ms=_now_ms())
            calls.append(client.calls.register(self.clink, handle, out, None))
        data = self.cconn.data_to_send()
        t1 = CLOCK()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, server, self.slink)
        reply = self.sconn.data_to_send()
        t2 = CLOCK()
        self.cconn.receive_data(reply, _now_ms())
        self._deliver(self.cconn, client, self.clink)
        t3 = CLOCK()
        for call in calls:
            if not call.done.is_set() or call.error is not None:
                raise SystemExit(f"an invoke failed: {call.error}")
        return (t1 - t0) + (t3 - t2), t2 - t1, data

    def round(self, batch: int) -> tuple[float, float]:
        """``batch`` plain invokes there and back; (client s, server s) spent."""
        c, s, _ = self.invokes(batch)
        return c, s


def demo_daemons(identity_file: Path, batch: int) -> tuple[Daemon, Daemon]:
    """The serving daemon (``serve --demo`` with ``identity_file``) and a
    calling one, not started yet.

    ``--state-dir none``: the protocol work alone (with a state directory the
    journal holds each reply until the next event-loop tick, which hand
    delivery never yields to; tools/bench_sessions.py measures what it adds).
    """
    serve_args = build_parser().parse_args(["serve", "--demo", "--listen", "127.0.0.1:0", "--identity",
                                            str(identity_file), "--state-dir", "none",
                                            "--max-in-flight-per-connection", str(max(256, batch))])
    server, _, _ = build_daemon(serve_args)
    return server, Peer(Identity.generate(os.urandom))._build_daemon()


async def start_pair(nursery: trio.Nursery, server: Daemon, client: Daemon, kind: type[P]) -> P:
    """Both daemons running in ``nursery``, joined as a ``kind`` pair."""
    await nursery.start(server.run)
    await nursery.start(client.run)
    return kind(server, client)


def pair_args(description: str | None, *, rounds: int, rounds_help: str, batch: int, batch_help: str,
              quick_rounds: int) -> argparse.Namespace:
    """The command line all in-process benchmarks take: --rounds, --batch, --quick."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--batch", type=int, default=batch, help=batch_help)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch must be at least 1")
    if args.quick:
        args.rounds = quick_rounds
    return args


def run_with_identity(run: Callable[[argparse.Namespace, Path], Awaitable[None]], args: argparse.Namespace) -> None:
    """``run(args, identity_file)`` under trio, with a throwaway identity for the serving side."""
    with tempfile.TemporaryDirectory() as tmp:
        identity_file = save_identity(Identity.generate(os.urandom), Path(tmp) / "identity.json")
        trio.run(run, args, identity_file)


def measure(pair: Pair, batch: int, rounds: int) -> tuple[float, float]:
    """Median over rounds of µs per invoke on each side: (client, server)."""
    for _ in range(5):
        pair.round(batch)
    client, server = [], []
    for _ in range(rounds):
        c, s = pair.round(batch)
        client.append(c * 1e6 / batch)
        server.append(s * 1e6 / batch)
    return statistics.median(client), statistics.median(server)


async def run(args: argparse.Namespace, identity_file: Path) -> None:
    server, client = demo_daemons(identity_file, args.batch)
    async with trio.open_nursery() as nursery:
        pair = await start_pair(nursery, server, client, Pair)
        rows = [(args.batch, *measure(pair, args.batch, args.rounds)),
                (1, *measure(pair, 1, args.rounds * 8))]
        floor = crypto_floor_us()
        nursery.cancel_scope.cancel()

    print(f"protocol work per invoke, no I/O (org.ampcap.demo.echo:1.0.0, ~450-byte messages, "
          f"CPython {sys.version.split()[0]})")
    print(f"Ed25519 sign + verify here: {floor:.1f} µs (each side does one of each per invoke)")
    print(f"{'invokes per batch':>18} | {'daemon µs':>9} | {'beyond Ed25519':>14} | {'client µs':>9} | "
          f"{'beyond Ed25519':>14} | {'both sides':>10}")
    for batch, client_us, server_us in rows:
        print(f"{batch:>18} | {server_us:>9.1f} | {server_us - floor:>14.1f} | {client_us:>9.1f} | "
              f"{client_us - floor:>14.1f} | {client_us + server_us:>10.1f}")
    _, c64, s64 = rows[0]
    _, c1, s1 = rows[1]
    print(f"daemon / Ed25519 at {args.batch} per batch: {s64 / floor:.2f}×")
    print(f"most invokes/s one core allows, at {args.batch} per batch: daemon {1e6 / s64:,.0f}, "
          f"client {1e6 / c64:,.0f}")
    print(f"least a sequential round trip can take (both sides, batch of 1, no I/O): {c1 + s1:.0f} µs")


def main() -> None:
    args = pair_args(__doc__, rounds=150, rounds_help="batches measured (default 150)", batch=64,
                     batch_help="invokes per batch, like in flight (default 64)", quick_rounds=10)
    run_with_identity(run, args)


if __name__ == "__main__":
    main()
