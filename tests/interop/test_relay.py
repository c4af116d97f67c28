"""The Rust-example compatibility path: two ampcap peers exchange
CAP_INVOKE/CAP_RESULT through a relay that behaves like the example's
``amp002-server`` (tools/stand_in_relay.py), and the interop harness runs
its vectors through that relay under ``--compat rust-example``. The RFC 003
relay vectors run against ampcap's own relay (the stand-in imitates the
example only, which fails them)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import msgspec
import pytest

from ampcap.interop.pay_vectors import PAY_VECTORS
import trio

sys.path.insert(0, str(Path(__file__).parent))
from demo_target import EchoProvider, attach_to_relay, make_connection  # noqa: E402

from ampcap.interop.probe import ProbeSettings  # noqa: E402
from ampcap.interop.runner import run_vectors  # noqa: E402
from ampcap.interop.suite import Where, suite_vectors  # noqa: E402
from ampcap.interop.vectors import Status, demo_subject  # noqa: E402
from ampcap.net.transport.clock import wall_clock_ms
from ampcap.net.transport.stream import ConnectionDriver  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.peer.connection import Role  # noqa: E402
from ampcap.peer.events import Event, MessageReceived  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.wire.envelope import decode_envelope, encode_envelope, seal  # noqa: E402
from ampcap.wire.frames import Framing  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402
from ampcap.wire.signing import Profile  # noqa: E402

CAPTURES = Path("/work/shared/captures/rust-example")
RELAY_DID = "did:web:example.com:relay:main"  # the example's relay identity (captures/demo-keys.json)
_spec = importlib.util.spec_from_file_location(
    "stand_in_relay", Path(__file__).resolve().parents[2] / "tools" / "stand_in_relay.py")
assert _spec is not None and _spec.loader is not None
stand_in_relay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stand_in_relay)


@pytest.mark.trio
async def test_two_ampcap_peers_exchange_invoke_and_result_through_the_relay() -> None:
    relay = stand_in_relay.StandInRelay()
    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    replies: list[MessageReceived] = []
    got_reply = trio.Event()

    async def on_event(event: Event) -> None:
        if isinstance(event, MessageReceived):
            replies.append(event)
            got_reply.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            await nursery.start(attach_to_relay, EchoProvider(), bob, port, RELAY_DID)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            driver = ConnectionDriver(make_connection(alice, Role.CLIENT, raw=True), stream, on_event=on_event)
            driver.conn.start(wall_clock_ms())
            nursery.start_soon(driver.run)
            # Register with the relay first (its first parsable frame names us),
            # then give bob's registration a moment to be processed.
            driver.send_nowait(Outbound(typ=MessageType.HELLO, body={"versions": ["0.30.0"]}, to=RELAY_DID))
            await trio.sleep(0.1)
            invoke = driver.send_nowait(Outbound(
                typ=MessageType.CAP_INVOKE, to=bob.did,
                body={"id": "org.ampcap.demo.echo:1.1.0", "params": {"message": "via relay"}}))
            await got_reply.wait()
            await trio.sleep(0.1)  # a second terminal reply would arrive now
            nursery.cancel_scope.cancel()

    assert len(replies) == 1
    env = replies[0].inbound.envelope
    assert (env.typ, env.sender, env.reply_to) == (MessageType.CAP_RESULT, bob.did, invoke.id)
    assert replies[0].inbound.body == {"status": "success",
                                       "result": {"message": "via relay", "version": "1.1.0"}}
    # Both peers' HELLOs were addressed to the relay, which is nobody's connection: dropped.
    assert relay.forwarded == 2 and relay.dropped == 2


@pytest.mark.trio
async def test_interop_vectors_through_the_relay_in_rust_example_compat() -> None:
    relay = stand_in_relay.StandInRelay()
    bob = Identity.generate(os.urandom)
    settings = ProbeSettings(framing=Framing.RAW, profile=Profile.RUST_EXAMPLE, hello_versions=("0.30.0",),
                             timeout_s=1.0, settle_s=0.05)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            await nursery.start(attach_to_relay, EchoProvider(), bob, port, RELAY_DID)
            result = await run_vectors(parse_url(f"amp://127.0.0.1:{port}"), settings, demo_subject(),
                                       target_did=bob.did)
            nursery.cancel_scope.cancel()
    statuses = {r.vector_id: r.status for r in result.results}
    assert [v for v, s in statuses.items() if s is Status.FAIL] == []
    skipped = {r.vector_id: r.notes for r in result.results if r.status is Status.SKIP}
    target_skips = {v for v in skipped if v in {s.id for s in suite_vectors() if s.where is Where.TARGET}}
    # RFC 006's vectors skip under raw framing: that profile has no sessions to
    # test; RFC 007's too (no payment workflow there).
    pay = {v.id for v in PAY_VECTORS}
    assert target_skips - pay == {"001:hello", "001:hello-reject", "002:A.2", "002:A.7", "006:A.2", "006:A.15",
                                  "006:A.17"}
    assert all("raw framing" in skipped[v] for v in pay)
    assert all(skipped.values())
    assert all("raw-framing" in skipped[v] for v in ("006:A.2", "006:A.15", "006:A.17"))
    assert "closing" in result.by_id()["002:A.5"].notes  # the relay closes on > 8 MiB


@pytest.mark.trio
async def test_relay_drops_garbage_silently_and_closes_on_oversize_lengths() -> None:
    relay = stand_in_relay.StandInRelay()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"\x00\x00\x00\x03abc")  # not CBOR: dropped, connection stays
            await stream.send_all((stand_in_relay.MAX_FRAME + 1).to_bytes(4, "big"))
            assert await stream.receive_some(100) == b""  # closed without a word
            nursery.cancel_scope.cancel()
    assert relay.dropped == 1 and relay.forwarded == 0 and relay.online == {}


def _captured_frames() -> list[bytes]:
    frames = []
    for name in ("conn1-c2s.hex", "conn2-c2s.hex"):
        path = CAPTURES / name
        data = bytes.fromhex(path.read_text().strip()) if path.exists() else b""
        while len(data) >= 4:
            size = int.from_bytes(data[:4], "big")
            frames.append(data[4:4 + size])
            data = data[4 + size:]
    return frames


def _registration(did: str) -> bytes:
    """A raw frame whose ``from`` is ``did``, addressed to nobody (the relay
    checks shape, not signatures, so the signature need not verify)."""
    _, wire = seal(Identity.generate(os.urandom), typ=MessageType.HELLO, to="did:web:nobody.invalid",
                   body={"versions": ["0.30.0"]}, now_ms=wall_clock_ms(), entropy=os.urandom)
    wire = encode_envelope(msgspec.structs.replace(decode_envelope(wire), sender=did))
    return len(wire).to_bytes(4, "big") + wire


@pytest.mark.trio
async def test_relay_forwards_a_captured_rust_example_frame_byte_for_byte() -> None:
    """Unsorted envelope keys and the example's Sig_Input survive the hop unchanged."""
    chosen = [f for f in _captured_frames() if RELAY_DID not in decode_envelope(f).recipients]
    if not chosen:
        pytest.skip("the Rust example captures are not present")
    payload = chosen[0]
    frame = len(payload).to_bytes(4, "big") + payload
    relay = stand_in_relay.StandInRelay()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            receiver = await trio.open_tcp_stream("127.0.0.1", port)
            await receiver.send_all(_registration(decode_envelope(payload).recipients[0]))
            await trio.sleep(0.05)
            sender = await trio.open_tcp_stream("127.0.0.1", port)
            await sender.send_all(frame)
            got = b""
            while len(got) < len(frame):
                got += await receiver.receive_some(65536)
            nursery.cancel_scope.cancel()
    assert got == frame


@pytest.mark.trio
async def test_two_ampcap_daemons_exchange_invoke_and_result_through_the_relay() -> None:
    """The same exchange with the real daemon on both ends (Rust-example profile)."""
    from ampcap.caps.catalog import Catalog
    from ampcap.caps.demo import demo_manifest
    from ampcap.caps.params import ParamsValidator
    from ampcap.net.daemon.core import Daemon, DaemonConfig
    from ampcap.peer.config import ConnectionConfig

    # Over a relay the connection's far end is the relay, not one principal:
    # strict principal binding (RFC 002 §7.1) cannot apply, senders vary.
    config = DaemonConfig(profile=Profile.RUST_EXAMPLE, connection=ConnectionConfig(
        framing=Framing.RAW, profile=Profile.RUST_EXAMPLE, strict_principal=False, keepalive_interval_ms=None))
    manifest = demo_manifest()
    provider = Daemon(Identity.generate(os.urandom), Catalog(list(manifest.capabilities), cursor_key=os.urandom(32)),
                      params=ParamsValidator(manifest.schema_store()), config=config)
    caller = Daemon(Identity.generate(os.urandom), Catalog([], cursor_key=os.urandom(32)), config=config)
    relay = stand_in_relay.StandInRelay()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            await nursery.start(provider.run)
            await nursery.start(caller.run)
            url = f"amp://127.0.0.1:{port}"
            # Register the provider the way `ampcap serve --relay` does.
            await provider.join_relay(url, timeout_s=1.0)
            await trio.sleep(0.1)
            link = await caller.connect(url, peer_did=provider.identity.did, timeout_s=1.0)
            result = await caller.calls.invoke(link, ("org.ampcap.demo.math.add", "1.0.0"), {"a": 2, "b": 40},
                                               timeout_ms=5_000)
            nursery.cancel_scope.cancel()
    assert result == {"sum": 42}


# ------------------------------------------------ RFC 003 vectors (--relay)

RELAY_IDS = ["003:A.1", "003:A.5", "003:A.6", "003:A.7", "003:A.15"]


@pytest.mark.trio
async def test_ampcap_relay_passes_the_rfc003_vectors_driven_from_outside() -> None:
    """The RFC 003 vectors against the real relay (``ampcap relay`` in process,
    as ``interop --self`` starts it), trusting the harness as an upstream."""
    from ampcap.interop.selftarget import serve_self_relay

    upstream = Identity.generate(os.urandom)
    settings = ProbeSettings(timeout_s=2.0, settle_s=0.05)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            relay, relay_http, relay_did = await nursery.start(serve_self_relay, upstream.did)
            result = await run_vectors(None, settings, demo_subject(), relay=relay, relay_did=relay_did,
                                       relay_framing="rfc002", relay_forward=str(relay_http),
                                       relay_upstream=upstream)
            nursery.cancel_scope.cancel()
    results = {r.vector_id: (r.status, r.notes) for r in result.results}
    assert {v: results[v] for v in RELAY_IDS if results[v][0] is not Status.PASS} == {}
    assert "loop" in results["003:A.5"][1] and "hop_limit" in results["003:A.6"][1]
    # Nothing else runs without a target, and says why.
    others = {v: r for v, r in results.items() if v not in RELAY_IDS}
    assert {s for s, _ in others.values()} == {Status.SKIP} and all(n for _, n in others.values())


@pytest.mark.trio
async def test_the_rust_example_relay_stays_silent_and_delivers_twice_so_fails_those_vectors() -> None:
    """The stand-in behaves like the Rust example: no RFC 003 (no ERROR for a
    ttl = 0 message it cannot deliver, no duplicate suppression)."""
    results = await _relay_run_silent()
    assert results["003:A.1"][0] is Status.FAIL and "no terminal reply" in results["003:A.1"][1]
    assert results["003:A.7"][0] is Status.FAIL and "2 deliveries" in results["003:A.7"][1]


async def _relay_run_silent() -> dict[str, tuple[Status, str]]:
    settings = ProbeSettings(timeout_s=0.5, settle_s=0.05)
    relay = stand_in_relay.StandInRelay()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            result = await run_vectors(None, settings, demo_subject(), relay=parse_url(f"amp://127.0.0.1:{port}"),
                                       only=["003:A.1", "003:A.7"])
            nursery.cancel_scope.cancel()
    return {r.vector_id: (r.status, r.notes) for r in result.results}


@pytest.mark.trio
async def test_a_daemon_registered_at_a_relay_heals_after_a_caller_with_its_own_did_came_and_went() -> None:
    """Issue 26: a caller run with the daemon's own key registers at the relay
    under the daemon's DID, and when it leaves the relay forgets that DID while
    the daemon's link stays open and silent. The daemon's self-addressed probe
    notices; its keeper (`serve --relay`) dials again, and callers reach it."""
    from ampcap.caps.catalog import Catalog
    from ampcap.caps.demo import demo_manifest
    from ampcap.caps.params import ParamsValidator
    from ampcap.cli.serve import _keep_linked
    from ampcap.errors import AmpError
    from ampcap.net.daemon.core import Daemon

    manifest = demo_manifest()
    provider = Daemon(Identity.generate(os.urandom), Catalog(list(manifest.capabilities), cursor_key=os.urandom(32)),
                      params=ParamsValidator(manifest.schema_store()))
    same_key = Daemon(provider.identity, Catalog([], cursor_key=os.urandom(32)))
    caller = Daemon(Identity.generate(os.urandom), Catalog([], cursor_key=os.urandom(32)))
    relay = stand_in_relay.StandInRelay()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(relay.serve, "127.0.0.1", 0)
            for daemon in (provider, same_key, caller):
                await nursery.start(daemon.run)
            url = f"amp://127.0.0.1:{port}"

            async def dial() -> object:
                return await provider.join_relay(url, timeout_s=1.0, probe_s=0.3)

            nursery.start_soon(_keep_linked, provider, "--relay", dial, await dial())
            await trio.sleep(0.1)
            impostor = await same_key.join_relay(url, timeout_s=1.0)  # takes the registration over
            await trio.sleep(0.1)
            impostor.driver.close()
            await impostor.driver.closed.wait()
            await trio.sleep(0.1)
            assert provider.identity.did not in relay.online  # the relay forgot the daemon...
            link = await caller.join_relay(url, timeout_s=1.0)
            with trio.move_on_after(15):
                while True:  # ...until its probe notices and its keeper registers it again
                    try:
                        result = await caller.calls.invoke(link, ("org.ampcap.demo.math.add", "1.0.0"),
                                                           {"a": 2, "b": 40}, timeout_ms=500,
                                                           to=provider.identity.did)
                        break
                    except AmpError as exc:
                        assert exc.code == 5003
            nursery.cancel_scope.cancel()
    assert result == {"sum": 42}
