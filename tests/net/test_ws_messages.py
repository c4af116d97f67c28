"""The WebSocket message layer (net/transport/wsmessages.py) fed raw client
frames over a memory stream: what one read holding several frames does."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request

from ampcap.net.transport.wsmessages import WsMessageStream


def client_frame(payload: bytes, opcode: int) -> bytes:
    """One final, masked client frame (RFC 6455 §5.2), payload under 126 bytes."""
    mask = os.urandom(4)
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def accepted_server() -> WSConnection:
    ws = WSConnection(ConnectionType.SERVER)
    ws.initiate_upgrade_connection([(b"host", b"x"), (b"upgrade", b"websocket"), (b"connection", b"upgrade"),
                                    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
                                    (b"sec-websocket-version", b"13")], b"/amp/v1/ws")
    assert type(next(ws.events())) is Request
    ws.send(AcceptConnection())
    return ws


@pytest.mark.trio
async def test_a_ping_and_the_close_in_one_read_end_the_input_without_a_pong() -> None:
    # Found by the websocket fuzz target: the events of one read are parsed
    # first, so the Ping was answered after the Close had been taken in, and
    # wsproto refused to send the Pong (LocalProtocolError out of receive_some).
    client, server = trio.testing.memory_stream_pair()
    messages = WsMessageStream(server, accepted_server(), max_size=1 << 16)
    await client.send_all(client_frame(b"ping", 9) + client_frame(b"\x03\xe8bye", 8))
    with trio.fail_after(5):
        assert await messages.receive_some(65536) == b""
    assert messages.peer_closed == (1000, "bye")
    with trio.fail_after(5):
        answer = await client.receive_some(65536)
    assert answer[0] == 0x88  # our close answers theirs; no Pong (0x8a) before it


@pytest.mark.trio
async def test_a_ping_on_an_open_connection_is_answered() -> None:
    client, server = trio.testing.memory_stream_pair()
    messages = WsMessageStream(server, accepted_server(), max_size=1 << 16)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(messages.receive_some, 65536)
        await client.send_all(client_frame(b"ping", 9))
        with trio.fail_after(5):
            answer = await client.receive_some(65536)
        assert answer[:2] == b"\x8a\x04" and answer[2:] == b"ping"
        nursery.cancel_scope.cancel()
