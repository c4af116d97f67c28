"""What does RFC 005 delegation cost a real daemon? ``tools/bench_delegation.py``
measures the protocol work alone (no sockets, no event loop); this runs
``ampcap serve --demo --state-dir none`` in its own process and a client
(this process, the Python API) that invokes ``org.ampcap.demo.echo:1.0.0``
for a few seconds per row, reading the daemon's CPU time from ``/proc``:

* ``plain``: no delegation;
* ``repeated``: the same depth-3 chain A → B → C → caller every time;
* ``first seen``: a different depth-3 chain for every call (fresh
  delegation ids; the chains are made before the row starts).

Rows alternate round by round at 1 and 64 in flight; the ratios printed at
the end are medians over rounds of each round's own ratio. The first-seen
extra is also given in Ed25519 verifications of a link, measured in this
process between rounds.

    python tools/bench_delegation_daemon.py [--seconds 3] [--rounds 3] [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import DemoDaemon, Result, cpu_seconds, run_workers, summarize, timed_rounds_args  # noqa: E402
from bench_delegation import chain, link_material, verifications_s  # noqa: E402

from ampcap.net.api.peer import connect  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

ECHO = "org.ampcap.demo.echo"
PARAMS = {"message": "x" * 160}


class Chains:
    """Depth-3 chains to ``caller``: the repeated one, or fresh ones made ahead."""

    def __init__(self, caller: str) -> None:
        self.ids = [Identity.generate(os.urandom) for _ in range(3)]
        self.caller = caller
        self.repeated = chain(self.ids, caller, "repeated")
        self._made = 0

    def fresh(self, count: int) -> Iterator[dict[str, Any]]:
        self._made += 1
        return iter([chain(self.ids, self.caller, f"fresh-{self._made}-{i}") for i in range(count)])


async def _run(url: str, caller: Identity, in_flight: int, seconds: float,
               delegations: Iterator[dict[str, Any] | None]) -> tuple[int, float, list[float]]:
    async with connect(url, identity=caller) as remote:
        async def call() -> None:
            await remote.invoke(ECHO, version="1.0.0", params=PARAMS, delegation=next(delegations))

        for _ in range(20):  # warm-up
            await call()
        return await run_workers(call, in_flight, seconds)


def measure(daemon: DemoDaemon, caller: Identity, name: str, in_flight: int, seconds: float,
            delegations: Iterator[dict[str, Any] | None]) -> Result:
    cpu0 = cpu_seconds(daemon.proc.pid)
    calls, elapsed, lat = trio.run(_run, daemon.url, caller, in_flight, seconds, delegations)
    return Result(name, in_flight, calls, elapsed, lat, cpu_seconds(daemon.proc.pid) - cpu0)


def _forever(value: Any) -> Iterator[Any]:
    while True:
        yield value


def main() -> None:
    args = timed_rounds_args(__doc__)
    caller = Identity.generate(os.urandom)
    chains = Chains(caller.did)
    # Enough fresh chains for a row at the fastest rate seen for plain calls, with room.
    per_row = max(500, int(6_000 * args.seconds))
    daemon = DemoDaemon("none", prefix="ampcap-bench-deleg-")
    ratios: dict[str, list[float]] = {key: [] for key in ("repeated 1", "repeated 64", "first 1", "first 64")}
    verifications: list[float] = []
    extra: dict[int, list[float]] = {1: [], 64: []}
    try:
        for round_no in range(args.rounds):
            rows: dict[tuple[str, int], Result] = {}
            for in_flight in (1, 64):
                for name, source in (("plain", _forever(None)), ("repeated", _forever(chains.repeated)),
                                     ("first seen", chains.fresh(per_row))):
                    rows[(name, in_flight)] = measure(daemon, caller, f"{name} (depth 3)" if name != "plain"
                                                      else "plain", in_flight, args.seconds, source)
            sample = [link_material(chain(chains.ids, caller.did, f"unit-{round_no}-{i}")) for i in range(64)]
            unit_us = verifications_s(sample) * 1e6 / (3 * len(sample))
            verifications.append(unit_us)
            print(f"round {round_no + 1}")
            print(summarize(list(rows.values())))
            for in_flight in (1, 64):
                plain = rows[("plain", in_flight)].cpu_us_per_call
                ratios[f"repeated {in_flight}"].append(rows[("repeated", in_flight)].cpu_us_per_call / plain)
                ratios[f"first {in_flight}"].append(rows[("first seen", in_flight)].cpu_us_per_call / plain)
                extra[in_flight].append((rows[("first seen", in_flight)].cpu_us_per_call - plain) / unit_us)
            print(f"one link's Ed25519 verification in this process: {unit_us:.1f} µs")
            print()
            time.sleep(0.2)
    finally:
        daemon.stop()
    print("daemon CPU per invoke, median of the rounds' ratios to a plain invoke:")
    for key, values in ratios.items():
        print(f"  {key + ' in flight':<24} {statistics.median(values):5.2f}x")
    for in_flight, values in extra.items():
        print(f"  first seen, {in_flight} in flight: {statistics.median(values):.2f} verifications over a plain invoke")


if __name__ == "__main__":
    main()
