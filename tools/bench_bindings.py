"""What does an MCP binding cost? (issue 21)

The same tool of the same kind of MCP server (tools/mcp_bench_server.py,
the official SDK over stdio), called two ways in the same run:

* direct: this process's SDK ``ClientSession`` calls the tool;
* binding: this process invokes an AMP capability bound to that tool, on an
  ``ampcap serve --manifest`` daemon in its own process, which calls the
  tool over its one MCP session (signed AMP over loopback TCP, then MCP);
* plain: the same daemon answers a plain invoke (an inline Python sum), the
  AMP leg alone, so that binding ~ plain + direct shows where time goes.

Sequentially (one call of each path in turn, p50 latency) and with 16
calls in flight (throughput and p50, one path after the other), in rounds. Target: the binding adds at most 30 % to the
direct call's latency (sequential p50).

    python tools/bench_bindings.py [--seconds 2] [--rounds 3] [--quick]

Exit status 1 when the target is missed (always 0 with --quick).
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
from pathlib import Path

import trio

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_common import timed_rounds_args  # noqa: E402

SERVER = HERE / "mcp_bench_server.py"
CAPABILITY = "org.bench.add:1.0.0"
PLAIN = "org.bench.plain-add:1.0.0"  # the same sum in the daemon itself: a plain invoke
MANIFEST = f"""
[mcp_server.bench]
command = ["{sys.executable}", "{SERVER}"]

[[capability]]
id = "{CAPABILITY}"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}

[capability.binding.mcp]
server = "bench"
tool = "add"

[[capability]]
id = "{PLAIN}"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
binding = {{ python = "ampcap.caps.demo:add", inline = true }}
"""


async def measure(call: Callable[[int], Awaitable[object]], in_flight: int, seconds: float) -> tuple[float, float]:
    """(calls per second, p50 latency in µs) of ``call`` for ``seconds``."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    count = 0

    async def worker(w: int) -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await call(w)
            latencies.append((time.perf_counter() - start) * 1e6)
            count += 1

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for w in range(in_flight):
            nursery.start_soon(worker, w)
    return count / (time.perf_counter() - began), statistics.median(latencies)


def start_daemon(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    (tmp / "bench.toml").write_text(MANIFEST)
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--manifest", str(tmp / "bench.toml"),
                             "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line:
        raise SystemExit("ampcap serve did not start")
    return proc, line[0]


async def run(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ampcap.net.api.peer import connect

    tmp = Path(tempfile.mkdtemp(prefix="ampcap-bench-bindings-"))
    daemon, url = start_daemon(tmp)
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write), \
                ClientSession(read, write) as session, connect(url) as remote:
            await session.initialize()

            async def direct(i: int) -> object:
                result = await session.call_tool("add", {"a": i, "b": 1})
                assert result.structured_content == {"total": i + 1}
                return result

            async def binding(i: int) -> object:
                got = await remote.invoke(CAPABILITY, params={"a": i, "b": 1})
                assert got == {"total": i + 1}
                return got

            async def plain(i: int) -> object:
                got = await remote.invoke(PLAIN, params={"a": i, "b": 1})
                assert got == {"sum": i + 1}
                return got

            for warm in (direct, binding, plain):  # first calls: imports, the daemon's session start
                for i in range(20):
                    await warm(i)
            paths = (("direct", direct), ("binding", binding), ("plain", plain))
            for _ in range(args.rounds):
                # Sequential: one call of each path in turn, so that the
                # machine's load (other processes) weighs on all alike.
                times: dict[str, list[float]] = {name: [] for name, _ in paths}
                deadline = time.perf_counter() + args.seconds * len(paths)
                i = 0
                while time.perf_counter() < deadline:
                    for name, call in paths:
                        start = time.perf_counter()
                        await call(i)
                        times[name].append((time.perf_counter() - start) * 1e6)
                    i += 1
                for name, spent in times.items():
                    results.setdefault(f"{name} x1", []).append((1e6 / statistics.mean(spent),
                                                                 statistics.median(spent)))
                for name, call in paths:
                    results.setdefault(f"{name} x16", []).append(await measure(call, 16, args.seconds))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def main() -> None:
    args = timed_rounds_args(__doc__, seconds=2.0, quick_seconds=0.3)
    results = trio.run(run, args)
    print(f"MCP tool 'add' over stdio, {args.rounds} rounds x {args.seconds:g} s, medians of the rounds")
    print(f"{'path':<14}{'calls/s':>10}{'p50 µs':>10}")
    summary = {}
    for key, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        p50 = statistics.median(p for _, p in runs)
        summary[key] = (rate, p50)
        print(f"{key:<14}{rate:>10.0f}{p50:>10.0f}")
    for n in (1, 16):
        d_rate, d_p50 = summary[f"direct x{n}"]
        b_rate, b_p50 = summary[f"binding x{n}"]
        print(f"binding / direct, {n} in flight: latency {b_p50 / d_p50:.2f}x ({100 * (b_p50 / d_p50 - 1):+.0f} %), "
              f"throughput {b_rate / d_rate:.2f}x")
    plain, direct, bound = (summary[f"{k} x1"][1] for k in ("plain", "direct", "binding"))
    print(f"sequential: binding - direct = {bound - direct:.0f} µs, a plain invoke = {plain:.0f} µs; "
          f"the binding's own share (binding - direct - plain) = {bound - direct - plain:.0f} µs")
    overhead = summary["binding x1"][1] / summary["direct x1"][1] - 1
    ok = overhead <= 0.30
    print(f"target: the binding adds <= 30 % to the direct call's latency (sequential p50): "
          f"{'met' if ok else 'MISSED'} ({100 * overhead:+.0f} %)")
    if not ok and not args.quick:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
