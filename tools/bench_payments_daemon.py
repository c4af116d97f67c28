"""What does an RFC 007 payment cost a real daemon? (issue 37)

``tools/bench_payments.py`` measures the payee's protocol work alone; this
runs ``ampcap serve --demo --payments --state-dir DIR`` (SQLite WAL, the
default kind of store) in its own process and clients in this one (the
Python API, one connection and one payer identity per worker), reading the
daemon's CPU time from ``/proc``, per invoke:

* ``plain``: ``org.ampcap.demo.echo:1.0.0``, the baseline;
* ``payment op``: one payment, quote → authorize → capture (three
  invokes of the workflow; the figure is per invoke);
* ``status``: ``status_query`` of a settled payment;
* ``paid call``: ``org.ampcap.demo.paid_echo:1.0.0`` with a captured
  payment in ``$payment`` (checked and spent before it runs; the payments
  are bought before the row starts).

Rows alternate round by round at 1 and 16 in flight; the ratios at the end
are medians over rounds of each round's own ratio to ``plain``.

    python tools/bench_payments_daemon.py [--seconds 3] [--rounds 3] [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import DemoDaemon, Result, cpu_seconds, summarize, timed_rounds_args  # noqa: E402

from ampcap.net.api.payments import Payer  # noqa: E402
from ampcap.net.api.peer import connect  # noqa: E402
from ampcap.pay.money import Money  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

ECHO = "org.ampcap.demo.echo:1.0.0"
PAID = "org.ampcap.demo.paid_echo:1.0.0"
PRICE = Money(500, "USD", "ampcap-local-ledger")
ONE = Money(1, "USD", "ampcap-local-ledger")
PARAMS = {"message": "x" * 160}
MAX_PAID_PER_PAYER = 190  # the demo credits 1000.00 USD per payer: 200 calls at 5.00


async def _rows(url: str, payers: list[Identity], name: str, seconds: float,
                pools: list[list[bytes]] | None) -> tuple[int, float, list[float]]:
    """Each payer a worker on its own connection; ``calls`` counts invokes."""
    latencies: list[float] = []
    invokes = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def worker(identity: Identity, pool: list[bytes] | None) -> None:
        nonlocal invokes
        async with connect(url, identity=identity) as remote:
            payer = Payer(remote)
            settled = (await payer.pay(ONE))[0].payment_id if name == "status" else b""
            while (t0 := time.perf_counter()) < deadline:
                if name == "plain":
                    await remote.invoke(ECHO, params=PARAMS)
                    done = 1
                elif name == "payment op":
                    await payer.pay(ONE)
                    done = 3
                elif name == "status":
                    await payer.status(settled)
                    done = 1
                else:
                    assert pool is not None
                    if not pool:
                        return
                    await remote.invoke(PAID, params={**PARAMS, "$payment": pool.pop()})
                    done = 1
                invokes += done
                latencies.append((time.perf_counter() - t0) * 1e6 / done)

    async with trio.open_nursery() as nursery:
        for i, identity in enumerate(payers):
            nursery.start_soon(worker, identity, pools[i] if pools is not None else None)
    return invokes, time.perf_counter() - start, latencies


async def _buy(url: str, payers: list[Identity], count: int) -> list[list[bytes]]:
    pools: list[list[bytes]] = [[] for _ in payers]

    async def buy(i: int) -> None:
        async with connect(url, identity=payers[i]) as remote:
            payer = Payer(remote)
            for _ in range(count):
                pools[i].append((await payer.pay(PRICE, service_ref=PAID))[0].payment_id)

    async with trio.open_nursery() as nursery:
        for i in range(len(payers)):
            nursery.start_soon(buy, i)
    return pools


def measure(daemon: DemoDaemon, name: str, in_flight: int, seconds: float, per_payer: int) -> Result:
    payers = [Identity.generate(os.urandom) for _ in range(in_flight)]
    pools = trio.run(_buy, daemon.url, payers, per_payer) if name == "paid call" else None
    trio.run(_rows, daemon.url, payers, name, 0.3, None if pools is None else [p[:5] for p in pools])  # warm-up
    if pools is not None:
        pools = [p[5:] for p in pools]
    cpu0 = cpu_seconds(daemon.proc.pid)
    calls, elapsed, lat = trio.run(_rows, daemon.url, payers, name, seconds, pools)
    return Result(name, in_flight, calls, elapsed, lat, cpu_seconds(daemon.proc.pid) - cpu0)


def main() -> None:
    args = timed_rounds_args(__doc__)
    per_payer = 40 if args.quick else MAX_PAID_PER_PAYER
    daemon = DemoDaemon("dir", prefix="ampcap-bench-pay-", extra=("--payments",))
    names = ("plain", "payment op", "status", "paid call")
    ratios: dict[str, list[float]] = {f"{n} {f}": [] for n in names[1:] for f in (1, 16)}
    try:
        for round_no in range(args.rounds):
            rows = {(n, f): measure(daemon, n, f, args.seconds, per_payer) for f in (1, 16) for n in names}
            print(f"round {round_no + 1}")
            print(summarize(list(rows.values())))
            for f in (1, 16):
                plain = rows[("plain", f)].cpu_us_per_call
                for n in names[1:]:
                    ratios[f"{n} {f}"].append(rows[(n, f)].cpu_us_per_call / plain)
            print()
    finally:
        daemon.stop()
    print("daemon CPU per invoke, median of the rounds' ratios to a plain invoke:")
    for key, values in ratios.items():
        print(f"  {key + ' in flight':<26} {statistics.median(values):5.2f}x")


if __name__ == "__main__":
    main()
