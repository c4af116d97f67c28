"""The ceiling: plain trio, length-prefixed echo over loopback TCP.

Same frame sizes as a signed CAP_INVOKE (``--size``, default 450 bytes),
client and server in separate processes, coalesced writes on both sides
(every frame that is ready leaves in one ``send_all``). No CBOR, no
signatures: whatever the daemon costs beyond this is ampcap's own.

    python tools/echo_baseline.py                 # both modes, prints a table
    python tools/echo_baseline.py server          # READY <port>, until SIGTERM
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Result, ServerProcess, cpu_seconds, summarize  # noqa: E402

HEADER = 4


def _frames(buf: bytearray) -> list[bytes]:
    """Cut every complete length-prefixed frame off the front of ``buf``."""
    out = []
    while len(buf) >= HEADER:
        n = int.from_bytes(buf[:HEADER], "big")
        if len(buf) < HEADER + n:
            break
        out.append(bytes(buf[:HEADER + n]))
        del buf[:HEADER + n]
    return out


async def _serve_one(stream: trio.SocketStream) -> None:
    buf = bytearray()
    try:
        while data := await stream.receive_some(65536):
            buf += data
            ready = _frames(buf)
            if ready:
                await stream.send_all(b"".join(ready))  # coalesced: one write per wakeup
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def serve(port: int) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, _serve_one, port)
            print(f"READY {listeners[0].socket.getsockname()[1]}", flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


async def client(port: int, in_flight: int, seconds: float, size: int) -> tuple[int, float, list[float]]:
    """Keep ``in_flight`` frames outstanding for ``seconds``; returns
    (round trips, elapsed, latencies in µs)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    payload = os.urandom(size - HEADER)
    frame = len(payload).to_bytes(HEADER, "big") + payload
    latencies: list[float] = []
    sent_at: list[float] = []  # FIFO: echo preserves order
    head = 0
    buf = bytearray()
    # warm-up round trip
    await stream.send_all(frame)
    while len(_frames(buf)) == 0:
        buf += await stream.receive_some(65536)
    buf.clear()
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    sent_at.extend([now] * in_flight)
    await stream.send_all(frame * in_flight)
    done = 0
    stop = False
    while True:
        data = await stream.receive_some(65536)
        if not data:
            break
        buf += data
        got = len(_frames(buf))
        now = time.perf_counter()
        for _ in range(got):
            latencies.append((now - sent_at[head]) * 1e6)
            head += 1
        done += got
        if now >= deadline:
            stop = True
        if not stop:
            sent_at.extend([now] * got)
            await stream.send_all(frame * got)
        elif head == len(sent_at):
            break
    elapsed = now - start
    await stream.aclose()
    return done, elapsed, latencies


def run(in_flights: tuple[int, ...] = (1, 64), seconds: float = 3.0, size: int = 450) -> list[Result]:
    results = []
    with ServerProcess([sys.executable, __file__, "server"]) as server:
        for n in in_flights:
            cpu0 = cpu_seconds(server.pid)
            calls, elapsed, lat = trio.run(client, server.port, n, seconds, size)
            results.append(Result("trio echo (ceiling)", n, calls, elapsed, lat, cpu_seconds(server.pid) - cpu0))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", choices=("bench", "server"), default="bench")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=450, help="frame size in bytes (default 450)")
    args = parser.parse_args()
    if args.mode == "server":
        trio.run(serve, args.port)
    else:
        print(summarize(run(seconds=args.seconds, size=args.size)))


if __name__ == "__main__":
    main()
