"""What does the state store cost per invoke? Journal round trips on both backends.

The daemon's store work per plain invoke (R19, R25) is two commits: the
RUNNING row before the job starts and the DONE row (the terminal bytes)
before the reply leaves; the daemon batches both kinds per event-loop tick,
so under load one commit carries many invokes. A retry that memory forgot
costs one primary-key read (``find``). A worker group adds the claim (an
``INSERT ... ON CONFLICT DO NOTHING``) in place of the RUNNING upsert, and
a lease renewal per worker per period (not per invoke).

Measured here, one connection, sequentially (latency, not throughput):
a commit of 1 and of 64 DONE rows (~500-byte terminals), ``find``, and
claim + complete; and the CPU a lone daemon's two commits per invoke
cost at one in flight (the floor under the journal's cost there; the
client side of PostgreSQL only). SQLite in a temporary directory, with ``--durability``
process (WAL, synchronous=NORMAL) and power (synchronous=FULL); PostgreSQL
at ``--url``, or a private cluster this tool starts (tests/pg.py, fsync on)
when the PostgreSQL binaries are installed.

    python tools/bench_store.py [--n 2000] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

from ampcap.peer.dedupe import InvokeKey, Terminal  # noqa: E402
from ampcap.peer.journal import JournalRecord, JournalState  # noqa: E402
from ampcap.store import Durability, StateStore, open_store  # noqa: E402
from ampcap.store.journal import StoreJournal  # noqa: E402

T0 = int(time.time() * 1000)


def _records(start: int, n: int) -> list[JournalRecord]:
    return [JournalRecord(key=InvokeKey("did:key:z6MkBench", (start + i).to_bytes(16, "big")),
                          fingerprint=os.urandom(32), capability_id="org.ampcap.demo.echo:1.0.0",
                          state=JournalState.DONE, expires_at=T0 + 600_000,
                          terminal=Terminal(os.urandom(480), T0 + 600_000)) for i in range(n)]


def _timed(n: int, step: Callable[[int], None]) -> tuple[float, float]:
    """(median µs, p99 µs) of ``step(i)`` over ``n`` calls."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        step(i)
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]


def measure(store: StateStore, n: int) -> dict[str, tuple[float, float]]:
    journal = StoreJournal(store)
    one = _records(0, n)
    batches = [_records(10_000_000 + 64 * i, 64) for i in range(max(1, n // 16))]
    out = {"commit 1 row": _timed(n, lambda i: journal.write([one[i]])),
           "commit 64 rows": _timed(len(batches), lambda i: journal.write(batches[i])),
           "find (a cache miss)": _timed(n, lambda i: journal.find(one[i].key, T0))}
    claims = [msgspec.structs.replace(r, key=InvokeKey(r.key.sender, b"c" + r.key.msg_id), state=JournalState.RUNNING,
                                      terminal=None) for r in one]

    def claim_and_complete(i: int) -> None:
        journal.claim(claims[i], "w1", T0 + 10_000, T0)
        with store.transaction() as db:
            journal.complete_rows(db, [msgspec.structs.replace(claims[i], state=JournalState.DONE,
                                                               terminal=one[i].terminal)], "w1")

    out["claim + complete"] = _timed(n, claim_and_complete)
    return out


def invoke_commits_cpu_us(store: StateStore, n: int) -> float:
    """CPU µs (this process: the driver, the SQLite library, the syscalls it
    makes) per plain invoke's two journal commits as a lone daemon makes
    them at one invoke in flight: the RUNNING row, then the DONE row with
    its terminal bytes, each its own transaction."""
    journal = StoreJournal(store)
    done = _records(20_000_000, n)
    running = [msgspec.structs.replace(r, state=JournalState.RUNNING, terminal=None) for r in done]
    started = time.process_time()
    for i in range(n):
        journal.write([running[i]])
        journal.write([done[i]])
    return 1e6 * (time.process_time() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="operations per row (default 2000)")
    parser.add_argument("--url", default=None, help="a PostgreSQL database to use (else a private cluster)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    n = 50 if args.quick else args.n
    rows: list[tuple[str, dict[str, tuple[float, float]]]] = []
    cpu: list[tuple[str, float]] = []
    for durability in (Durability.PROCESS, Durability.POWER):
        tmp = tempfile.mkdtemp(prefix="ampcap-bench-store-")
        try:
            store = open_store(tmp, durability=durability)
            rows.append((f"SQLite ({durability.value})", measure(store, n)))
            cpu.append((f"SQLite ({durability.value})", invoke_commits_cpu_us(store, n)))
            store.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    cluster = None
    url = args.url
    if url is None:
        from pg import PostgresCluster, postgres_bin

        if postgres_bin() is not None:
            cluster = PostgresCluster.start(fsync=True)
            url = cluster.url(cluster.create_database())
    try:
        if url is not None:
            for durability in (Durability.PROCESS, Durability.POWER):
                store = open_store(url, durability=durability)
                store.query("DROP TABLE IF EXISTS invoke_journal")
                store.query("DELETE FROM schema_versions WHERE component = 'journal'")
                rows.append((f"PostgreSQL ({durability.value})", measure(store, n)))
                cpu.append((f"PostgreSQL ({durability.value})", invoke_commits_cpu_us(store, n)))
                store.close()
        else:
            print("PostgreSQL: not measured (no --url, no PostgreSQL binaries)")
    finally:
        if cluster is not None:
            cluster.stop()
    names = list(rows[0][1])
    print("journal operation latency, median / p99 µs, one connection" + (" (PostgreSQL on a unix socket, fsync on)"
                                                                          if cluster is not None else ""))
    print(f"{'':22}" + "".join(f" | {name:>20}" for name in names))
    for label, figures in rows:
        print(f"{label:22}" + "".join(f" | {figures[name][0]:8,.0f} / {figures[name][1]:8,.0f}" for name in names))
    print("CPU of a plain invoke's two commits (RUNNING, then DONE; the daemon at 1 in flight), µs in this "
          "process: " + ", ".join(f"{label} {us:,.0f}" for label, us in cpu))


if __name__ == "__main__":
    main()
