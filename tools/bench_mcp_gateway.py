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
  before the gateway does anything (no schema check, no mapping).

Each call is sequential (one in flight), so p50 is a round-trip latency.
The target (issue 22) is that the gateway adds at most 0.5 ms to the p50.

    python tools/bench_mcp_gateway.py [--calls 600] [--block 50] [--quick]
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

from ampcap.net.peer import Peer
from ampcap.wire.identity import Identity

TOOL = "org.ampcap.demo.echo"
PARAMS = {"message": "hello"}


def _start_peer(tmp: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, XDG_CONFIG_HOME=tmp)
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[0]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(calls: int, block: int, url: str, tmp: str) -> dict[str, list[float]]:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client._memory import InMemoryTransport
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.server.lowlevel import Server

    import ampcap.mcp

    identity = Identity.generate(os.urandom)
    params = StdioServerParameters(command=sys.executable, args=["-m", "ampcap.cli.main", "mcp", url],
                                   env={"XDG_CONFIG_HOME": tmp})
    async with AsyncExitStack() as stack:
        remote = await stack.enter_async_context(Peer(identity).connect(url))

        async def bare_list(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name=TOOL, input_schema={"type": "object"})])

        async def bare_call(ctx: Any, params: Any) -> types.CallToolResult:
            await remote.invoke(f"{TOOL}:2.0.0", params=params.arguments)
            return types.CallToolResult(content=[types.TextContent(type="text", text="")])

        bare = Server("bare", on_list_tools=bare_list, on_call_tool=bare_call)
        bare.middleware = []  # as the gateway does: no OpenTelemetry span per request
        gateway = await stack.enter_async_context(ampcap.mcp.gateway(url, identity=identity))
        devnull = stack.enter_context(open(os.devnull, "w"))
        sessions: dict[str, ClientSession] = {}
        for name, transport in (("gateway, in process", InMemoryTransport(gateway)),
                                ("gateway, stdio", stdio_client(params, errlog=devnull)),
                                ("bare SDK server", InMemoryTransport(bare))):
            read, write = await stack.enter_async_context(transport)
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
        for way in ways.values():  # warm up: first calls compile schemas, fill caches
            for _ in range(20):
                await way()
        done = 0
        while done < calls:
            for name, way in ways.items():
                for _ in range(block):
                    started = time.perf_counter()
                    await way()
                    times[name].append((time.perf_counter() - started) * 1000)
            done += block
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="calls per way (default 600)")
    parser.add_argument("--block", type=int, default=50, help="calls per way before switching (default 50)")
    parser.add_argument("--quick", action="store_true", help="a short run (60 calls per way)")
    args = parser.parse_args(argv)
    calls = 60 if args.quick else args.calls
    block = min(args.block, calls)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_peer(tmp)
        try:
            times = trio.run(_measure, calls, block, url, tmp)
        finally:
            proc.terminate()
            proc.wait(30)
    base = statistics.median(times["python api"])
    print(f"{'way':<22} {'p50 ms':>8} {'p90 ms':>8} {'p50 added':>10}   ({calls} sequential echo calls each)")
    for name, values in times.items():
        p50 = statistics.median(values)
        added = "" if name == "python api" else f"{p50 - base:+.3f}"
        print(f"{name:<22} {p50:>8.3f} {_pct(values, 0.9):>8.3f} {added:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
