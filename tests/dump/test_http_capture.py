"""HTTP and WebSocket traffic (RFC 002 §5–§6), recorded by the live tap in
front of a real HTTP front, read back by ``ampcap dump``: the POST bodies,
the synchronous replies, the messages inside poll wrappers and the
WebSocket binary messages are all found, verified and correlated like AMPS."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import trio

from ampcap.caps.demo import demo_manifest
from ampcap.dump.httpws import HttpWsStream
from ampcap.dump.pcapwrite import PcapWriter
from ampcap.dump.streams import Where
from ampcap.net.transport.http_server import HttpConfig, HttpFront
from ampcap.net.api.peer import Peer, connect
from ampcap.net.features.tap import run_tap
from ampcap.wire.identity import Identity


async def record_session(pcap: Path) -> None:
    provider = Peer(Identity.generate(os.urandom), manifest=demo_manifest())
    with pcap.open("wb") as fp:
        recorder = PcapWriter(fp)
        async with provider.serve("amp://127.0.0.1:0") as server, trio.open_nursery() as nursery:
            front = HttpFront(server.daemon, config=HttpConfig(sync_wait_s=0.05))
            listeners = await nursery.start(front.serve, "127.0.0.1", 0)
            upstream_port = listeners[0].socket.getsockname()[1]
            tap_port = await nursery.start(lambda task_status: run_tap(
                ("127.0.0.1", 0), ("127.0.0.1", upstream_port), framing=None, max_size=1 << 24,
                on_event=lambda event: None, clock=time.time, recorder=recorder, task_status=task_status))
            for scheme in ("http", "ws"):
                async with connect(f"{scheme}://127.0.0.1:{tap_port}", identity=Identity.generate(os.urandom)
                                   ) as remote:
                    assert await remote.invoke("org.ampcap.demo.math.add:1.0.0", params={"a": 1, "b": 2}) == \
                        {"sum": 3}
                    # Longer than the sync wait: over HTTP a 202, then the reply in a poll wrapper.
                    assert await remote.invoke("org.ampcap.demo.sleep:1.0.0", params={"ms": 300}) == \
                        {"slept_ms": 300}
            await trio.sleep(0.2)  # let the tap copy the close
            nursery.cancel_scope.cancel()


def test_http_and_websocket_capture_dumps_every_message(tmp_path: Path, dump: Any, jrecords: Any) -> None:
    pcap = tmp_path / "http.pcap"
    trio.run(record_session, pcap)
    code, out = dump(["--json", str(pcap)])
    records = jrecords(out)
    messages = [r for r in records if r["typ_name"]]
    names = [r["typ_name"] for r in messages]
    assert names.count("HELLO") == 2 and names.count("HELLO_ACK") == 2
    assert names.count("CAP_INVOKE") == 4 and names.count("CAP_RESULT") == 4
    for r in messages:
        assert r["errors"] == [] and r["signature"] == "valid", r
    invokes = {r["id"] for r in messages if r["typ_name"] == "CAP_INVOKE"}
    terminals = [r for r in messages if r["typ_name"] == "CAP_RESULT" and r["answers"]]
    assert sorted(t["answers"]["id"] for t in terminals) == sorted(invokes)


def test_websocket_text_and_refusals_are_reported() -> None:
    c2s = HttpWsStream(Where("c2s", "a", "b"), 1 << 20)
    events = c2s.feed(b"GET /amp/v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"
                      b"\x81\x85\x01\x02\x03\x04" + bytes(c ^ k for c, k in zip(b"hello", b"\x01\x02\x03\x04\x01")),
                      1.0)
    assert [e.error.message for e in events if e.error] == [
        "WebSocket text message (RFC 002 §5.2 allows binary only; close 1003)"]
    s2c = HttpWsStream(Where("s2c", "b", "a"), 1 << 20)
    events = s2c.feed(b"HTTP/1.1 403 Forbidden\r\nX-AMP-Error-Code: 3001\r\nContent-Length: 6\r\n\r\nnope\r\n", 1.0)
    assert [(e.error.code, e.error.message) for e in events if e.error] == [(3001, "HTTP 403: nope")]
    big = HttpWsStream(Where("c2s", "a", "b"), 1 << 20)
    events = big.feed(b"POST /amp/v1/messages HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 1.0)
    assert events and events[0].error is not None and events[0].error.code == 1001 and big.dead
