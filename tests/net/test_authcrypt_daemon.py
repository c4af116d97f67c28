"""The daemon receives authcrypt (RFC 001 §8.2: decrypt, then verify) and
answers an encrypted request encrypted: with the public Rust example's
recorded traffic, and between two ampcap peers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import ECHO, ERROR, INVOKE, RESULT, demo_catalog, demo_daemon, new_identity  # noqa: E402

from ampcap.net.transport.clock import Clock
from ampcap.net.daemon.core import Daemon, DaemonConfig
from ampcap.net.api.peer import connect
from ampcap.net.transport.stream import ConnectionDriver
from ampcap.peer.config import rust_example_config
from ampcap.peer.connection import Connection, Role
from ampcap.peer.events import MessageReceived, Negotiated
from ampcap.peer.outbound import Outbound
from ampcap.wire.envelope import decode_envelope
from ampcap.wire.identity import ChainResolver, DidKeyResolver, Identity
from ampcap.wire.keyring import Keyring
from ampcap.wire.receive import Inbound, ReceivePipeline
from ampcap.wire.signing import Profile

CAPTURES = Path(__file__).resolve().parents[3] / "shared" / "captures" / "rust-example"
if not CAPTURES.exists():
    CAPTURES = Path("/work/shared/captures/rust-example")
ALICE_DID, BOB_DID = "did:web:example.com:agent:alice", "did:web:example.com:agent:bob"
needs_captures = pytest.mark.skipif(not CAPTURES.exists(), reason="Rust example captures not available")


def _demo_keys() -> dict[str, dict[str, str]]:
    keys: dict[str, dict[str, str]] = json.loads((CAPTURES / "demo-keys.json").read_text())
    return keys


def _example_identity(did: str) -> Identity:
    k = _demo_keys()[did]
    return Identity.from_seed(bytes.fromhex(k["ed25519_seed_byte"]) * 32, did=did,
                              x25519_secret=bytes.fromhex(k["x25519_secret_byte"]) * 32)


def _public_keyring() -> Keyring:
    return Keyring.from_mapping({did: {"ed25519": k["ed25519"], "x25519": k["x25519"]}
                                 for did, k in _demo_keys().items()})


def _captured_message_to_bob() -> bytes:
    """alice's authcrypt MESSAGE to bob, as the example's client sent it."""
    for path in sorted(CAPTURES.glob("conn*-c2s.hex")):
        data = bytes.fromhex(path.read_text().strip())
        pos = 0
        while pos < len(data):  # the example's framing: a bare 4-byte length
            size = int.from_bytes(data[pos:pos + 4], "big")
            frame = data[pos + 4:pos + 4 + size]
            env = decode_envelope(frame)
            if env.typ == 0x10 and env.sender == ALICE_DID and env.enc is not None:
                return frame
            pos += 4 + size
    raise AssertionError("no authcrypt MESSAGE from alice in the captures")


async def _read_raw_frame(stream: trio.abc.Stream) -> bytes:
    buf = b""
    with trio.fail_after(10):
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            chunk = await stream.receive_some()
            assert chunk, "the daemon closed without answering"
            buf += chunk
    return buf[4:4 + int.from_bytes(buf[:4], "big")]


@needs_captures
@pytest.mark.trio
async def test_the_rust_examples_authcrypt_message_is_decrypted_and_answered_1005() -> None:
    message = _captured_message_to_bob()
    sent_at = decode_envelope(message).ts
    ring = _public_keyring()
    catalog, params = demo_catalog()
    connection = rust_example_config()
    daemon = Daemon(_example_identity(BOB_DID), catalog, params=params, resolver=ChainResolver(DidKeyResolver(), ring),
                    config=DaemonConfig(connection=connection, profile=connection.profile),
                    clock=Clock(wall_ms=lambda: sent_at + 50))
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        nursery.start_soon(daemon.serve_stream, server_end)
        await client_end.send_all(len(message).to_bytes(4, "big") + message)
        reply = await _read_raw_frame(client_end)
        nursery.cancel_scope.cancel()
    # What alice's side would do with the answer: verify it (the example's
    # Sig_Input), then open it with alice's secret.
    alice = ReceivePipeline(ChainResolver(DidKeyResolver(), ring), profile=Profile.RUST_EXAMPLE,
                            decrypt_with=[_example_identity(ALICE_DID)])
    got = alice.check(reply, sent_at + 60)
    assert got.envelope.typ == ERROR and got.envelope.reply_to == decode_envelope(message).id
    assert got.decrypted and got.envelope.enc is not None  # encrypted back, like the request
    assert got.body["code"] == 1005  # MESSAGE is not something ampcap serves: said so, after decrypting


class _Client:
    """A bare client Connection that can open what is encrypted to it."""

    def __init__(self, identity: Identity, stream: trio.abc.Stream) -> None:
        self.inbox: list[Inbound] = []
        self.changed = trio.Event()
        self.ready = trio.Event()
        conn = Connection(role=Role.CLIENT, identity=identity, entropy=os.urandom,
                          pipeline=ReceivePipeline(DidKeyResolver(), decrypt_with=[identity]))
        self.driver = ConnectionDriver(conn, stream)
        self.driver.on_event = self.on_event

    async def on_event(self, event: object) -> None:
        if isinstance(event, MessageReceived):
            self.inbox.append(event.inbound)
        elif isinstance(event, Negotiated):
            self.ready.set()
        self.changed.set()
        self.changed = trio.Event()


@pytest.mark.trio
async def test_an_encrypted_invoke_between_two_ampcap_peers_is_answered_encrypted() -> None:
    async with demo_daemon() as daemon:
        client_end, server_end = trio.testing.memory_stream_pair()
        client = _Client(new_identity(), client_end)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.serve_stream, server_end)
            nursery.start_soon(client.driver.run)
            with trio.fail_after(10):
                await client.ready.wait()
            out = Outbound(typ=INVOKE, body={"id": f"{ECHO}:1.0.0", "params": {"message": "secret"}}, encrypt=True)
            env = client.driver.send_nowait(out)
            assert env is not None and env.enc is not None and env.body is None  # nothing readable on the wire
            with trio.fail_after(10):
                while not [m for m in client.inbox if m.envelope.reply_to == env.id]:
                    await client.changed.wait()
            [reply] = [m for m in client.inbox if m.envelope.reply_to == env.id]
            assert reply.envelope.typ == RESULT and reply.envelope.enc is not None and reply.decrypted
            assert reply.body["result"] == {"message": "secret", "version": "1.0.0"}
            assert b"secret" not in reply.raw
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_the_python_api_invokes_encrypted() -> None:
    async with demo_daemon() as daemon:
        listeners = await daemon.listen("127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        async with connect(f"amp://127.0.0.1:{port}", identity=new_identity()) as remote:
            assert await remote.invoke(f"{ECHO}:1.0.0", params={"message": "x"}, encrypt=True) == \
                {"message": "x", "version": "1.0.0"}
