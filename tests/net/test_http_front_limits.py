"""The HTTP front's lifetimes and limits against an in-process ``HttpFront``
with short timeouts (issue 38, items 1-4): a WebSocket outlives the request
timeout and a client redials a lost one; slow uploads cannot deny other
POSTs; WebSocket protocol errors close 1002; malformed heads get an answer."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request

import ampcap
from ampcap.caps.demo import demo_manifest
from ampcap.net.transport.http_server import HttpConfig, HttpFront
from ampcap.net.api.peer import Peer, Server
from ampcap.wire.bearer import mint
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType


@asynccontextmanager
async def _front(config: HttpConfig) -> AsyncIterator[tuple[int, Server, HttpFront]]:
    provider = Peer(Identity.generate(os.urandom), manifest=demo_manifest())
    async with provider.serve("amp://127.0.0.1:0") as served, trio.open_nursery() as nursery:
        front = HttpFront(served.daemon, config=config)
        port = (await nursery.start(front.serve, "127.0.0.1", 0))[0].socket.getsockname()[1]
        try:
            yield port, served, front
        finally:
            nursery.cancel_scope.cancel()


# ------------------------------------------------------------ item 1


def test_websocket_outlives_the_request_timeout() -> None:
    async def main() -> None:
        async with _front(HttpConfig(request_timeout_s=0.3)) as (port, served, _):
            async with ampcap.connect(f"ws://127.0.0.1:{port}", identity=Identity.generate(os.urandom)) as remote:
                for _ in range(6):  # 1.2 s in all: four request timeouts
                    assert await remote.invoke("org.ampcap.demo.noop", version="1.0.0") is None
                    await trio.sleep(0.2)
                assert remote.open
                # An invoke running longer than the request timeout is answered over the same socket.
                assert await remote.invoke("org.ampcap.demo.sleep", version="1.0.0", params={"ms": 700}) == \
                    {"slept_ms": 700}
                assert remote.open

    trio.run(main)


@pytest.mark.parametrize("scheme", ["ws", "amp"])
def test_a_remote_redials_a_lost_connection_for_the_next_call(scheme: str) -> None:
    async def main() -> None:
        async with _front(HttpConfig()) as (port, served, _):
            url = f"ws://127.0.0.1:{port}" if scheme == "ws" else served.url
            async with ampcap.connect(url, identity=Identity.generate(os.urandom)) as remote:
                assert await remote.invoke("org.ampcap.demo.noop", version="1.0.0") is None
                for link in list(served.daemon.links):  # the provider drops every connection
                    link.driver.close("dropped by the test")
                with trio.fail_after(5):
                    while remote.open:
                        await trio.sleep(0.01)
                assert await remote.invoke("org.ampcap.demo.echo", version="1.0.0",
                                           params={"message": "again"}) == {"message": "again", "version": "1.0.0"}
                assert remote.open

    trio.run(main)


# ------------------------------------------------------------ item 2


def test_slow_uploads_do_not_deny_other_posts() -> None:
    """Slow senders declaring the largest bodies, with and without tokens,
    while a normal client POSTs: the normal client is answered."""

    async def main() -> None:
        config = HttpConfig(request_timeout_s=20)  # 64 MiB of bodies at once
        async with _front(config) as (port, served, front):
            did = served.daemon.identity.did
            slow: list[trio.SocketStream] = []
            for i in range(12):  # four with tokens declaring 16 MiB each, then eight without declaring 64 KiB
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                ident = Identity.generate(os.urandom)
                auth = (f"authorization: Bearer {mint(ident, did, now_ms=_now(), entropy=os.urandom)}\r\n"
                        if i < 4 else "")
                size = (16 << 20) if auth else (64 << 10)
                await stream.send_all((f"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\n{auth}"
                                       f"content-type: application/cbor\r\ncontent-length: {size}\r\n\r\n").encode()
                                      + b"\xa0")
                slow.append(stream)
            await trio.sleep(0.3)  # every slow request is now reading its body
            caller = Identity.generate(os.urandom)
            token = mint(caller, did, now_ms=_now(), entropy=os.urandom)
            _, invoke = seal(caller, typ=MessageType.CAP_INVOKE, to=did, now_ms=_now(), entropy=os.urandom,
                             ttl=60_000, body={"capability": "org.ampcap.demo.noop", "version": "1.0.0", "params": {}})
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(3):
                    answer = await client.post(f"http://127.0.0.1:{port}/amp/v1/messages", content=invoke,
                                               headers={"content-type": "application/cbor",
                                                        "authorization": f"Bearer {token}"})
                    assert answer.status_code == 200, answer.text
            for stream in slow:
                await stream.aclose()

    trio.run(main)


def test_bodies_past_the_total_are_refused_as_they_arrive() -> None:
    """The total still bounds what is held: bytes that did arrive count."""

    async def main() -> None:
        async with _front(HttpConfig(max_bodies_total=1 << 20)) as (port, served, front):
            did = served.daemon.identity.did
            streams = []
            for _ in range(2):
                ident = Identity.generate(os.urandom)
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all((f"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\n"
                                       f"authorization: Bearer {mint(ident, did, now_ms=_now(), entropy=os.urandom)}\r\n"
                                       f"content-type: application/cbor\r\ncontent-length: {2 << 20}\r\n\r\n").encode())
                streams.append(stream)
            await streams[0].send_all(b"\x00" * (900 << 10))
            await trio.sleep(0.3)
            await streams[1].send_all(b"\x00" * (300 << 10))
            answer = b""
            with trio.fail_after(5):
                while b"\r\n\r\n" not in answer:
                    answer += await streams[1].receive_some(4096)
            assert answer.startswith(b"HTTP/1.1 503") and b"x-amp-error-code: 2003" in answer
            for stream in streams:
                await stream.aclose()

    trio.run(main)


# ------------------------------------------------------------ item 3


def _ws_open(port: int) -> tuple[socket.socket, WSConnection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host="x", target="/amp/v1/ws", subprotocols=["amp.v1"])))
    while True:
        ws.receive_data(sock.recv(65536))
        events = list(ws.events())
        if events:
            assert isinstance(events[0], AcceptConnection)
            return sock, ws


def _close_code(sock: socket.socket) -> int | None:
    """The close code of the server's close frame, read raw (2-byte frame header, unmasked)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) >= 4 and data[0] == 0x88:
            break
    if len(data) >= 4 and data[0] == 0x88:
        return int.from_bytes(data[2:4], "big")
    return None


@pytest.mark.parametrize("frame", [
    b"\x82\x02ab",  # a binary frame from the client without a mask
    b"\x83\x80abcd",  # reserved opcode 3
    b"\x88\x84abcd" + bytes(a ^ b for a, b in zip(b"\x03\xe8\xff\xfe", b"abcd")),  # close reason not UTF-8
], ids=["unmasked", "reserved-opcode", "close-not-utf8"])
def test_websocket_protocol_errors_close_1002(frame: bytes, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with _front(HttpConfig()) as (port, _, _):
            def client() -> int | None:
                sock, _ = _ws_open(port)
                sock.sendall(frame)
                try:
                    return _close_code(sock)
                finally:
                    sock.close()

            code = await trio.to_thread.run_sync(client)
            assert code == 1002
            with trio.fail_after(5):
                while not any("protocol error" in r.getMessage() for r in caplog.records):
                    await trio.sleep(0.02)

    with caplog.at_level(logging.INFO, logger="ampcap"):
        trio.run(main)
    closed = [r.getMessage() for r in caplog.records if "connection closed" in r.getMessage()]
    assert closed and all("peer closed" not in line for line in closed), closed


# ------------------------------------------------------------ item 4


def _raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)  # a reset raises here: the failure this test is about
            if not chunk:
                break
            answer += chunk
        return answer


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /amp/v1/\x00messages HTTP/1.1\r\nhost: x\r\n\r\n", 400),
    (b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", 400),
    (b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n", 400),
    (b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n", 400),
    (b"GET /amp/v1/messages?" + b"a" * (1 << 20) + b" HTTP/1.1\r\nhost: x\r\n\r\n", 414),
    (b"GET /amp/v1/messages HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (10 << 20) + b"\r\n\r\n", 431),
    (b"GET /amp/v1/messages HTTP/1.1\r\nhost: x\r\n"
     + b"".join(b"x-h%d: %s\r\n" % (i, b"b" * 1000) for i in range(40)) + b"\r\n", 431),
    (b"GET /amp/v1/ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
     b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-protocol: amp.v1\r\n\r\n", 400),
    (b"GET /amp/v1/ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: \xc9upgrade\r\n"
     b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
     b"sec-websocket-protocol: amp.v1\r\n\r\n", 400),
], ids=["request-line", "nul-in-target", "two-lengths", "negative-length", "gzip", "long-uri", "huge-header",
        "head-over-limit-in-one-read", "upgrade-without-version", "upgrade-not-ascii"])
def test_malformed_request_heads_are_answered(request_bytes: bytes, status: int) -> None:
    async def main() -> None:
        async with _front(HttpConfig()) as (port, _, _):
            answer = await trio.to_thread.run_sync(_raw_exchange, port, request_bytes)
            assert answer.startswith(b"HTTP/1.1 %d" % status), answer[:200]
            assert b"x-amp-error-code: 1001" in answer

    trio.run(main)


def _now() -> int:
    return int(time.time() * 1000)
