"""Helpers shared by the benchmark scripts (not product code).

A benchmark server runs in its own process, prints ``READY <port>`` on
stdout, and serves until SIGTERM. The client side (this process) measures
throughput and latency; the server's CPU time is read from
``/proc/<pid>/stat`` (utime + stime) before and after each run, so every
server is measured the same way, whatever language runtime it uses.
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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

__all__ = ["Result", "ServerProcess", "DemoDaemon", "cpu_seconds", "summarize", "rss_kib", "run_workers",
           "timed_rounds_args"]

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@dataclass
class Result:
    name: str
    in_flight: int
    calls: int
    seconds: float
    latencies_us: list[float]
    server_cpu_s: float

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    def pct(self, q: float) -> float:
        data = sorted(self.latencies_us)
        return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")

    @property
    def cpu_us_per_call(self) -> float:
        return 1e6 * self.server_cpu_s / self.calls if self.calls else float("nan")

    def row(self) -> str:
        return (f"{self.name:<28} {self.in_flight:>3} {self.rate:>10,.0f} {self.pct(0.5):>9,.0f} "
                f"{self.pct(0.99):>9,.0f} {self.cpu_us_per_call:>9,.0f}")


HEADER = f"{'system':<28} {'inf':>3} {'calls/s':>10} {'p50 µs':>9} {'p99 µs':>9} {'srv µs/c':>9}"


def summarize(results: Sequence[Result]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    lines += [r.row() for r in results]
    return "\n".join(lines)


class ServerProcess:
    """``argv`` in a subprocess; waits for its ``READY <port>`` line."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) < 2 or line[0] != "READY":
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line}")
        self.port = int(line[1])
        self.extra = line[2:]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DemoDaemon:
    """``ampcap serve --demo`` in its own process, on a free port, with its
    own home (identity, config); ``state``: ``"none"`` or ``"dir"`` (a fresh
    state directory). ``url`` and ``did`` are what it printed."""

    def __init__(self, state: str = "none", *, prefix: str = "ampcap-bench-", extra: Sequence[str] = ()) -> None:
        self.home = tempfile.mkdtemp(prefix=prefix)
        state_dir = "none" if state == "none" else os.path.join(self.home, "state")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0",
             "--state-dir", state_dir, "--max-in-flight-per-connection", "256", *extra],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "XDG_CONFIG_HOME": self.home})
        assert self.proc.stdout is not None
        self.url, self.did = self.proc.stdout.readline().split()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.home, ignore_errors=True)


def timed_rounds_args(description: str | None, *, seconds: float = 3.0, rounds: int = 3,
                      quick_seconds: float = 0.5) -> argparse.Namespace:
    """The command line of a benchmark that times rows for a few seconds in
    alternating rounds: --seconds, --rounds, --quick (one short round)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=seconds, help=f"seconds per row (default {seconds:g})")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"alternating rounds (default {rounds})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short pass ({quick_seconds:g} s, 1 round), to check it runs")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = quick_seconds, 1
    return args


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def run_workers(call: Callable[[], Awaitable[object]], in_flight: int,
                      seconds: float) -> tuple[int, float, list[float]]:
    """``in_flight`` trio tasks each awaiting ``call()`` back to back until
    ``seconds`` have passed: (calls, elapsed s, latencies µs). Warm up first;
    this times from its own start."""
    import trio  # here, not at the top: the asyncio baselines load this module too

    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= deadline:
                return
            await call()
            latencies.append((time.perf_counter() - t0) * 1e6)

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    return len(latencies), time.perf_counter() - start, latencies
