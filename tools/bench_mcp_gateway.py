"""What does the MCP gateway add to a call? tools/call through it against
the same CAP_INVOKE through the Python API, measured in the same run.

One ``ampcap serve --demo`` process is the peer. This process calls its
``org.ampcap.demo.echo`` three ways, in alternating blocks so that the
machine's noise falls on all three alike:

- ``python api``: ``Remote.invoke`` on an open connection (the baseline);
- ``gateway, in process``: the MCP SDK's ``ClientSession`` over its
  in-memory transport to :func:`ampcap.mcp.gateway` running in this process
  (the gateway's own work plus the SDK's JSON-RPC, both sides);
- ``gateway, stdio``: ``ampcap mcp URL`` as a subprocess, the way a host
  runs it (adds the pipe and the second process's scheduling);
- ``bare SDK server``: for scale, the SDK's low-level server with a
  tools/call handler that only forwards the invoke and answers an empty
  text, over the same in-memory transport: what MCP through this SDK costs
  before the gateway does anything (no schema check, no mapping);
- ``bare SDK server, stdio``: the same bare server as a subprocess, served
  on its stdin/stdout the way ``ampcap mcp`` serves (this file run with
  ``--bare-stdio URL``): the floor for stdio.

Each call is sequential (one in flight), so p50 is a round-trip latency.
The target (issue 22) is that the gateway adds at most 0.5 ms to the p50.

Fairness: every way is warmed up first, calls the same tool with the same
params, and the ways take turns in blocks so that the machine's noise falls
on all alike. The whole measurement is repeated ``--runs`` times (fresh
sessions, same peer); the table gives the median of the runs' p50s and
their range. On a busy machine wall time is mostly other processes'
scheduling, so the CPU time each call costs is shown too: ``cpu here`` is
this process's (client side, and in process also the gateway), ``cpu
server`` the stdio server subprocess's (Linux: read from /proc). With
one call in flight, a call's wall time is about the sum of the CPU time of
every process it passes through.

    python tools/bench_mcp_gateway.py [--calls 600] [--block 50] [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from ampcap.net.api.peer import Peer
from ampcap.wire.identity import Identity

TOOL = "org.ampcap.demo.echo"
PARAMS = {"message": "hello"}


def _start_peer(tmp: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, XDG_CONFIG_HOME=tmp)
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[0]


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` used so far, or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child_pids() -> set[int]:
    """This process's children (Linux; empty elsewhere)."""
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _bare_server(remote: Any) -> Any:
    """The SDK's low-level server with one tool that only forwards the invoke
    (no schema check, no mapping, an empty text as the result)."""
    import mcp.types as types
    from mcp.server.lowlevel import Server

    async def bare_list(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=TOOL, input_schema={"type": "object"})])

    async def bare_call(ctx: Any, params: Any) -> types.CallToolResult:
        await remote.invoke(f"{TOOL}:2.0.0", params=params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text="")])

    bare = Server("bare", on_list_tools=bare_list, on_call_tool=bare_call)
    bare.middleware = []  # as the gateway does: no OpenTelemetry span per request
    return bare


async def _serve_bare_stdio(url: str) -> None:
    from ampcap.mcp.gateway_serve import serve_stdio

    async with Peer(Identity.generate(os.urandom)).connect(url) as remote:
        await serve_stdio(_bare_server(remote))  # the same stdio transport as `ampcap mcp`


Run = dict[str, tuple[list[float], float, float | None]]  # way -> (wall ms per call, cpu here ms, cpu server ms)


async def _measure(calls: int, block: int, url: str, tmp: str) -> Run:
    from mcp import ClientSession
    from mcp.client._memory import InMemoryTransport
    from mcp.client.stdio import StdioServerParameters, stdio_client

    import ampcap.mcp

    identity = Identity.generate(os.urandom)
    env = {"XDG_CONFIG_HOME": os.path.join(tmp, "gateway"),  # a caller of its own, not the peer's identity
           # the stdio servers run this tree's ampcap, not whichever one is installed
           "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "ampcap.cli.main", "mcp", "--tool-names",
                                                                 "dotted", url], env=env)
    bare_params = StdioServerParameters(command=sys.executable, args=[__file__, "--bare-stdio", url], env=env)
    async with AsyncExitStack() as stack:
        remote = await stack.enter_async_context(Peer(identity).connect(url))
        bare = _bare_server(remote)
        gateway = await stack.enter_async_context(ampcap.mcp.gateway(url, identity=identity, underscore=False))
        devnull = stack.enter_context(open(os.devnull, "w"))
        sessions: dict[str, ClientSession] = {}
        server_pids: dict[str, int] = {}  # the stdio servers' processes
        for name, transport in (("gateway, in process", InMemoryTransport(gateway)),
                                ("gateway, stdio", stdio_client(params, errlog=devnull)),
                                ("bare SDK server", InMemoryTransport(bare)),
                                ("bare SDK server, stdio", stdio_client(bare_params, errlog=devnull))):
            before = _child_pids()
            read, write = await stack.enter_async_context(transport)
            spawned = _child_pids() - before
            if len(spawned) == 1:
                server_pids[name] = spawned.pop()
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await session.list_tools()  # the client learns the output schemas it checks results against
            sessions[name] = session

        async def api() -> None:
            await remote.invoke(f"{TOOL}:2.0.0", params=PARAMS)

        def via(session: ClientSession) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                result = await session.call_tool(TOOL, PARAMS)
                assert not result.is_error, result
            return call

        ways: dict[str, Callable[[], Awaitable[None]]] = {"python api": api}
        ways.update((name, via(session)) for name, session in sessions.items())
        times: dict[str, list[float]] = {name: [] for name in ways}
        cpu_here = dict.fromkeys(ways, 0.0)
        cpu_server = dict.fromkeys(ways, 0.0)
        for way in ways.values():  # warm up: first calls compile schemas, fill caches
            for _ in range(50):
                await way()
        done = 0
        while done < calls:
            for name, way in ways.items():
                pid = server_pids.get(name)
                other = _cpu_s(pid) if pid is not None else None
                cpu = time.thread_time()
                for _ in range(block):
                    started = time.perf_counter()
                    await way()
                    times[name].append((time.perf_counter() - started) * 1000)
                cpu_here[name] += time.thread_time() - cpu
                after = _cpu_s(pid) if pid is not None else None
                if other is not None and after is not None:
                    cpu_server[name] += after - other
            done += block
    return {name: (values, cpu_here[name] * 1000 / len(values),
                   cpu_server[name] * 1000 / len(values) if name in server_pids else None)
            for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="calls per way (default 600)")
    parser.add_argument("--block", type=int, default=50, help="calls per way before switching (default 50)")
    parser.add_argument("--runs", type=int, default=3, help="repeat the whole measurement (default 3)")
    parser.add_argument("--quick", action="store_true", help="a short run (60 calls per way, one run)")
    parser.add_argument("--bare-stdio", metavar="URL", help=argparse.SUPPRESS)  # the bare server's subprocess
    args = parser.parse_args(argv)
    if args.bare_stdio:
        trio.run(_serve_bare_stdio, args.bare_stdio)
        return 0
    if args.calls < 1 or args.block < 1 or args.runs < 1:
        parser.error("--calls, --block and --runs must be at least 1")
    calls, runs = (60, 1) if args.quick else (args.calls, args.runs)
    block = min(args.block, calls)
    results: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_peer(tmp)
        try:
            for _ in range(runs):
                results.append(trio.run(_measure, calls, block, url, tmp))
        finally:
            proc.terminate()
            proc.wait(30)
    p50s = {name: [statistics.median(run[name][0]) for run in results] for name in results[0]}
    added = {name: [p - b for p, b in zip(values, p50s["python api"])] for name, values in p50s.items()}
    print(f"{calls} sequential echo calls per way and run, {runs} run(s); median over runs [min..max]")
    print(f"{'way':<22} {'p50 ms':>17} {'p50 added':>23} {'p90 ms':>7} {'cpu here':>9} {'cpu server':>11}")
    for name in p50s:
        p90 = statistics.median(_pct(run[name][0], 0.9) for run in results)
        here = statistics.median(run[name][1] for run in results)
        server_cpu = [cpu for run in results if (cpu := run[name][2]) is not None]
        a = added[name]
        shown_added = "" if name == "python api" else f"{statistics.median(a):+.3f} [{min(a):+.2f}..{max(a):+.2f}]"
        shown_server = f"{statistics.median(server_cpu):.3f}" if server_cpu else ""
        print(f"{name:<22} {statistics.median(p50s[name]):>6.3f} [{min(p50s[name]):.2f}..{max(p50s[name]):.2f}]"
              f" {shown_added:>23} {p90:>7.3f} {here:>9.3f} {shown_server:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
