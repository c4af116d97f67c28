"""The relay's RFC 002 HTTP endpoints (net/relay/http_front.py), served by a
real RelayServer on loopback and called with the project's HTTP client:
submit, poll, recipient ACK, principal binding, the federation endpoints'
trust rule, and a webhook push checked by its receiver."""

from __future__ import annotations

import os
import time
from typing import Any

import h11
import trio

from ampcap.net.relay import RelayServer
from ampcap.net.relay.http_front import RelayHttpFront
from ampcap.net.transport.httppool import HttpPool
from ampcap.net.transport.listener import open_listeners
from ampcap.net.transport.url import AmpUrl
from ampcap.relay import RelayConfig
from ampcap.relay.federation import ForwardRequest, decode_forward_answer, encode_forward
from ampcap.relay.webhook import RELAY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, read_webhook
from ampcap.store.database import StateStore
from ampcap.wire.bearer import mint
from ampcap.wire.cbor import loads
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.cbor import DEFAULT_LIMITS
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.registry import MessageType

CBOR = "application/cbor"


def _now() -> int:
    return time.time_ns() // 1_000_000


def _headers(who: Identity | None, relay: str) -> dict[str, str]:
    headers = {"content-type": CBOR}
    if who is not None:
        headers["authorization"] = "Bearer " + mint(who, relay, now_ms=_now(), entropy=os.urandom)
    return headers


def _message(sender: Identity, to: str, body: Any, *, typ: int = int(MessageType.MESSAGE), **kw: Any) -> bytes:
    return seal(sender, typ=typ, to=to, body=body, now_ms=_now(), entropy=os.urandom, ttl=60_000, **kw)[1]


async def _with_relay(test: Any, **server_kw: Any) -> None:
    relay_id = Identity.generate(os.urandom)
    server = RelayServer(relay_id, StateStore.open(None), config=RelayConfig(relay_did=relay_id.did), **server_kw)
    front = RelayHttpFront(server)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        port = (await nursery.start(front.serve, "127.0.0.1", 0))[0].socket.getsockname()[1]
        pool = HttpPool(AmpUrl("http", "127.0.0.1", port), timeout_s=10)
        try:
            await test(server, pool)
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


def test_submit_poll_ack_and_refusals_over_http() -> None:
    alice, bob, mallory = (Identity.generate(os.urandom) for _ in range(3))

    async def test(server: RelayServer, pool: HttpPool) -> None:
        relay = server.identity.did
        empty = await pool.request("GET", "/amp/v1/messages", _headers(bob, relay))  # bob registers by polling
        assert empty.status == 200 and loads(empty.body)["messages"] == []
        raw = _message(alice, bob.did, {"text": "hello"})
        posted = await pool.request("POST", "/amp/v1/messages", _headers(alice, relay), raw)
        assert posted.status == 202  # accepted; the answer comes later
        ack = decode_envelope(posted.body, DEFAULT_LIMITS)
        assert ack.sender == relay and ack.typ == int(MessageType.ACK) and ack.body["ack_source"] == "relay"
        page = loads((await pool.request("GET", "/amp/v1/messages?limit=10", _headers(bob, relay))).body)
        assert page["messages"] == [raw]  # the exact bytes alice sent
        # Polling again before acknowledging starts a new pass: still there.
        again = loads((await pool.request("GET", "/amp/v1/messages", _headers(bob, relay))).body)
        assert again["messages"] == [raw]
        # A forged recipient ACK (mallory, not a recipient) commits nothing.
        env = decode_envelope(raw, DEFAULT_LIMITS)
        forged = _message(mallory, alice.did, {"ack_source": "recipient", "received_at": _now()},
                          typ=int(MessageType.ACK), reply_to=env.id)
        await pool.request("POST", "/amp/v1/messages", _headers(mallory, relay), forged)
        assert loads((await pool.request("GET", "/amp/v1/messages", _headers(bob, relay))).body)["messages"] == [raw]
        recipient_ack = _message(bob, alice.did, {"ack_source": "recipient", "received_at": _now()},
                                 typ=int(MessageType.ACK), reply_to=env.id)
        acked = await pool.request("POST", "/amp/v1/messages", _headers(bob, relay), recipient_ack)
        assert acked.status in (200, 202)
        assert loads((await pool.request("GET", "/amp/v1/messages", _headers(bob, relay))).body)["messages"] == []
        assert server.counters["committed"] >= 1
        # Principal binding: alice's message posted with mallory's token.
        bound = await pool.request("POST", "/amp/v1/messages", _headers(mallory, relay),
                                   _message(alice, bob.did, "x"))
        assert bound.status == 403 and bound.headers.get("x-amp-error-code") == "3001"
        anonymous = await pool.request("POST", "/amp/v1/messages", _headers(None, relay), _message(alice, bob.did, "x"))
        assert anonymous.status == 401
        cursor = await pool.request("GET", "/amp/v1/messages?cursor=99-1", _headers(bob, relay))
        assert cursor.status == 400 and cursor.headers.get("x-amp-error-code") == "1001"
        # Not registered, no route: 2001 (404), an ERROR signed by the relay.
        stranger = Identity.generate(os.urandom).did
        unknown = await pool.request("POST", "/amp/v1/messages", _headers(alice, relay),
                                     _message(alice, stranger, "x"))
        assert unknown.headers.get("x-amp-error-code") == "2001"
        assert decode_envelope(unknown.body, DEFAULT_LIMITS).sender == relay
        # Federation: alice is no trusted relay.
        wrapper = encode_forward(ForwardRequest(message=raw, from_did=alice.did, recipient_did=bob.did,
                                                relay_path=(alice.did,), hop_limit=4, upstream_relay=alice.did,
                                                transfer_mode="single"))
        forward = await pool.request("POST", "/amp/v1/relay/forward", _headers(alice, relay), wrapper)
        assert forward.status == 403 and decode_forward_answer(forward.body).error_code == 3001
        commit = await pool.request("POST", "/amp/v1/relay/commit", _headers(alice, relay), b"\xa0")
        assert commit.status in (400, 403)

    trio.run(_with_relay, test)


async def _webhook_receiver(nursery: trio.Nursery, got: list[tuple[dict[str, str], bytes]]) -> int:
    """A one-route HTTP server that records what is POSTed to it (200)."""

    async def handle(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        headers: dict[str, str] = {}
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if type(event) is h11.Request:
                headers = {k.decode().lower(): v.decode() for k, v in event.headers}
            elif type(event) is h11.Data:
                body += event.data
            elif type(event) is h11.EndOfMessage:
                got.append((headers, body))
                await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                                      + conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
                headers, body = {}, b""
            else:
                return

    listeners = await open_listeners("127.0.0.1", 0)
    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return int(listeners[0].socket.getsockname()[1])


def test_webhook_push_is_signed_and_checks_at_the_receiver() -> None:
    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    got: list[tuple[dict[str, str], bytes]] = []

    async def main() -> None:
        async with trio.open_nursery() as outer:
            port = await _webhook_receiver(outer, got)

            async def test(server: RelayServer, pool: HttpPool) -> None:
                raw = _message(alice, bob.did, {"n": 1})
                posted = await pool.request("POST", "/amp/v1/messages", _headers(alice, server.identity.did), raw)
                assert posted.status == 202
                with trio.fail_after(10):
                    while not got:
                        await trio.sleep(0.02)
                lowered, body = got[0]
                # read_webhook wants the names as RFC 002 spells them (the caller folds case).
                headers = {name: lowered[name.lower()] for name in (RELAY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)}
                delivery = read_webhook(headers, body, resolver=DidKeyResolver(), trusted={server.identity.did},
                                        now_ms=_now())
                assert delivery.message == raw and delivery.relay == server.identity.did
                forged = dict(headers, **{SIGNATURE_HEADER: headers[SIGNATURE_HEADER][::-1]})
                try:
                    read_webhook(forged, body, resolver=DidKeyResolver(), trusted={server.identity.did}, now_ms=_now())
                except Exception as exc:  # AmpError 3001
                    assert getattr(exc, "code", None) == 3001
                else:
                    raise AssertionError("a bad signature was accepted")

            from ampcap.net.relay import RelaySettings

            await _with_relay(test, settings=RelaySettings(webhooks=((bob.did, f"http://127.0.0.1:{port}/hook"),)))
            outer.cancel_scope.cancel()

    trio.run(main)


def test_two_relays_federate_a_message_with_custody_transfer() -> None:
    """Relay A routes bob's messages to relay B (which trusts A): alice posts
    at A, bob polls at B and gets alice's exact bytes; A's copy goes with
    B's transfer receipt (single custody)."""
    from ampcap.relay import parse_routes

    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    ids = [Identity.generate(os.urandom) for _ in range(2)]

    async def main() -> None:
        servers = [RelayServer(i, StateStore.open(None), config=RelayConfig(relay_did=i.did)) for i in ids]
        async with trio.open_nursery() as nursery:
            ports = []
            for server in servers:
                await nursery.start(server.run)
                ports.append((await nursery.start(RelayHttpFront(server).serve, "127.0.0.1", 0))[0]
                             .socket.getsockname()[1])
            a, b = servers
            a.core.routes = parse_routes({"peer": [{"did": b.identity.did, "url": f"http://127.0.0.1:{ports[1]}",
                                                    "trusted": True}],
                                          "route": [{"recipient": bob.did, "via": [b.identity.did]}]})
            b.core.routes = parse_routes({"peer": [{"did": a.identity.did, "url": f"http://127.0.0.1:{ports[0]}",
                                                    "trusted": True}]})
            pool_a = HttpPool(AmpUrl("http", "127.0.0.1", ports[0]), timeout_s=10)
            pool_b = HttpPool(AmpUrl("http", "127.0.0.1", ports[1]), timeout_s=10)
            try:
                raw = _message(alice, bob.did, {"text": "far away"})
                posted = await pool_a.request("POST", "/amp/v1/messages", _headers(alice, a.identity.did), raw)
                assert posted.status == 202
                got: list[bytes] = []
                with trio.fail_after(15):
                    while not got:
                        page = loads((await pool_b.request("GET", "/amp/v1/messages",
                                                           _headers(bob, b.identity.did))).body)
                        got = page["messages"]
                        await trio.sleep(0.05)
                assert got == [raw]
                with trio.fail_after(10):  # A let go of its copy once B's receipt verified
                    while a.store.query("SELECT count(*) FROM relay_record", ())[0][0] != 0:
                        await trio.sleep(0.05)
            finally:
                await pool_a.aclose()
                await pool_b.aclose()
                nursery.cancel_scope.cancel()

    trio.run(main)
