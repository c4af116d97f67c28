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
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_protocol import (CAPABILITY, Pair, _now_ms, demo_daemons, pair_args, run_with_identity,  # noqa: E402
                            start_pair)


class ConformancePair(Pair):
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
    server, client = demo_daemons(identity_file, args.batch)
    async with trio.open_nursery() as nursery:
        pair = await start_pair(nursery, server, client, ConformancePair)
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
    args = pair_args(__doc__, rounds=100, rounds_help="rounds of each kind measured (default 100)", batch=64,
                     batch_help="invokes per batch (default 64)", quick_rounds=5)
    run_with_identity(run, args)


if __name__ == "__main__":
    main()
