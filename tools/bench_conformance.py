"""What the conformance work costs, measured against a plain invoke in the same run.

The protocol work alone, as ``tools/bench_protocol.py`` measures it (two
daemons in this process, connections pumped by hand, no I/O), for:

* a plain invoke (the baseline);
* an authcrypt invoke (RFC 001 §8.5): the caller encrypts, the daemon
  decrypts, then encrypts its CAP_RESULT back, and the caller decrypts it;
* an exact resend of a completed invoke (ruling R8): the daemon answers with
  the bytes of the first CAP_RESULT, kept since, instead of running anything.

Rounds of the three alternate, so a busy machine slows them alike.

    python tools/bench_conformance.py [--rounds 100] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_protocol import CAPABILITY, Pair, _now_ms  # noqa: E402
from bench_daemon import PARAMS  # noqa: E402

from ampcap.cli.main import build_parser  # noqa: E402
from ampcap.cli.serve import build_daemon  # noqa: E402
from ampcap.files.identity import save_identity  # noqa: E402
from ampcap.net.peer import Peer  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402


class ConformancePair(Pair):
    def invokes(self, batch: int, *, encrypt: bool) -> tuple[float, float, bytes]:
        """``batch`` invokes there and back: (client s, server s, the invokes' bytes)."""
        client, server = self.client, self.server
        t0 = time.perf_counter()
        calls = []
        for _ in range(batch):
            handle, out = client.invoker.start_invoke(self.clink, CAPABILITY, PARAMS, timeout_ms=60_000,
                                                      to=self.cconn.peer_did, encrypt=encrypt, now_ms=_now_ms())
            calls.append(client.calls.register(self.clink, handle, out, None))
        data = self.cconn.data_to_send()
        t1 = time.perf_counter()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, server, self.slink)
        reply = self.sconn.data_to_send()
        t2 = time.perf_counter()
        self.cconn.receive_data(reply, _now_ms())
        self._deliver(self.cconn, client, self.clink)
        t3 = time.perf_counter()
        for call in calls:
            if not call.done.is_set() or call.error is not None:
                raise SystemExit(f"an invoke failed: {call.error}")
        return (t1 - t0) + (t3 - t2), t2 - t1, data

    def resend(self, data: bytes) -> float:
        """The same invoke bytes again: server seconds to answer them from its cache."""
        t0 = time.perf_counter()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, self.server, self.slink)
        reply = self.sconn.data_to_send()
        t1 = time.perf_counter()
        if not reply:
            raise SystemExit("the resend got no answer")
        self.cconn.receive_data(reply, _now_ms())  # late replies, dropped by the invoker
        while self.cconn.next_event() is not None:
            pass
        return t1 - t0


async def run(args: argparse.Namespace, identity_file: Path) -> None:
    # --state-dir none: the protocol work alone, as in bench_protocol (with a
    # state directory the journal holds each reply until the next event-loop
    # tick, which this script's hand delivery never yields to; its cost is
    # tools/bench_sessions.py's to measure).
    serve_args = build_parser().parse_args(["serve", "--demo", "--listen", "127.0.0.1:0", "--identity",
                                            str(identity_file), "--state-dir", "none",
                                            "--max-in-flight-per-connection", str(max(256, args.batch))])
    server, _, _ = build_daemon(serve_args)
    client = Peer(Identity.generate(os.urandom))._build_daemon()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        await nursery.start(client.run)
        pair = ConformancePair(server, client)
        samples: dict[str, list[float]] = {"plain daemon": [], "plain client": [], "authcrypt daemon": [],
                                           "authcrypt client": [], "exact resend daemon": []}
        for i in range(args.rounds + 5):
            c, s, sent = pair.invokes(args.batch, encrypt=False)
            ce, se, _ = pair.invokes(args.batch, encrypt=True)
            r = pair.resend(sent)
            if i >= 5:  # warm-up
                for key, value in (("plain daemon", s), ("plain client", c), ("authcrypt daemon", se),
                                   ("authcrypt client", ce), ("exact resend daemon", r)):
                    samples[key].append(value * 1e6 / args.batch)
        nursery.cancel_scope.cancel()
    us = {k: statistics.median(v) for k, v in samples.items()}
    print(f"protocol work per invoke, no I/O, {args.batch} per batch ({CAPABILITY[0]}:{CAPABILITY[1]}, "
          f"CPython {sys.version.split()[0]}), medians of {args.rounds} alternating rounds")
    print(f"{'':>22} | {'daemon µs':>9} | {'client µs':>9} | {'daemon / plain':>14}")
    print(f"{'plain invoke':>22} | {us['plain daemon']:>9.1f} | {us['plain client']:>9.1f} | {1.0:>14.2f}")
    print(f"{'authcrypt invoke':>22} | {us['authcrypt daemon']:>9.1f} | {us['authcrypt client']:>9.1f} | "
          f"{us['authcrypt daemon'] / us['plain daemon']:>14.2f}")
    print(f"{'exact resend (R8)':>22} | {us['exact resend daemon']:>9.1f} | {'-':>9} | "
          f"{us['exact resend daemon'] / us['plain daemon']:>14.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100, help="rounds of each kind measured (default 100)")
    parser.add_argument("--batch", type=int, default=64, help="invokes per batch (default 64)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch must be at least 1")
    if args.quick:
        args.rounds = 5
    with tempfile.TemporaryDirectory() as tmp:
        identity_file = save_identity(Identity.generate(os.urandom), Path(tmp) / "identity.json")
        trio.run(run, args, identity_file)


if __name__ == "__main__":
    main()
