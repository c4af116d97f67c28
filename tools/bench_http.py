"""What do the HTTP and WebSocket bindings cost? Signed invokes over each, same run.

One ``ampcap serve --demo --http`` process; this process calls it with the
Python API over ``amp://`` (AMPS/TCP, the plain invoke), ``ws://`` (one
binary WebSocket message per AMP message) and ``http://`` (one POST per
invoke, the reply in the ``200`` body), with 1 and 64 calls in flight. Every
message is signed and verified on both sides. The baseline users would
otherwise pick for HTTP is the MCP SDK's streamable HTTP transport
(``tools/mcp_echo_baseline.py``: an ``MCPServer`` with one echo tool, the
SDK's defaults, called by the SDK's client), measured the same way.

Targets (issue 27): WebSocket throughput within 1.3x of AMPS (64 in flight);
HTTP throughput ahead of MCP streamable HTTP.

    python tools/bench_http.py [--seconds 3] [--rounds 1] [--quick] [--no-mcp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Result, ServerProcess, cpu_seconds, run_workers, summarize  # noqa: E402

from ampcap.net.api.peer import Remote, connect  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

CAPABILITY = "org.ampcap.demo.echo:1.0.0"
MESSAGE = "x" * 160  # a CAP_INVOKE of ~450 bytes once signed
PARAMS = {"message": MESSAGE}


class Daemon:
    """``ampcap serve --demo --http`` in a subprocess: its amp:// and http:// URLs."""

    def __init__(self) -> None:
        self.home = tempfile.mkdtemp(prefix="ampcap-bench-")
        argv = [sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0",
                "--http", "127.0.0.1:0", "--max-in-flight-per-connection", "256"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "XDG_CONFIG_HOME": self.home})
        assert self.proc.stdout is not None
        self.amp = self.proc.stdout.readline().split()[0]
        self.http = self.proc.stdout.readline().split()[0]
        self.ws = "ws" + self.http[len("http"):]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.home, ignore_errors=True)


async def _ampcap(url: str, in_flight: int, seconds: float) -> tuple[int, float, list[float]]:
    async with connect(url, identity=Identity.generate(os.urandom)) as remote:
        r: Remote = remote
        for _ in range(20):  # warm-up: imports, schema compilation, caches, HTTP connections
            await r.invoke(CAPABILITY, params=PARAMS)
        return await run_workers(lambda: r.invoke(CAPABILITY, params=PARAMS), in_flight, seconds)


async def _mcp(url: str, in_flight: int, seconds: float) -> tuple[int, float, list[float]]:
    with trio.fail_after(seconds + 60):  # the SDK client has been seen to stall; the table says so
        return await _mcp_calls(url, in_flight, seconds)


async def _mcp_calls(url: str, in_flight: int, seconds: float) -> tuple[int, float, list[float]]:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            for _ in range(20):
                await session.call_tool("echo", {"message": MESSAGE})

            async def call() -> None:
                result = await session.call_tool("echo", {"message": MESSAGE})
                assert not result.is_error

            return await run_workers(call, in_flight, seconds)


def measure(seconds: float, with_mcp: bool) -> list[Result]:
    results: list[Result] = []
    daemon = Daemon()
    try:
        for label, url in (("ampcap AMPS/TCP", daemon.amp), ("ampcap WebSocket", daemon.ws),
                           ("ampcap HTTP POST (200)", daemon.http)):
            for n in (1, 64):
                cpu0 = cpu_seconds(daemon.proc.pid)
                calls, elapsed, lat = trio.run(_ampcap, url, n, seconds)
                results.append(Result(label, n, calls, elapsed, lat, cpu_seconds(daemon.proc.pid) - cpu0))
    finally:
        daemon.stop()
    if with_mcp:
        with ServerProcess([sys.executable, str(Path(__file__).parent / "mcp_echo_baseline.py")]) as mcp:
            url = f"http://127.0.0.1:{mcp.port}/mcp"
            for n in (1, 64):
                cpu0 = cpu_seconds(mcp.pid)
                try:
                    calls, elapsed, lat = trio.run(_mcp, url, n, seconds)
                except trio.TooSlowError:
                    print(f"(MCP streamable HTTP, {n} in flight: the SDK client stalled; row left out)", flush=True)
                    continue
                results.append(Result("MCP streamable HTTP", n, calls, elapsed, lat, cpu_seconds(mcp.pid) - cpu0))
    return results


def report(results: list[Result]) -> None:
    print(summarize(results), flush=True)
    rate = {(r.name, r.in_flight): r.rate for r in results}
    amps, ws, http = rate[("ampcap AMPS/TCP", 64)], rate[("ampcap WebSocket", 64)], rate[("ampcap HTTP POST (200)", 64)]
    print(f"\nAMPS / WebSocket throughput, 64 in flight: {amps / ws:.2f}x (target ≤ 1.3)")
    print(f"AMPS / HTTP throughput, 64 in flight: {amps / http:.2f}x")
    mcp = rate.get(("MCP streamable HTTP", 64))
    if mcp is not None and ("MCP streamable HTTP", 1) in rate:
        print(f"HTTP / MCP streamable HTTP throughput, 64 in flight: {http / mcp:.2f}x (target > 1); "
              f"sequential: {rate[('ampcap HTTP POST (200)', 1)] / rate[('MCP streamable HTTP', 1)]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="per row (default 3)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole table")
    parser.add_argument("--no-mcp", action="store_true", help="skip the MCP baseline (needs the 'mcp' package)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (0.5 s rows)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 0.5
    with_mcp = not args.no_mcp
    if with_mcp:
        try:
            import mcp  # noqa: F401
        except ImportError:
            print("(mcp not installed: pip install 'ampcap[bench]' for the baseline; skipped)")
            with_mcp = False
    print(f"{CAPABILITY}, ~450-byte signed invokes, {args.seconds:g} s per row, loopback, "
          f"CPython {sys.version.split()[0]}")
    for i in range(args.rounds):
        if args.rounds > 1:
            print(f"\n=== round {i + 1} of {args.rounds}")
        report(measure(args.seconds, with_mcp))


if __name__ == "__main__":
    main()
