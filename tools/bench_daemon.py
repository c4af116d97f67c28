"""How fast is ampcap? Signed invokes against ``ampcap serve --demo``.

Client (this process, the Python API) and daemon (``ampcap serve`` in its
own process) on loopback; every message is signed and verified on both
sides. Measured in the same run, side by side:

* ampcap: invokes/s with 1 and with 64 in flight, p50/p99 latency, and the
  daemon's CPU time per invoke (``/proc/<pid>/stat`` of the daemon);
* the trio echo ceiling (``tools/echo_baseline.py``), same frame size;
* the grpcio baseline (``tools/grpc_baseline.py``), ~200-byte params;
* the daemon's memory per idle connection (RSS delta over N connections);
* the unbatched shape (``tools/loadgen.py``): N independent connections
  (1, 16, 64), each writing every signed invoke on its own with one in
  flight, against ``serve --demo --state-dir none``: the daemon's CPU per
  invoke in units of one Ed25519 sign + verify measured in the same round
  (issue 34: ≤ 2.0× at 64 connections, ≤ 3.0× at 1).

Targets (issue 5): 64-in-flight throughput ≥ 1.5× grpcio, sequential p50
≤ 0.5× grpcio, daemon CPU ≤ 150 µs per invoke, ≤ 64 KiB per idle connection.

    python tools/bench_daemon.py [--seconds 3] [--rounds 3] [--capability org.ampcap.demo.echo:1.0.0]
    python tools/bench_daemon.py --only ampcap --profile /tmp/daemon.prof   # cProfile the daemon
    python tools/bench_daemon.py --shape unbatched --rounds 3   # only the unbatched load
    python tools/bench_daemon.py --shape durability --rounds 3  # the journal's cost (issue 34, item 2)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
import loadgen  # noqa: E402
from bench_common import DemoDaemon, Result, cpu_seconds, rss_kib, summarize  # noqa: E402

from ampcap.net.api.peer import Remote, connect  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

PARAMS = {"message": "x" * 160}  # a CAP_INVOKE of ~450 bytes once signed


class Daemon:
    """``ampcap serve --demo`` in a subprocess (optionally under cProfile)."""

    def __init__(self, profile: str | None) -> None:
        self.home = tempfile.mkdtemp(prefix="ampcap-bench-")
        serve = ["-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0",
                 "--max-in-flight-per-connection", "256"]
        argv = [sys.executable, *serve]
        if profile:  # the CLI under cProfile; SIGTERM drains, main() returns, the profile is written
            code = "import cProfile, sys; from ampcap.cli.main import main; cProfile.run('main(sys.argv[2:])', sys.argv[1])"
            argv = [sys.executable, "-c", code, profile, *serve[2:]]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "XDG_CONFIG_HOME": self.home})
        assert self.proc.stdout is not None
        self.url, self.did = self.proc.stdout.readline().split()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.home, ignore_errors=True)  # the daemon's generated identity


def flood_main(doc: str, flood: Callable[..., Awaitable[None]], *, connections: int, connections_help: str,
               seconds: float, seconds_help: str) -> None:
    """The command line of the flood_* tools: parse ``--connections`` and
    ``--seconds``, then ``trio.run(flood, url, pid, connections, seconds)``
    against ``ampcap serve --demo`` in its own process, stopped afterwards."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=connections, help=connections_help)
    parser.add_argument("--seconds", type=float, default=seconds, help=seconds_help)
    args = parser.parse_args()
    if args.connections < 1 or args.seconds <= 0:
        parser.error("--connections and --seconds must be positive")
    daemon = Daemon(profile=None)
    try:
        trio.run(flood, daemon.url, daemon.proc.pid, args.connections, args.seconds)
    finally:
        daemon.stop()


async def _invokes(url: str, in_flight: int, seconds: float, capability: str
                   ) -> tuple[int, float, list[float], float]:
    """(calls, elapsed s, latencies µs, this client process's CPU s)."""
    latencies: list[float] = []
    async with connect(url, identity=Identity.generate(os.urandom)) as remote:
        for _ in range(20):  # warm-up: imports, schema compilation, caches
            await remote.invoke(capability, params=PARAMS)
        start = time.perf_counter()
        cpu_start = time.process_time()
        deadline = start + seconds

        async def worker(r: Remote) -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    return
                await r.invoke(capability, params=PARAMS)
                latencies.append((time.perf_counter() - t0) * 1e6)

        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker, remote)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    return len(latencies), elapsed, latencies, cpu


async def _idle_connections(url: str, count: int, pid: int) -> float:
    from ampcap.net.transport.stream import ConnectionDriver, open_stream
    from ampcap.net.transport.url import parse_url
    from ampcap.peer.connection import Connection, Role
    from ampcap.peer.events import Negotiated
    from ampcap.wire.identity import DidKeyResolver
    from ampcap.wire.receive import ReceivePipeline

    before = rss_kib(pid)
    ident = Identity.generate(os.urandom)
    pipeline = ReceivePipeline(DidKeyResolver())
    opened = 0
    all_open, release = trio.Event(), trio.Event()

    async def one() -> None:
        nonlocal opened
        ready = trio.Event()

        async def on_event(event: object) -> None:
            if isinstance(event, Negotiated):
                ready.set()

        conn = Connection(role=Role.CLIENT, identity=ident, pipeline=pipeline, entropy=os.urandom)
        driver = ConnectionDriver(conn, await open_stream(parse_url(url)), on_event=on_event)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver.run)
            await ready.wait()
            opened += 1
            if opened == count:
                all_open.set()
            await release.wait()
            driver.close()

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
        await all_open.wait()
        await trio.sleep(0.5)
        during = rss_kib(pid)
        release.set()
    return (during - before) / count


def run_ampcap(seconds: float, capability: str, profile: str | None, idle: int
               ) -> tuple[list[Result], list[float], float]:
    """Both rows, the client's CPU µs per call for each, and KiB per idle connection."""
    daemon = Daemon(profile)
    results, client_us = [], []
    try:
        for n in (1, 64):
            cpu0 = cpu_seconds(daemon.proc.pid)
            calls, elapsed, lat, client_cpu = trio.run(_invokes, daemon.url, n, seconds, capability)
            results.append(Result("ampcap signed CAP_INVOKE", n, calls, elapsed, lat,
                                  cpu_seconds(daemon.proc.pid) - cpu0))
            client_us.append(1e6 * client_cpu / calls if calls else float("nan"))
        per_conn = trio.run(_idle_connections, daemon.url, idle, daemon.proc.pid) if idle else float("nan")
    finally:
        daemon.stop()
    return results, client_us, per_conn


def crypto_floor_us(rounds: int = 2000) -> float:
    """Median µs of one Ed25519 sign plus one verify of a ~450-byte Sig_Input
    here, now: the part of a daemon's per-invoke CPU no code of ours can
    remove. The issue's 150 µs target was set where this cost ≈ 63 µs."""
    ident = Identity.generate(os.urandom)
    message = os.urandom(450)
    key = ident.public_key
    from ampcap.wire.signing import verify_signature

    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sig = ident.sign(message)
        verify_signature(key, message, sig)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


UNBATCHED_CONNECTIONS = (1, 16, 64)
UNBATCHED_TARGETS = {1: 3.0, 64: 2.0}  # issue 34: daemon CPU per invoke in Ed25519 units


def run_unbatched(seconds: float, connections: tuple[int, ...] = UNBATCHED_CONNECTIONS, processes: int = 1,
                  state: str = "none", extra: tuple[str, ...] = (), label: str | None = None,
                  peak_rss: list[float] | None = None) -> list[Result]:
    """The unbatched load (``tools/loadgen.py``) against a fresh ``serve --demo``
    (``state``: "none" or "dir", ``extra``: more serve options): one row per
    connection count, the daemon's CPU from /proc over the timed run only
    (sessions opened, invokes pre-signed and warmed up before). ``peak_rss``
    gets the daemon's peak RSS in MiB at the end."""
    daemon = DemoDaemon(state, prefix="ampcap-bench-unbatched-", extra=extra)
    label = label or f"ampcap unbatched ({state})"
    rows = []
    try:
        for n in connections:
            cpu = [0.0]
            if processes > 1 and n > 1:
                res = loadgen.run_processes(daemon.url, n, seconds, min(processes, n),
                                            on_start=lambda: cpu.__setitem__(0, cpu_seconds(daemon.proc.pid)))
                used = cpu_seconds(daemon.proc.pid) - cpu[0]  # the sessions' closing is in it: a few ms
            else:
                res, used = trio.run(_unbatched_once, daemon, n, seconds)
            rows.append(Result(label, n, res.calls, res.elapsed_s, res.latencies_us, used))
            if res.errors:
                print(f"warning: {res.errors} ERROR replies at {n} connections")
        if peak_rss is not None:
            peak_rss.append(_peak_rss_mib(daemon.proc.pid))
    finally:
        daemon.stop()
    return rows


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# The journal's cost (issue 34, item 2): the same unbatched load against
# --state-dir none, the default journal (--durability process) and
# --durability power, each daemon fresh, in this order in every round.
DURABILITY_ROWS = (("none", "none", ()), ("journal", "dir", ()),
                   ("journal, power", "dir", ("--durability", "power")))
DURABILITY_CONNECTIONS = (1, 64)
DURABILITY_TARGET = 1.10  # daemon CPU and p50, journal / none, at 1 and at 64 in flight


@dataclass
class DurabilityRound:
    rows: dict[str, list[Result]]
    rss_mib: dict[str, float]

    def ratios(self, name: str) -> dict[int, tuple[float, float]]:
        """Per connection count: (CPU, p50) of row ``name`` over the none row."""
        base = {row.in_flight: row for row in self.rows["none"]}
        return {row.in_flight: (row.cpu_us_per_call / base[row.in_flight].cpu_us_per_call,
                                row.pct(0.5) / base[row.in_flight].pct(0.5)) for row in self.rows[name]}


def measure_durability(args: argparse.Namespace) -> DurabilityRound:
    rows, rss = {}, {}
    for name, state, extra in DURABILITY_ROWS:
        peak: list[float] = []
        rows[name] = run_unbatched(args.seconds, DURABILITY_CONNECTIONS, 1, state, extra,
                                   label=f"ampcap unbatched ({name})", peak_rss=peak)
        rss[name] = peak[0] if peak else float("nan")
    return DurabilityRound(rows, rss)


def report_durability(r: DurabilityRound) -> None:
    print(summarize([row for name, _, _ in DURABILITY_ROWS for row in r.rows[name]]))
    for name, _, _ in DURABILITY_ROWS[1:]:
        print(f"{name} / none: " + ", ".join(
            f"{cpu:.2f}× CPU and {p50:.2f}× p50 at {n} in flight" for n, (cpu, p50) in r.ratios(name).items())
            + f"   target ≤ {DURABILITY_TARGET:.2f}× (default journal)")
    print("daemon peak RSS: " + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in r.rss_mib.items()))


async def _unbatched_once(daemon: DemoDaemon, connections: int, seconds: float
                          ) -> tuple[loadgen.LoadResult, float]:
    """(result, the daemon's CPU seconds during the timed run)."""
    prepared = await loadgen.prepare(daemon.url, connections, loadgen.pool_size(connections, seconds))
    try:
        await loadgen.warm_up(prepared)
        cpu0 = cpu_seconds(daemon.proc.pid)
        res = await loadgen.run_load(prepared, seconds)
        return res, cpu_seconds(daemon.proc.pid) - cpu0
    finally:
        await prepared.aclose()


ISSUE_CRYPTO_US = 63.0  # sign + verify where the issue's targets were measured
CPU_TARGET_US = 150.0


@dataclass
class Round:
    """One pass over every system, back to back."""

    ours: list[Result]
    client_us: list[float]  # the client's CPU µs per call, 1 and 64 in flight
    per_conn_kib: float
    echo: list[Result] | None
    grpc: list[Result] | None
    floor_us: float  # Ed25519 sign + verify, measured right after
    unbatched: list[Result] | None = None

    @property
    def ratios(self) -> dict[str, float]:
        out = {}
        for row in self.unbatched or ():
            out[f"unbatched_{row.in_flight}"] = row.cpu_us_per_call / self.floor_us
        if not self.ours:
            return out
        seq, par = self.ours
        out["cpu_vs_crypto"] = par.cpu_us_per_call / self.floor_us
        if self.grpc:
            g1, g64 = self.grpc
            out["throughput_vs_grpc"] = par.rate / g64.rate
            out["p50_vs_grpc"] = seq.pct(0.5) / g1.pct(0.5)
        return out


def measure_round(args: argparse.Namespace) -> Round:
    unbatched = None
    if args.shape in ("unbatched", "both"):
        unbatched = run_unbatched(args.seconds, args.connections, args.processes)
    if args.shape == "unbatched":
        return Round([], [], float("nan"), None, None, crypto_floor_us(), unbatched)
    ours, client_us, per_conn = run_ampcap(args.seconds, args.capability, args.profile, args.idle_connections)
    echo = grpc = None
    if args.only == "all":
        import echo_baseline

        echo = echo_baseline.run(seconds=args.seconds)
        try:
            import grpc_baseline

            grpc = grpc_baseline.run(seconds=args.seconds)
        except ImportError:
            print("grpcio not installed: pip install 'ampcap[bench]' for the baseline", file=sys.stderr)
    return Round(ours, client_us, per_conn, echo, grpc, crypto_floor_us(), unbatched)


def report_round(r: Round, args: argparse.Namespace) -> None:
    print(summarize([*r.ours, *(r.unbatched or ()), *(r.echo or ()), *(r.grpc or ())]))
    floor = r.floor_us
    if r.unbatched:
        print()
        print(f"Ed25519 sign+verify here: {floor:.0f} µs")
        print("unbatched (one write per message, 1 in flight per connection), daemon CPU per invoke: " + ", ".join(
            f"{row.cpu_us_per_call:,.0f} µs = {row.cpu_us_per_call / floor:.2f}× Ed25519 at {row.in_flight}"
            + (f" (target ≤ {UNBATCHED_TARGETS[row.in_flight]:.1f}×)" if row.in_flight in UNBATCHED_TARGETS else "")
            for row in r.unbatched))
    if not r.ours:
        return
    seq, par = r.ours
    scaled = CPU_TARGET_US * floor / ISSUE_CRYPTO_US
    print()
    print(f"Ed25519 sign+verify here: {floor:.0f} µs (issue's machine: {ISSUE_CRYPTO_US:.0f} µs), "
          f"so the 150 µs CPU target scales to {scaled:.0f} µs")
    print(f"daemon CPU per invoke: {seq.cpu_us_per_call:,.0f} µs (1 in flight), "
          f"{par.cpu_us_per_call:,.0f} µs (64 in flight)   target ≤ 150 (scaled ≤ {scaled:.0f}); "
          f"64 in flight = {par.cpu_us_per_call / floor:.1f}× the crypto floor (target ≤ "
          f"{CPU_TARGET_US / ISSUE_CRYPTO_US:.1f}×)")
    print(f"client (Python API) CPU per invoke: {r.client_us[0]:,.0f} µs (1 in flight), {r.client_us[1]:,.0f} µs (64)")
    print(f"daemon memory per idle connection: {r.per_conn_kib:.1f} KiB ({args.idle_connections} connections)"
          "   target ≤ 64")
    if r.grpc:
        g1, g64 = r.grpc
        print(f"64 in flight: ampcap/grpcio throughput = {par.rate / g64.rate:.2f}×   target ≥ 1.5")
        print(f"sequential:   ampcap/grpcio p50 latency = {seq.pct(0.5) / g1.pct(0.5):.2f}×   target ≤ 0.5")
        if r.echo:
            # What the targets leave for everything but Ed25519, on this machine
            # in this run. Each side of an invoke signs one message and verifies one.
            e1 = r.echo[0]
            budget = 1e6 / (1.5 * g64.rate)  # CPU µs per call in each process (one core each) for 1.5× grpcio
            print(f"budget at 64 in flight: 1.5× grpcio means ≤ {budget:,.0f} µs of CPU per call in each process; "
                  f"Ed25519 takes {floor:.0f}, leaving {budget - floor:,.0f} µs for all else "
                  f"(ampcap spends {par.cpu_us_per_call - floor:,.0f} in the daemon, "
                  f"{r.client_us[1] - floor:,.0f} in the client)")
            print(f"budget sequential: 0.5× grpcio p50 = {0.5 * g1.pct(0.5):,.0f} µs; two signs, two verifies and "
                  f"a bare trio round trip alone take {2 * floor + e1.pct(0.5):,.0f} µs")
    if r.echo:
        e1, e64 = r.echo
        print(f"vs trio echo ceiling: {seq.rate / e1.rate:.2f}× (1 in flight), {par.rate / e64.rate:.2f}× (64)")


_TARGETS = {"unbatched_1": ("unbatched, 1 connection: daemon CPU / Ed25519", "≤ 3.0"),
            "unbatched_16": ("unbatched, 16 connections: daemon CPU / Ed25519", "-"),
            "unbatched_64": ("unbatched, 64 connections: daemon CPU / Ed25519", "≤ 2.0"),
            "cpu_vs_crypto": ("daemon CPU / Ed25519 floor, 64 in flight", "≤ 2.4"),
            "throughput_vs_grpc": ("ampcap/grpcio throughput, 64 in flight", "≥ 1.5"),
            "p50_vs_grpc": ("ampcap/grpcio p50 latency, sequential", "≤ 0.5")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="passes over every system; with more than one, each ratio's median and range "
                             "across rounds is printed at the end (this machine drifts by tens of percent)")
    parser.add_argument("--capability", default="org.ampcap.demo.echo:1.0.0")
    parser.add_argument("--only", choices=("ampcap", "all"), default="all",
                        help="the batched rows of ampcap only, or with the echo and grpcio baselines")
    parser.add_argument("--shape", choices=("batched", "unbatched", "both", "durability"), default="both",
                        help="ampcap's own batching client, the unbatched load (tools/loadgen.py), or both; "
                             "durability: the unbatched load at 1 and 64 connections against --state-dir none, "
                             "the default journal and --durability power (the journal's cost)")
    parser.add_argument("--connections", type=lambda t: tuple(int(x) for x in t.split(",")),
                        default=UNBATCHED_CONNECTIONS, help="unbatched: connection counts (default 1,16,64)")
    parser.add_argument("--processes", type=int, default=1,
                        help="unbatched: client processes to spread the connections over (default 1)")
    parser.add_argument("--idle-connections", type=int, default=500, help="for the memory figure (0 = skip)")
    parser.add_argument("--profile", default=None, metavar="FILE", help="cProfile the daemon into FILE")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (0.5 s rows, 20 idle connections)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.quick:
        args.seconds, args.idle_connections = 0.5, min(args.idle_connections, 20)
        if args.connections == UNBATCHED_CONNECTIONS:
            args.connections = (1, 16)

    print(f"capability {args.capability}, {args.seconds:.0f} s per row, loopback, CPython {sys.version.split()[0]}")
    if args.shape == "durability":
        durability_main(args)
        return
    rounds = []
    for i in range(args.rounds):
        if args.rounds > 1:
            print(f"\n=== round {i + 1} of {args.rounds}")
        rounds.append(measure_round(args))
        report_round(rounds[-1], args)
    if args.rounds > 1:
        print(f"\n=== across {args.rounds} rounds: median (min – max)")
        for key, (label, target) in _TARGETS.items():
            values = sorted(r.ratios[key] for r in rounds if key in r.ratios)
            if values:
                print(f"{label}: {statistics.median(values):.2f}× ({values[0]:.2f} – {values[-1]:.2f})"
                      f"   target {target}")



def durability_main(args: argparse.Namespace) -> None:
    rounds = []
    for i in range(args.rounds):
        if args.rounds > 1:
            print(f"\n=== round {i + 1} of {args.rounds}")
        rounds.append(measure_durability(args))
        report_durability(rounds[-1])
    if args.rounds > 1:
        print(f"\n=== across {args.rounds} rounds: median (min – max), over --state-dir none")
        for name, _, _ in DURABILITY_ROWS[1:]:
            for n in DURABILITY_CONNECTIONS:
                for what, index in (("CPU", 0), ("p50", 1)):
                    values = sorted(r.ratios(name)[n][index] for r in rounds)
                    print(f"{name}, {n} in flight, {what}: {statistics.median(values):.2f}× "
                          f"({values[0]:.2f} – {values[-1]:.2f})")


if __name__ == "__main__":
    main()
