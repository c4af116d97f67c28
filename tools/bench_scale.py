"""Capacity of one identity on several workers (issue 33): invokes/s and the
daemon's CPU per invoke, for ``serve --workers 1`` and ``--workers 2`` on
SQLite, and on PostgreSQL (a private cluster started here, as the tests do),
all in one run.

The load is :mod:`loadgen`'s: N connections (default 64), each with its own
identity and pre-signed CAP_INVOKEs of the demo echo, one write per
message, one invoke in flight per connection; the client is split over
processes so that the daemon is what saturates. The daemon's CPU is read
from /proc for the serve process and its workers over the timed window.

    python tools/bench_scale.py [--seconds 5] [--connections 64] [--quick] [--no-postgres]

On a machine with fewer cores than workers + client processes, the client
and the workers share cores: the ratio "2 workers / 1 worker" is then
bounded by the cores, not by ampcap; the table prints the CPU each side used,
and the run starts by measuring what the machine itself gives two CPU-bound
processes against one (the ceiling for the ratio).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

import loadgen  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of_tree(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its children."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class Daemon:
    def __init__(self, home: Path, store: list[str], workers: int) -> None:
        env = dict(os.environ, XDG_CONFIG_HOME=str(home / "config"), PYTHONPATH=str(ROOT / "src"))
        self.log = open(home / f"serve-{time.monotonic_ns()}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen",
                                      "127.0.0.1:0", "--workers", str(workers), "--max-in-flight-per-connection",
                                      "64", *store], stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line:
            # The log lives in a directory removed on the way out: say what it says.
            self.proc.wait()
            self.log.close()
            said = Path(self.log.name).read_text(errors="replace").strip()[-2000:] or "(nothing on stderr)"
            raise SystemExit(f"serve did not start (exit status {self.proc.returncode}): {said}")
        self.url = line[0]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def measure(label: str, home: Path, store: list[str], workers: int, args: argparse.Namespace) -> dict[str, Any]:
    daemon = Daemon(home, store, workers)
    try:
        marks: dict[str, float] = {}

        def on_start() -> None:
            marks["cpu0"] = _cpu_of_tree(daemon.proc.pid)

        result = loadgen.run_processes(daemon.url, args.connections, args.seconds, args.client_processes,
                                       on_start=on_start, ready_s=3.0 if args.quick else 5.0)
        cpu = _cpu_of_tree(daemon.proc.pid) - marks["cpu0"]
    finally:
        daemon.stop()
    calls = max(1, result.calls)
    return {"label": label, "workers": workers, "rate": result.rate, "calls": result.calls,
            "errors": result.errors, "daemon_us": 1e6 * cpu / calls, "client_us": 1e6 * result.client_cpu_s / calls,
            "daemon_cores": cpu / max(1e-9, result.elapsed_s)}


def _sign_loop(seconds: float, out: Any) -> None:
    """Ed25519 signatures for ``seconds`` (wall): the ops done and the CPU used."""
    from nacl.signing import SigningKey

    key, message = SigningKey.generate(), b"x" * 300
    ops, cpu0 = 0, time.process_time()
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for _ in range(50):
            key.sign(message)
        ops += 50
    out.put((ops, time.process_time() - cpu0))


def machine_scaling(seconds: float) -> tuple[float, float]:
    """What this machine gives two CPU-bound processes against one: (ops/s
    ratio, CPU per op ratio). Two workers cannot beat it; on vCPUs that
    share a physical core, or a host that is busy, it is well under 2."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    rates, per_op = [], []
    for count in (1, 2):
        queue = context.Queue()
        procs = [context.Process(target=_sign_loop, args=(seconds, queue)) for _ in range(count)]
        for proc in procs:
            proc.start()
        done = [queue.get(timeout=seconds + 30) for _ in procs]
        for proc in procs:
            proc.join()
        ops = sum(d[0] for d in done)
        rates.append(ops / seconds)
        per_op.append(sum(d[1] for d in done) / ops)
    return rates[1] / rates[0], per_op[1] / per_op[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a short pass (the smoke test)")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL rows")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.connections = 1.0, 8
    scaling = machine_scaling(args.seconds)
    home = Path(tempfile.mkdtemp(prefix="ampcap-bench-scale-"))
    cluster = None
    rows = []
    try:
        rows.append(measure("SQLite, 1 worker", home, ["--state-dir", str(home / "s1")], 1, args))
        rows.append(measure("SQLite, 2 workers", home, ["--state-dir", str(home / "s2")], 2, args))
        if not args.no_postgres:
            from pg import PostgresCluster, postgres_bin

            if postgres_bin() is None:
                print("(PostgreSQL rows skipped: no PostgreSQL binaries here)")
            else:
                cluster = PostgresCluster.start()
                rows.append(measure("PostgreSQL, 1 worker", home, ["--state-url", cluster.url(
                    cluster.create_database())], 1, args))
                rows.append(measure("PostgreSQL, 2 workers", home, ["--state-url", cluster.url(
                    cluster.create_database())], 2, args))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"{args.connections} connections (one invoke in flight each), {args.seconds:g} s per row, "
          f"{args.client_processes} client processes, {os.cpu_count()} cores")
    print("store, workers | invokes/s | daemon CPU µs/invoke | daemon cores busy | client CPU µs/invoke | errors")
    for row in rows:
        print(f"{row['label']} | {row['rate']:,.0f} | {row['daemon_us']:,.0f} | {row['daemon_cores']:.2f} | "
              f"{row['client_us']:,.0f} | {row['errors']}")
    by = {row["label"]: row for row in rows}
    one, two = by["SQLite, 1 worker"], by["SQLite, 2 workers"]
    print(f"2 workers / 1 worker on SQLite: {two['rate'] / max(1.0, one['rate']):.2f}x capacity")
    print(f"this machine, 2 CPU-bound processes / 1 (Ed25519 signing, the ceiling for 2 workers): "
          f"{scaling[0]:.2f}x the work, {scaling[1]:.2f}x the CPU per signature")
    if "PostgreSQL, 1 worker" in by:
        pg = by["PostgreSQL, 1 worker"]
        print(f"PostgreSQL / SQLite daemon CPU per invoke (1 worker): {pg['daemon_us'] / max(1.0, one['daemon_us']):.2f}x")


if __name__ == "__main__":
    main()
