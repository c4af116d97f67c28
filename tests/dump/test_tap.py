"""Live tap over loopback: client → tap → upstream echo server (issue 6)."""

from __future__ import annotations

import itertools
from functools import partial

import pytest
import trio

from ampcap.dump.records import Inspector
from ampcap.dump.session import DumpSession
from ampcap.dump.streams import StreamEvent
from ampcap.net.features.tap import run_tap
from ampcap.net.transport.url import parse_hostport
from ampcap.wire.envelope import seal
from ampcap.wire.frames import FrameType, Framing, encode_frame
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import default_resolver
from ampcap.wire.registry import MessageType

ALICE = Identity.from_seed(b"\x31" * 32)
T0 = 1_795_000_000_000


async def echo_server(stream: trio.SocketStream) -> None:
    async with stream:
        async for data in stream:
            await stream.send_all(data)


def _frames() -> bytes:
    c = itertools.count(1)
    out = b""
    for i in range(3):
        _, raw = seal(ALICE, typ=int(MessageType.PING), to=ALICE.did, body=None, now_ms=T0 + i,
                      entropy=lambda n: next(c).to_bytes(n, "big"))
        out += encode_frame(FrameType.AMP_MESSAGE, raw)
    return out


async def _receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = await stream.receive_some(n - len(got))
        assert chunk
        got += chunk
    return got


@pytest.mark.trio
async def test_tap_forwards_unchanged_and_decodes_both_directions() -> None:
    events: list[StreamEvent] = []
    payload = _frames()
    garbage = b"\x00\x00\x00\x00"  # a zero-length frame: a framing error on both sides
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, echo_server, 0, host="127.0.0.1"))
        up_port = listeners[0].socket.getsockname()[1]
        tap_port = await nursery.start(partial(run_tap, ("127.0.0.1", 0), ("127.0.0.1", up_port),
                                               framing=Framing.RFC002, max_size=1 << 20,
                                               on_event=events.append, clock=lambda: 0.0))
        client = await trio.open_tcp_stream("127.0.0.1", tap_port)
        async with client:
            # Byte-identical forwarding, even split into odd pieces.
            for i in range(0, len(payload), 7):
                await client.send_all(payload[i:i + 7])
            assert await _receive_exactly(client, len(payload)) == payload
            # After a decode error the bytes still flow both ways.
            await client.send_all(garbage + b"after-the-error")
            assert await _receive_exactly(client, len(garbage) + 15) == garbage + b"after-the-error"
        with trio.fail_after(5):
            while sum(1 for e in events if e.error is not None) < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    frames = [e for e in events if e.frame is not None]
    assert {e.where.direction for e in frames} == {"c2s", "s2c"}
    assert len(frames) == 6 and all(e.frame.payload for e in frames)
    errors = [e for e in events if e.error is not None]
    assert {e.where.direction for e in errors} == {"c2s", "s2c"}
    assert all(e.error.code == 1001 for e in errors)
    # The records a session makes from those events are fully verified.
    session = DumpSession(Inspector(default_resolver(), now_ms=T0))
    recs = [session.record(e) for e in frames]
    assert all(r.signature == "valid" and r.typ_name == "PING" and not r.errors for r in recs)
    assert recs[0].src and recs[0].dst and recs[0].src.startswith("127.0.0.1:")


@pytest.mark.trio
async def test_tap_with_unreachable_upstream_closes_client() -> None:
    async with trio.open_nursery() as nursery:
        dead = trio.socket.socket()
        await dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()  # nothing listens there
        tap_port = await nursery.start(partial(run_tap, ("127.0.0.1", 0), ("127.0.0.1", dead_port),
                                               framing=Framing.RFC002, max_size=1 << 20,
                                               on_event=lambda e: None, clock=lambda: 0.0))
        client = await trio.open_tcp_stream("127.0.0.1", tap_port)
        with trio.fail_after(5):
            assert await client.receive_some(10) == b""
        await client.aclose()
        nursery.cancel_scope.cancel()


def test_parse_hostport() -> None:
    assert parse_hostport("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_hostport("[::1]:9") == ("::1", 9)
    assert parse_hostport(":7") == ("127.0.0.1", 7)
    for bad in ("nohost", "h:99999", "h:x"):
        with pytest.raises(ValueError):
            parse_hostport(bad)


@pytest.mark.trio
async def test_cli_live_tap_prints_json_records() -> None:
    """On `--listen 127.0.0.1:0` the tap says on stderr which port it got
    (it printed nothing, even with -v, so :0 was unusable); stdout holds
    only the records."""
    import json
    import re
    import signal
    import subprocess
    import sys

    payload = _frames()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, echo_server, 0, host="127.0.0.1"))
        up_port = listeners[0].socket.getsockname()[1]
        code = ("import argparse,sys; from ampcap.cli import dump; p=argparse.ArgumentParser(); "
                "dump.register(p.add_subparsers(dest='command')); a=p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", code, "dump", "--json", "--now", str(T0), "--listen", "127.0.0.1:0",
             "--upstream", f"127.0.0.1:{up_port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            with trio.fail_after(20):
                assert proc.stderr is not None
                said = b""
                while not said.endswith(b"\n"):
                    chunk = await proc.stderr.receive_some(1)
                    assert chunk, "tap exited before saying where it listens"
                    said += chunk
                m = re.fullmatch(rf"tapping 127\.0\.0\.1:(\d+) -> 127\.0\.0\.1:{up_port}\n", said.decode())
                assert m, said
                tap_port = int(m.group(1))
                assert tap_port != 0
                client = await trio.open_tcp_stream("127.0.0.1", tap_port)
                async with client:
                    await client.send_all(payload)
                    assert await _receive_exactly(client, len(payload)) == payload
                assert proc.stdout is not None
                lines: list[dict[str, object]] = []
                buf = b""
                while len(lines) < 6:
                    chunk = await proc.stdout.receive_some(65536)
                    assert chunk, "tap exited early"
                    buf += chunk
                    *complete, buf = buf.split(b"\n")
                    lines += [json.loads(x) for x in complete if x.strip()]
        finally:
            proc.send_signal(signal.SIGINT)
            with trio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
        nursery.cancel_scope.cancel()
    assert proc.returncode == 0
    assert sorted(r["direction"] for r in lines) == ["c2s"] * 3 + ["s2c"] * 3
    assert all(r["typ_name"] == "PING" and r["signature"] == "valid" and r["errors"] == [] for r in lines)
