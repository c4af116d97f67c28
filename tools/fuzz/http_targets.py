"""Fuzz targets for the HTTP binding, the WebSocket message layer, the R21
bearer token and RFC 006 session control bodies (registered in
``targets.py``, whose rules they follow: state rebuilt per input, nothing
escapes but what a caller is documented to get).

* ``http``: any bytes from a client at ``HttpFront`` (the request heads
  and bodies, keep-alive, upgrades), over an in-memory stream into a real
  daemon. Whatever arrives, what goes back parses as HTTP/1.1 responses
  (or a WebSocket after a 101), and nothing but the client's going away
  escapes the connection handler.
* ``websocket``: any bytes after an accepted upgrade at
  ``WsMessageStream``: the only outcomes are whole length-prefixed
  messages, the end of input, or the close we sent for what the peer did.
* ``bearer``: any text as a bearer token: ``AmpError`` 3001 or a principal.
* ``session``: any body in an RFC 006 control request (first byte: the
  message type, REQUEST or RESPONSE, and whether a session exists): the
  provider answers a request exactly once, and never raises.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import cbor2
import h11
import trio
import trio.testing

from ampcap.errors import AmpError
from ampcap.wire.identity import DidKeyResolver, Identity

NOW = int(time.time() * 1000)
CALLER, SERVER = Identity.from_seed(bytes([7]) * 32), Identity.from_seed(bytes([8]) * 32)
_RESOLVER = DidKeyResolver()


# ------------------------------------------------------------------ http


_TOKEN = b"@TOKEN@"  # in an input: a bearer token minted now (a token lives 5 minutes; a corpus longer)
_minted: tuple[int, bytes] = (0, b"")


def _token_now() -> bytes:
    global _minted
    from ampcap.wire.bearer import mint

    now = int(time.time() * 1000)
    if now - _minted[0] > 60_000:
        _minted = (now, mint(CALLER, SERVER.did, now_ms=now, entropy=os.urandom).encode())
    return _minted[1]


def http(data: bytes) -> None:
    if _TOKEN in data:
        data = data.replace(_TOKEN, _token_now())
    trio.run(_http, data, clock=trio.testing.MockClock(autojump_threshold=0))


async def _http(data: bytes) -> None:
    from ampcap.caps.demo import demo_manifest
    from ampcap.net.transport.http_server import HttpConfig, HttpFront
    from ampcap.net.api.peer import Peer

    peer = Peer(SERVER, manifest=demo_manifest())
    async with peer._running() as daemon:
        front = HttpFront(daemon, config=HttpConfig(sync_wait_s=0.05, request_timeout_s=5, idle_timeout_s=5,
                                                    ws_ping_interval_s=5, ws_pong_timeout_s=1),
                          entropy=os.urandom)
        client, server = trio.testing.memory_stream_pair()
        received = bytearray()

        async def talk() -> None:
            for i in range(0, len(data), 512):  # arriving in several reads
                await client.send_all(data[i:i + 512])
            await client.send_stream.aclose()  # then the client has said all it will
            while chunk := await client.receive_some(65536):
                received.extend(chunk)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(talk)
            try:
                await front._http(server)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the client went away: what _handle expects
            finally:
                await server.aclose()
    _check_responses(bytes(received))


# The stand-in request may be answered by an upgrade (101) as well as any response.
_ASKED = [("host", "x"), ("connection", "upgrade"), ("upgrade", "websocket")]


def _check_responses(raw: bytes) -> None:
    """What the server wrote parses as HTTP/1.1 responses, up to a 101."""
    conn = h11.Connection(h11.CLIENT)
    # The client side's state machine needs the requests; only the
    # responses' syntax matters here, so pretend one request per response.
    conn.send(h11.Request(method="GET", target="/", headers=_ASKED))
    conn.send(h11.EndOfMessage())
    if not raw:
        return  # nothing answered: the client sent nothing, or too little to be a request
    conn.receive_data(raw)  # (never b"": h11 reads that as the end of the stream)
    while True:
        event = conn.next_event()
        if type(event) is h11.InformationalResponse:
            if event.status_code == 101:
                return  # a WebSocket follows
            continue
        if event is h11.NEED_DATA:
            # Everything was read: no response may be left half written.
            buffered, _ = conn.trailing_data
            assert not buffered and conn.their_state in (h11.SEND_RESPONSE, h11.DONE, h11.MUST_CLOSE), \
                (conn.their_state, bytes(buffered[:200]))
            return
        if type(event) is h11.EndOfMessage:
            if conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
            conn.send(h11.Request(method="GET", target="/", headers=_ASKED))
            conn.send(h11.EndOfMessage())


def _seeds_http() -> Iterator[bytes]:
    from ampcap.wire.envelope import seal

    hello = seal(CALLER, typ=0x01, to=SERVER.did, body={"versions": ["1.0"]}, now_ms=NOW, entropy=os.urandom)[1]
    invoke = seal(CALLER, typ=0x22, to=SERVER.did, now_ms=NOW, entropy=os.urandom,
                  body={"capability": "org.ampcap.demo.echo", "version": "1.0.0", "params": {"message": "hi"}})[1]
    token = _TOKEN.decode()

    def post(body: bytes, auth: bool) -> bytes:
        head = (b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/cbor\r\n"
                b"content-length: %d\r\n" % len(body))
        if auth:
            head += b"authorization: Bearer " + token.encode() + b"\r\n"
        return head + b"\r\n" + body

    yield post(hello, False)
    yield post(invoke, True) + b"GET /amp/v1/messages?limit=5 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " \
        + token.encode() + b"\r\n\r\n"
    yield (b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/cbor\r\n"
           b"transfer-encoding: chunked\r\nauthorization: Bearer " + token.encode() + b"\r\n\r\n"
           + b"%x\r\n" % len(invoke) + invoke + b"\r\n0\r\n\r\n")
    yield (b"GET /amp/v1/ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
           b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
           b"sec-websocket-protocol: amp.v1\r\n\r\n" + _client_frame(hello))
    yield b"GET /amp/v1/\x00 HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"
    yield b"POST /amp/v1/messages HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 3\r\n\r\nabc"


def _client_frame(payload: bytes, opcode: int = 2, mask: bytes = b"abcd") -> bytes:
    """One masked client frame (RFC 6455 §5.2)."""
    size = len(payload)
    head = bytes([0x80 | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 65536:
        head += bytes([0x80 | 126]) + size.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + size.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


# ------------------------------------------------------------- websocket


def websocket(data: bytes) -> None:
    trio.run(_websocket, data, clock=trio.testing.MockClock(autojump_threshold=0))


async def _websocket(data: bytes) -> None:
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request

    from ampcap.net.transport.wsmessages import WsMessageStream, WsRefused

    limit = 1 << 16
    client, server = trio.testing.memory_stream_pair()
    ws = WSConnection(ConnectionType.SERVER)
    ws.initiate_upgrade_connection([(b"host", b"x"), (b"upgrade", b"websocket"), (b"connection", b"upgrade"),
                                    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
                                    (b"sec-websocket-version", b"13")], b"/amp/v1/ws")
    assert type(next(ws.events())) is Request
    ws.send(AcceptConnection())
    messages = WsMessageStream(server, ws, max_size=limit)
    got = bytearray()

    async def feed() -> None:
        try:
            for i in range(0, len(data), 256):
                await client.send_all(data[i:i + 256])
            await client.send_stream.aclose()
            while await client.receive_some(65536):
                pass  # our Pongs and closes: drained so we never block
        except trio.BrokenResourceError:
            pass  # the server side closed after refusing: what the peer had left to send goes nowhere

    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        try:
            while chunk := await messages.receive_some(65536):
                got.extend(chunk)
        except WsRefused:
            assert messages.refused is not None and messages.refused[0] in (1002, 1003, 1009)
        await messages.aclose()
    # Only whole length-prefixed messages within the limit came out.
    pos = 0
    while pos < len(got):
        size = int.from_bytes(got[pos:pos + 4], "big")
        assert size <= limit and pos + 4 + size <= len(got), "a partial or oversize message came out"
        pos += 4 + size


def _seeds_websocket() -> Iterator[bytes]:
    yield _client_frame(b"\x00" * 10)
    yield _client_frame(b"ab", opcode=2)[:-1] + b"" + _client_frame(b"cd", opcode=0)
    yield bytes([0x02, 0x82]) + b"abcd" + b"xy" + _client_frame(b"z", opcode=0)  # a fragment, then the last one
    yield _client_frame(b"ping", opcode=9) + _client_frame(b"hello", opcode=1)
    yield _client_frame(b"\x03\xe8bye", opcode=8)
    yield b"\x82\x02ab"  # unmasked
    yield _client_frame(b"x" * 300)


# ---------------------------------------------------------------- bearer


def bearer(data: bytes) -> None:
    from ampcap.wire.bearer import verify_until

    token = data.decode("latin-1")
    try:
        principal, until = verify_until(token, resolver=_RESOLVER, audience=SERVER.did, now_ms=NOW)
    except AmpError as exc:
        assert exc.code == 3001, exc
        return
    assert principal.startswith("did:") and until >= NOW


def _seeds_bearer() -> Iterator[bytes]:
    from ampcap.wire.bearer import mint

    token = mint(CALLER, SERVER.did, now_ms=NOW, entropy=os.urandom)
    yield token.encode()
    yield mint(CALLER, "did:web:other.example", now_ms=NOW, entropy=os.urandom).encode()
    head, claims, sig = token.split(".")
    yield f"{head}.{claims}.".encode()
    yield f"{head}..{sig}".encode()


# --------------------------------------------------------------- session


_SID = bytes(range(16))


def session(data: bytes) -> None:
    from ampcap.session.control import init_body
    from ampcap.session.provider import SessionProvider
    from ampcap.wire.envelope import seal
    from ampcap.wire.receive import ReceivePipeline
    from ampcap.wire.registry import MessageType

    if not data:
        return
    typ = int(MessageType.REQUEST if data[0] & 1 == 0 else MessageType.RESPONSE)
    provider = SessionProvider(can_serve=lambda cid: cid == "org.ampcap.demo.echo:1.0.0", entropy=os.urandom)
    pipeline = ReceivePipeline(_RESOLVER)
    if data[0] & 2:  # a session exists already
        wire = seal(CALLER, typ=int(MessageType.REQUEST), to=SERVER.did, thread_id=_SID, now_ms=NOW,
                    entropy=os.urandom, body=init_body(_SID, [CALLER.did], 60_000))[1]
        provider.handle(pipeline.check(wire, NOW), "c", NOW)
    try:
        body = cbor2.loads(data[1:])
    except Exception:
        return
    thread = _SID if data[0] & 4 == 0 else None
    try:
        wire = seal(CALLER, typ=typ, to=SERVER.did, thread_id=thread, now_ms=NOW, entropy=os.urandom, body=body)[1]
        inbound = pipeline.check(wire, NOW)
    except AmpError:
        return  # not encodable, or refused before any session layer sees it
    actions = provider.handle(inbound, "c", NOW)
    replies = [a for a in actions if type(a).__name__ == "Send"]
    if typ == int(MessageType.REQUEST) and type(body) is dict and "sess_v" in body:
        assert len(replies) == 1, f"{len(replies)} answers to one control request"
    provider.handle_timer(NOW + 10**9)


def _seeds_session() -> Iterator[bytes]:
    from ampcap.session.control import init_body, op_body

    yield b"\x00" + cbor2.dumps(init_body(_SID, [CALLER.did], 60_000, pin={"org.ampcap.demo.echo":
                                                                          "org.ampcap.demo.echo:1.0.0"}))
    for name in ("suspend", "resume", "close"):
        yield b"\x02" + cbor2.dumps(op_body(name, _SID))
    yield b"\x02" + cbor2.dumps(op_body("update", _SID, expires_in_ms=5))
    yield b"\x03" + cbor2.dumps({"sess_v": 1, "op": "accept", "session_id": _SID, "status": "active"})


def http_targets(target: Any) -> dict[str, Any]:
    """The targets of this module, as ``targets.Target`` entries."""
    return {
        "http": target(http, _seeds_http, max_len=8192),
        "websocket": target(websocket, _seeds_websocket, max_len=4096),
        "bearer": target(bearer, _seeds_bearer, max_len=2048),
        "session": target(session, _seeds_session, max_len=2048),
    }
