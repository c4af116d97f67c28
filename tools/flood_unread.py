"""Peers that send and never read: how much daemon memory can they pin?

Starts ``ampcap serve --demo`` in a subprocess, opens N sessions (HANDSHAKE
and HELLO, like any peer), then has each of them send PING frames as fast as
the daemon takes them while reading none of the PONGs. A PONG costs the
daemon nothing to make, so without a bound its queued output would grow
until the write timeout (30 s) closed the connection. The daemon's RSS is
sampled every second; the figure to read is its peak growth over the idle
RSS measured in the same run, next to the bound the daemon promises: its
shared send budget (``DaemonConfig.max_send_buffer_total``) plus one read's
replies per connection.

    python tools/flood_unread.py [--connections 200] [--seconds 40]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import rss_kib  # noqa: E402
from bench_daemon import flood_main  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings  # noqa: E402
from ampcap.net.daemon.core import DaemonConfig  # noqa: E402
from ampcap.net.transport.stream import RECEIVE_SIZE  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.frames import FrameType, encode_frame  # noqa: E402


async def flood(url: str, pid: int, connections: int, seconds: float) -> None:
    probes = []
    for _ in range(connections):
        probe = await Probe.open(parse_url(url), ProbeSettings(timeout_s=30))
        await probe.open_session()
        probes.append(probe)
    idle = rss_kib(pid)
    pings = encode_frame(FrameType.PING, b"12345678") * 4096
    sent = closed = 0

    async def one(probe: Probe) -> None:
        nonlocal sent, closed
        try:
            while True:
                await probe.stream.send_all(pings)
                sent += len(pings)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed += 1  # the daemon gave up on a peer that read nothing

    peak = idle
    async with trio.open_nursery() as nursery:
        for probe in probes:
            nursery.start_soon(one, probe)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            await trio.sleep(1)
            peak = max(peak, rss_kib(pid))
        nursery.cancel_scope.cancel()
    for probe in probes:
        await probe.aclose()

    budget = DaemonConfig().max_send_buffer_total
    bound_kib = (budget + connections * RECEIVE_SIZE) / 1024
    grown = peak - idle
    print(f"{connections} peers sent {sent / 2**20:,.0f} MiB of PINGs in {seconds:g} s and read nothing")
    print(f"daemon RSS: {idle / 1024:,.1f} MiB with the sessions open, peak {peak / 1024:,.1f} MiB "
          f"(+{grown / 1024:,.1f} MiB, {grown / connections:,.0f} KiB per peer)")
    print(f"bound: the shared send budget {budget / 2**20:g} MiB + one {RECEIVE_SIZE // 1024} KiB read's replies "
          f"per peer = {bound_kib / 1024:,.1f} MiB; peak growth / bound = {grown / bound_kib:.2f} "
          f"(Python's own overhead on top of the bytes is included)")
    print(f"peers closed by the daemon for reading nothing: {closed} of {connections}")


def main() -> None:
    flood_main(__doc__, flood, connections=200, connections_help="flooding peers (default 200)", seconds=40.0,
               seconds_help="how long they flood (default 40: past the daemon's 30 s write timeout)")


if __name__ == "__main__":
    main()
