"""Peers that start large frames and never finish them: how much daemon memory can they pin?

Starts ``ampcap serve --demo`` in a subprocess and has N peers each declare a
frame of the largest size the daemon offers (16 MiB) and send as much of it
as the daemon will read, then stop and hold the connection open. Two rounds:

* **before the handshake**: raw TCP, a HANDSHAKE frame header (anyone can do
  this; nothing is authenticated yet);
* **after HELLO**: a full session (a fresh did:key costs nothing either),
  then an AMP_MESSAGE frame header.

The daemon's RSS is sampled while they hold on; the figure to read is its
peak growth over the idle RSS measured in the same round, next to the bound
the daemon promises: nothing before HELLO (frames are refused from the header
over 64 KiB), and after it the shared receive budget
(``DaemonConfig.max_receive_buffer_total``) plus a small frame and one read
per peer. A legitimate invoke is timed at the end of each round: large
frames waiting for the budget must not hold up ordinary traffic.

    python tools/flood_large_frames.py [--connections 40] [--seconds 5]
"""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import rss_kib  # noqa: E402
from bench_daemon import flood_main  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings  # noqa: E402
from ampcap.net.transport.budget import SMALL_FRAME  # noqa: E402
from ampcap.net.daemon.core import DaemonConfig  # noqa: E402
from ampcap.net.api.peer import connect  # noqa: E402
from ampcap.net.transport.stream import RECEIVE_SIZE  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.frames import DEFAULT_MAX_SIZE, FrameType  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

CHUNK = b"\0" * (1 << 20)


async def hold_frame(url: str, after_hello: bool, sent: list[int]) -> trio.abc.Stream | None:
    """Open a connection, declare a 16 MiB frame, send what the daemon takes
    within a second per MiB, and return the open stream (None if refused at once)."""
    target = parse_url(url)
    if after_hello:
        probe = await Probe.open(target, ProbeSettings(timeout_s=30, max_msg_size=DEFAULT_MAX_SIZE))
        await probe.open_session()
        stream: trio.abc.Stream = probe.stream
        ftype = FrameType.AMP_MESSAGE
    else:
        stream = await trio.open_tcp_stream(target.host, target.port)
        ftype = FrameType.HANDSHAKE
    try:
        await stream.send_all(struct.pack(">IB", DEFAULT_MAX_SIZE, ftype))
        for _ in range(DEFAULT_MAX_SIZE // len(CHUNK) - 1):
            with trio.move_on_after(1):  # the daemon stopped reading: its kernel buffer is full
                await stream.send_all(CHUNK)
                sent.append(len(CHUNK))
                continue
            break
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return None  # refused and closed
    return stream


async def one_invoke(url: str) -> float:
    start = time.perf_counter()
    async with connect(url, identity=Identity.generate(os.urandom)) as remote:
        await remote.invoke("org.ampcap.demo.echo:1.0.0", params={"message": "still here"})
    return time.perf_counter() - start


async def round_(url: str, pid: int, connections: int, seconds: float, after_hello: bool) -> None:
    idle = rss_kib(pid)
    sent: list[int] = []
    streams = []
    peak = idle
    start = time.monotonic()
    for _ in range(connections):
        streams.append(await hold_frame(url, after_hello, sent))
        peak = max(peak, rss_kib(pid))
    while time.monotonic() - start < seconds:
        await trio.sleep(0.5)
        peak = max(peak, rss_kib(pid))
    invoke_s = await one_invoke(url)
    for stream in streams:
        if stream is not None:
            await stream.aclose()

    if after_hello:
        budget = DaemonConfig().max_receive_buffer_total
        bound_kib = (budget + connections * (SMALL_FRAME + RECEIVE_SIZE)) / 1024
        what = "after HELLO"
        promise = (f"the shared receive budget {budget / 2**20:g} MiB + {(SMALL_FRAME + RECEIVE_SIZE) // 1024} KiB "
                   f"per peer = {bound_kib / 1024:,.1f} MiB")
    else:
        bound_kib = connections * (SMALL_FRAME + RECEIVE_SIZE) / 1024
        what = "before the handshake"
        promise = f"{(SMALL_FRAME + RECEIVE_SIZE) // 1024} KiB per peer = {bound_kib / 1024:,.1f} MiB"
    grown = max(peak - idle, 0)
    still_open = sum(s is not None for s in streams)
    print(f"{what}: {connections} peers each declared a {DEFAULT_MAX_SIZE >> 20} MiB frame and sent "
          f"{sum(sent) / 2**20:,.0f} MiB of them in all; {still_open} connections were still open")
    print(f"  daemon RSS {idle / 1024:,.1f} MiB idle, peak {peak / 1024:,.1f} MiB (+{grown / 1024:,.1f} MiB); "
          f"bound: {promise}; peak growth / bound = {grown / bound_kib:.2f}")
    print(f"  a legitimate invoke meanwhile (new connection included): {invoke_s * 1000:,.0f} ms")


async def flood(url: str, pid: int, connections: int, seconds: float) -> None:
    await round_(url, pid, connections, seconds, after_hello=False)
    await trio.sleep(1)
    await round_(url, pid, connections, seconds, after_hello=True)


def main() -> None:
    flood_main(__doc__, flood, connections=40, connections_help="peers per round (default 40)", seconds=5.0,
               seconds_help="how long each round holds on (default 5)")


if __name__ == "__main__":
    main()
