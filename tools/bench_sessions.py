"""What do RFC 006 sessions and the durable journal cost? Measured against a
plain invoke in the same run.

Two daemons (``ampcap serve --demo`` in their own processes), one keeping its
state in memory (``--state-dir none``) and one in a fresh directory
(``--state-dir DIR``, durability ``process``: SQLite WAL, ``synchronous=NORMAL``);
a client (this process, the Python API) runs signed invokes of
``org.ampcap.demo.echo:1.0.0`` for a few seconds per row and reads the
daemon's CPU time from ``/proc``. Rounds alternate, so both sides see the
same machine; the ratios are medians over rounds.

* inside a session vs outside (in-memory daemon, 1 and 64 in flight):
  target ≤ 1.15× daemon CPU per invoke;
* ``--state-dir DIR`` vs ``none`` at 64 in flight (plain invokes):
  target ≤ 1.25× daemon CPU per invoke (the journal's writes are batched:
  one commit per event-loop tick for every invoke started or ended in it).

    python tools/bench_sessions.py [--seconds 3] [--rounds 3] [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import DemoDaemon, Result, cpu_seconds, run_workers, summarize, timed_rounds_args  # noqa: E402

from ampcap.net.api.peer import connect  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

ECHO = "org.ampcap.demo.echo"
PARAMS = {"message": "x" * 160}


async def _run(url: str, in_flight: int, seconds: float, in_session: bool) -> tuple[int, float, list[float]]:
    async with connect(url, identity=Identity.generate(os.urandom)) as remote:
        async def body(call: Any) -> tuple[int, float, list[float]]:
            for _ in range(20):  # warm-up
                await call()
            return await run_workers(call, in_flight, seconds)

        if in_session:
            async with remote.session() as s:
                return await body(lambda: s.invoke(ECHO, version="1.0.0", params=PARAMS))
        return await body(lambda: remote.invoke(ECHO, version="1.0.0", params=PARAMS))


def measure(daemon: DemoDaemon, name: str, in_flight: int, seconds: float, in_session: bool) -> Result:
    cpu0 = cpu_seconds(daemon.proc.pid)
    calls, elapsed, lat = trio.run(_run, daemon.url, in_flight, seconds, in_session)
    return Result(name, in_flight, calls, elapsed, lat, cpu_seconds(daemon.proc.pid) - cpu0)


def main() -> None:
    args = timed_rounds_args(__doc__)
    memory, durable = (DemoDaemon(state, prefix="ampcap-bench-sessions-") for state in ("none", "dir"))
    ratios: dict[str, list[float]] = {"session/plain 1": [], "session/plain 64": [], "state-dir/none 64": []}
    try:
        for round_no in range(args.rounds):
            rows = [
                measure(memory, "plain invoke (state none)", 1, args.seconds, False),
                measure(memory, "in a session (state none)", 1, args.seconds, True),
                measure(memory, "plain invoke (state none)", 64, args.seconds, False),
                measure(memory, "in a session (state none)", 64, args.seconds, True),
                measure(durable, "plain invoke (--state-dir)", 64, args.seconds, False),
            ]
            print(f"round {round_no + 1}")
            print(summarize(rows))
            ratios["session/plain 1"].append(rows[1].cpu_us_per_call / rows[0].cpu_us_per_call)
            ratios["session/plain 64"].append(rows[3].cpu_us_per_call / rows[2].cpu_us_per_call)
            ratios["state-dir/none 64"].append(rows[4].cpu_us_per_call / rows[2].cpu_us_per_call)
            print()
    finally:
        memory.stop()
        durable.stop()
    print("daemon CPU per invoke, median ratio over rounds:")
    targets = {"session/plain 1": 1.15, "session/plain 64": 1.15, "state-dir/none 64": 1.25}
    for key, values in ratios.items():
        ratio = statistics.median(values)
        print(f"  {key:<18} {ratio:5.2f}x  (target <= {targets[key]:.2f}x: {'met' if ratio <= targets[key] else 'MISSED'})")


if __name__ == "__main__":
    main()
