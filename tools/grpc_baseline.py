"""The baseline to beat: a grpcio (asyncio) unary call over loopback.

No code generation: the server registers a generic handler whose request
and response are raw bytes (~200 bytes of params, the size of a small
CAP_INVOKE params map), and the client calls the method by its path. The
server runs in its own process; its CPU time per call is read from
``/proc/<pid>/stat`` by the caller, as for every other server here.

    python tools/grpc_baseline.py                 # 1 and 64 in flight, prints a table
    python tools/grpc_baseline.py server          # READY <port>, until SIGTERM

Needs the bench extra: ``pip install 'ampcap[bench]'`` (grpcio).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Result, ServerProcess, cpu_seconds, summarize  # noqa: E402

METHOD = "/ampcap.bench.Echo/Call"


async def serve(port: int) -> None:
    import grpc

    async def call(request: bytes, context: object) -> bytes:
        return request  # echo the params back, like a trivial capability

    handler = grpc.method_handlers_generic_handler(
        "ampcap.bench.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


async def client(port: int, in_flight: int, seconds: float, size: int) -> tuple[int, float, list[float]]:
    import grpc

    params = os.urandom(size)
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = channel.unary_unary(METHOD)
        await stub(params)  # warm-up: connection + HTTP/2 settings
        start = time.perf_counter()
        deadline = start + seconds

        async def worker() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    return
                await stub(params)
                latencies.append((time.perf_counter() - t0) * 1e6)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - start
    return len(latencies), elapsed, latencies


def run(in_flights: tuple[int, ...] = (1, 64), seconds: float = 3.0, size: int = 200) -> list[Result]:
    results = []
    with ServerProcess([sys.executable, __file__, "server"]) as server:
        for n in in_flights:
            cpu0 = cpu_seconds(server.pid)
            calls, elapsed, lat = asyncio.run(client(server.port, n, seconds, size))
            results.append(Result("grpcio aio unary (baseline)", n, calls, elapsed, lat,
                                  cpu_seconds(server.pid) - cpu0))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", choices=("bench", "server"), default="bench")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=200, help="params bytes per call (default 200)")
    args = parser.parse_args()
    if args.mode == "server":
        asyncio.run(serve(args.port))
    else:
        print(summarize(run(seconds=args.seconds, size=args.size)))


if __name__ == "__main__":
    main()
