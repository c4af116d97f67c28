"""Scale through the whole daemon (``ampcap serve`` in its own process).

* Many connections open at once are all served (small: 200, full: 1,000).
* Memory per idle, negotiated connection stays under 64 KiB (daemon RSS).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import ECHO, RESULT, raw_peer, serve_process, soak_scale  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _hold_connections(url: str, count: int, invoke: bool, measure: object = None) -> list[object]:
    """Open ``count`` connections at once; optionally invoke echo on each;
    call ``measure()`` while they are all open; return the replies."""
    replies: list[object] = []
    all_open = trio.Event()
    opened = 0
    release = trio.Event()
    measured: list[object] = []

    async def one(i: int) -> None:
        nonlocal opened
        async with raw_peer(url) as peer:
            if invoke:
                replies.append(await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": f"m{i}"}}, timeout=60))
            opened += 1
            if opened == count:
                all_open.set()
            await release.wait()

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
        with trio.fail_after(120):
            await all_open.wait()
        if measure is not None:
            await trio.sleep(0.5)
            measured.append(measure())  # type: ignore[operator]
        release.set()
    return replies if measure is None else measured


@pytest.mark.slow
def test_many_connections_at_once_all_served(tmp_path: Path) -> None:
    count = soak_scale(200, 1000)
    with serve_process(tmp_path) as proc:
        replies = trio.run(_hold_connections, proc.url, count, True)
        assert proc.terminate() == 0
    assert len(replies) == count
    assert all(r.envelope.typ == RESULT and r.body["status"] == "success" for r in replies)  # type: ignore[attr-defined]
    assert sorted(r.body["result"]["message"] for r in replies) == sorted(f"m{i}" for i in range(count))  # type: ignore[attr-defined]


@pytest.mark.slow
def test_idle_connection_memory_under_64_kib(tmp_path: Path) -> None:
    count = soak_scale(300, 1000)
    with serve_process(tmp_path) as proc:
        # Warm up allocator and code paths first, so the delta is per connection.
        trio.run(_hold_connections, proc.url, 50, True)
        before = rss_kib(proc.proc.pid)
        (during,) = trio.run(_hold_connections, proc.url, count, False, lambda: rss_kib(proc.proc.pid))
        assert proc.terminate() == 0
    per_conn = (during - before) / count
    print(f"daemon RSS {before} KiB idle -> {during} KiB with {count} connections: {per_conn:.1f} KiB each")
    assert per_conn <= 64
