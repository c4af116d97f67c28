"""Delegated invokes and DELEG_* messages through a real daemon (RFC 005 with
RFC 004 §7.2): the Python API presents a chain; policy grants by delegator."""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))

from amp_helpers import ERROR, RESULT, demo_daemon, memory_peer, new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.deleg.bodies import grant_body, query_body, revoke_body  # noqa: E402
from ampcap.deleg.chain import evidence_body  # noqa: E402
from ampcap.deleg.credential import Credential, issue, revoke  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402
from ampcap.peer.policy import parse_policy  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

ECHO = "org.ampcap.demo.echo"
HOUR = 3_600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def grant(frm: Identity, to: str, *, caps: list[str] | None = None, sub: bool = False, **kw: Any) -> Credential:
    now = now_ms()
    return issue(frm, delegation_id=kw.pop("delegation_id", f"d-{os.urandom(4).hex()}"), delegate=to,
                 issued_at=now - 1000, expires_at=kw.pop("expires_at", now + HOUR),
                 capabilities=caps if caps is not None else [ECHO], allow_subdelegation=sub, **kw)


def make_peer(policy: dict[str, Any]) -> Peer:
    peer = Peer(new_identity(), policy=parse_policy(policy))

    @peer.capability("org.example.whoami", "1.0.0")
    async def whoami() -> dict:
        return {"ok": True}

    @peer.capability("org.example.onbehalf", "1.0.0")
    async def onbehalf(ctx: Any) -> dict:
        return {"delegator": ctx.delegator}

    return peer


@pytest.mark.trio
async def test_delegated_invoke_end_to_end_with_policy_by_delegator() -> None:
    alice, bob, carol, mallory = (new_identity() for _ in range(4))
    peer = make_peer({"default": "deny", "delegators": [alice.did]})
    async with peer.serve("amp://127.0.0.1:0") as server:
        ab = grant(alice, bob.did, caps=["org.example.whoami"], sub=True)
        bc = grant(bob, carol.did, caps=["org.example.whoami:1.0.0"])
        async with connect(server.url, identity=bob) as remote:
            # Bob alone is not admitted; with Alice's credential he is.
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0")
            assert info.value.code == 3001
            assert await remote.invoke("org.example.whoami:1.0.0", delegation=[ab]) == {"ok": True}
            # The same chain by name and version, and the scope holds the id.
            assert await remote.invoke("org.example.whoami", version="1.0.0", delegation=[ab]) == {"ok": True}
            # A chain that ends at Carol is not Bob's (A.6): 3001.
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0", delegation=[ab, bc])
            assert info.value.code == 3001
        async with connect(server.url, identity=carol) as remote:
            assert await remote.invoke("org.example.whoami:1.0.0", delegation=evidence_body([ab, bc])) == \
                {"ok": True}
        async with connect(server.url, identity=bob) as remote:
            # The capability learns on whose behalf it runs.
            ab2 = grant(alice, bob.did, caps=["org.example.onbehalf"])
            assert await remote.invoke("org.example.onbehalf:1.0.0", delegation=[ab2]) == {"delegator": alice.did}
        async with connect(server.url, identity=mallory) as remote:
            # Mallory signs a link in Alice's name: forged (3001: the gate
            # refused her, and the chain cannot change that).
            forged = grant(mallory, mallory.did, caps=["org.example.whoami"])
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0", delegation=[forged])
            assert info.value.code == 3001


@pytest.mark.trio
async def test_delegation_errors_of_an_admitted_caller() -> None:
    alice, bob = new_identity(), new_identity()
    async with demo_daemon() as daemon:
        async with memory_peer(daemon, bob) as raw:
            good = evidence_body([grant(alice, bob.did)])
            reply = await raw.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "hi"}, "delegation": good})
            assert reply.envelope.typ == RESULT and reply.body["result"]["message"] == "hi"
            # Outside the scope: 3004 with minimal detail, what the caller's own
            # credential shows (issue 38 item 11), no DID.
            reply = await raw.invoke({"id": "org.ampcap.demo.noop:1.0.0", "params": {}, "delegation": good})
            assert reply.envelope.typ == ERROR and reply.body["code"] == 3004
            assert reply.body["message"] == "delegation invalid: the capability is outside the delegated scope"
            expired = evidence_body([grant(alice, bob.did, expires_at=now_ms() - 500)])
            reply = await raw.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}, "delegation": expired})
            assert reply.body["code"] == 3004 and reply.body["message"] == "delegation invalid: chain[0] has expired"
            # A signature: one sentence whatever failed (no hint whether the signer's DID exists).
            forged = evidence_body([grant(alice, bob.did)])
            cred = forged["chain"][0]["credential"]
            forged["chain"][0]["credential"] = cred[:-1] + bytes([cred[-1] ^ 1])
            reply = await raw.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}, "delegation": forged})
            assert reply.body["code"] == 3004
            assert reply.body["message"] == "delegation invalid: a credential's signature cannot be verified"
            assert alice.did not in reply.body["message"]
            # A.14: evidence only in ext (nothing in the body).
            env = raw.send(int(MessageType.CAP_INVOKE), {"id": f"{ECHO}:1.0.0", "params": {"message": "x"}},
                           ext={"delegation": good})
            reply = await raw.terminal(env.id)
            assert reply.envelope.typ == ERROR and reply.body["code"] == 3004
            # A.18: body.delegation on PING → 4001.
            env = raw.send(int(MessageType.PING), {"delegation": good})
            await raw.wait_for(lambda: raw.replies(env.id))
            assert raw.replies(env.id)[0].body["code"] == 4001
            # Malformed evidence: 3004 at step 3 (RFC 004 A.19, A.23).
            reply = await raw.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"},
                                      "delegation": {"chain": "nope"}})
            assert reply.body["code"] == 3004
            # Scope restricted to an id: another version of the same name is refused after resolution.
            only_v1 = evidence_body([grant(alice, bob.did, caps=[f"{ECHO}:1.0.0"])])
            reply = await raw.invoke({"id": f"{ECHO}:2.0.0", "params": {"message": "x"}, "delegation": only_v1})
            assert reply.body["code"] == 3004
            reply = await raw.invoke({"capability": ECHO, "negotiate": {"range": ">=1.0.0"},
                                      "params": {"message": "x"}, "delegation": only_v1})
            assert reply.body["code"] == 3004  # the newest, 2.0.0, is outside the grant


async def _deleg(raw: Any, typ: MessageType, body: Any) -> Any:
    env = raw.send(int(typ), body)
    await raw.wait_for(lambda: raw.replies(env.id))
    return raw.replies(env.id)[0]


@pytest.mark.trio
async def test_grant_revoke_query_messages_and_revoked_use(tmp_path: Path) -> None:
    alice, bob = new_identity(), new_identity()
    async with demo_daemon() as daemon:
        cred = grant(alice, bob.did, delegation_id="delegation:abc")
        async with memory_peer(daemon, alice) as raw:
            reply = await _deleg(raw, MessageType.DELEG_GRANT, grant_body(cred))
            assert reply.envelope.typ == MessageType.PROC_OK
            reply = await _deleg(raw, MessageType.DELEG_QUERY, query_body("delegation:abc", alice.did))
            assert reply.envelope.typ == MessageType.RESPONSE and reply.body["status"] == "active"
            reply = await _deleg(raw, MessageType.DELEG_QUERY, query_body("delegation:none"))
            assert reply.body["status"] == "unknown"
        async with memory_peer(daemon, bob) as raw:
            body = {"id": f"{ECHO}:1.0.0", "params": {"message": "hi"}, "delegation": evidence_body([cred])}
            assert (await raw.invoke(body)).envelope.typ == RESULT
        rev = revoke(alice, delegation_id="delegation:abc", revoked_at=now_ms() - 10)
        async with memory_peer(daemon, alice) as raw:
            mismatch = dict(revoke_body(rev), delegation_id="delegation:def")
            assert (await _deleg(raw, MessageType.DELEG_REVOKE, mismatch)).body["code"] == 4001  # A.13
            reply = await _deleg(raw, MessageType.DELEG_REVOKE, revoke_body(rev))
            assert reply.envelope.typ == MessageType.PROC_OK
            reply = await _deleg(raw, MessageType.DELEG_QUERY, query_body("delegation:abc", alice.did))
            assert reply.body["status"] == "revoked"
        async with memory_peer(daemon, bob) as raw:
            body = {"id": f"{ECHO}:1.0.0", "params": {"message": "again"}, "delegation": evidence_body([cred])}
            reply = await raw.invoke(body)
            assert reply.envelope.typ == ERROR and reply.body["code"] == 3004  # A.7


@pytest.mark.trio
async def test_python_api_deleg_messages() -> None:
    alice, bob = new_identity(), new_identity()
    peer = make_peer({})
    async with peer.serve("amp://127.0.0.1:0") as server:
        cred = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:api")
        async with connect(server.url, identity=alice) as remote:
            await remote.deleg_grant(cred)
            status = await remote.deleg_query("delegation:api", delegator=alice.did)
            assert status.status == "active" and status.max_age_s == 60
            unknown = await remote.deleg_query("delegation:nope")
            assert unknown.status == "unknown"
            await remote.deleg_revoke(revoke(alice, delegation_id="delegation:api", revoked_at=now_ms() - 1))
            assert (await remote.deleg_query("delegation:api", delegator=alice.did)).status == "revoked"
            with pytest.raises(AmpError) as info:
                await remote.deleg_grant(grant(alice, bob.did, expires_at=now_ms() - 1))  # expired: 3004
            assert info.value.code == 3004
        async with connect(server.url, identity=bob) as remote:
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0", delegation=[cred])
            assert info.value.code == 3004


@pytest.mark.trio
async def test_revocation_publisher_is_asked_before_the_first_decision(caplog: pytest.LogCaptureFixture) -> None:
    """RFC 005 §6.3/§7.3, R20: a status not cached is asked for before the
    invoke is decided, and the decision follows the answer (allowed, or 3004
    for a revoked credential), not 5002; concurrent invokes needing one
    status share one DELEG_QUERY."""
    import logging

    from ampcap.net.daemon.core import DaemonConfig

    alice, bob = new_identity(), new_identity()
    publisher = make_peer({})
    async with publisher.serve("amp://127.0.0.1:0") as pub:
        good = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:good")
        gone = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:gone")
        many = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:many")
        async with connect(pub.url, identity=alice) as remote:
            for cred in (good, gone, many):
                await remote.deleg_grant(cred)
            await remote.deleg_revoke(revoke(alice, delegation_id="delegation:gone", revoked_at=now_ms() - 1))
        verifier_id = new_identity()
        verifier = Peer(verifier_id, config=DaemonConfig(revocation_publisher=pub.url,
                                                         revocation_publisher_did=pub.did))

        @verifier.capability("org.example.whoami", "1.0.0")
        async def whoami() -> dict:
            return {"ok": True}

        def queries() -> int:
            return sum(1 for r in caplog.records
                       if r.getMessage().startswith("DELEG_QUERY from") and verifier_id.did in r.getMessage())

        with caplog.at_level(logging.INFO, logger="ampcap.daemon"):
            async with verifier.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=bob) as remote:
                assert await remote.invoke("org.example.whoami:1.0.0", delegation=[good]) == {"ok": True}
                with pytest.raises(AmpError) as info:
                    await remote.invoke("org.example.whoami:1.0.0", delegation=[gone])
                assert info.value.code == 3004
                assert queries() == 2
                outcomes: list[Any] = []

                async def one() -> None:
                    outcomes.append(await remote.invoke("org.example.whoami:1.0.0", delegation=[many]))

                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(one)
                assert outcomes == [{"ok": True}] * 8
                assert queries() == 3  # eight invokes, one question
                # Cached while fresh: asked no more.
                assert await remote.invoke("org.example.whoami:1.0.0", delegation=[good]) == {"ok": True}
                assert queries() == 3


@pytest.mark.trio
async def test_a_publisher_that_does_not_answer_in_time_is_5002() -> None:
    """The publisher accepts connections and never speaks: the invoke is
    refused 5002 once the daemon's short bound passes (not left waiting for
    the caller's own timeout, which would be 5003)."""
    from ampcap.net.daemon.core import DaemonConfig

    alice, bob = new_identity(), new_identity()
    async with trio.open_nursery() as nursery:
        async def silent(stream: trio.SocketStream) -> None:
            await trio.sleep_forever()

        listeners = await nursery.start(functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        verifier = Peer(new_identity(), config=DaemonConfig(revocation_publisher=f"amp://127.0.0.1:{port}",
                                                            revocation_query_timeout_s=0.5))

        @verifier.capability("org.example.whoami", "1.0.0")
        async def whoami() -> dict:
            return {"ok": True}

        cred = grant(alice, bob.did, caps=["org.example.whoami"])
        async with verifier.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=bob) as remote:
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0", delegation=[cred], timeout=30)
            assert info.value.code == 5002 and info.value.retry
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_unreachable_publisher_keeps_failing_closed_with_5002() -> None:
    from ampcap.net.daemon.core import DaemonConfig

    alice, bob = new_identity(), new_identity()
    verifier = Peer(new_identity(), config=DaemonConfig(revocation_publisher="amp://127.0.0.1:1"))

    @verifier.capability("org.example.whoami", "1.0.0")
    async def whoami() -> dict:
        return {"ok": True}

    cred = grant(alice, bob.did, caps=["org.example.whoami"])
    async with verifier.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=bob) as remote:
        for _ in range(3):
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.whoami:1.0.0", delegation=[cred])
            assert info.value.code == 5002 and info.value.retry
            await trio.sleep(0.1)
        assert await remote.invoke("org.example.whoami:1.0.0") == {"ok": True}  # plain invokes unaffected


@pytest.mark.trio
async def test_rfc006_a9_a10_a_resumed_session_rechecks_its_cached_delegation() -> None:
    """RFC 006 §7.3 with RFC 005 state, end to end: a session-scoped invoke
    allowed on a delegation caches the chain's fingerprint in the session
    record; resuming the session re-checks those credentials with the real
    publisher: revoked there meanwhile is 3004 (A.9); the publisher gone, in
    strict mode, 5002 (A.10)."""
    from ampcap.net.daemon.core import DaemonConfig

    alice, bob = new_identity(), new_identity()
    publisher = make_peer({})
    publishing = trio.CancelScope()

    async def run_publisher(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with publishing:
            await publisher.serve_forever("amp://127.0.0.1:0", task_status=task_status)

    async with trio.open_nursery() as nursery:
        pub = await nursery.start(run_publisher)
        pub.daemon.deleg_service.max_age_s = 1  # its answers go stale after a second
        first = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:s1")
        second = grant(alice, bob.did, caps=["org.example.whoami"], delegation_id="delegation:s2")
        async with connect(pub.url, identity=alice) as remote:
            await remote.deleg_grant(first)
            await remote.deleg_grant(second)
        verifier = Peer(new_identity(), config=DaemonConfig(revocation_publisher=pub.url,
                                                            revocation_publisher_did=pub.did))

        @verifier.capability("org.example.whoami", "1.0.0")
        async def whoami() -> dict:
            return {"ok": True}

        async with verifier.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=bob) as remote:
            sessions = []
            for cred in (first, second):
                session = remote.new_session()
                await session.open()
                assert await session.invoke("org.example.whoami", version="1.0.0", delegation=[cred]) == {"ok": True}
                [entry] = server.daemon.sessions.record(session.session_id).delegation_cache
                assert entry["links"] == [[alice.did, cred.delegation_id]] and len(entry["fingerprint"]) == 32
                await session.suspend()
                sessions.append(session)
            async with connect(pub.url, identity=alice) as at_publisher:
                await at_publisher.deleg_revoke(revoke(alice, delegation_id="delegation:s1", revoked_at=now_ms() - 1))
            await trio.sleep(1.2)  # the statuses the verifier holds are stale now
            with pytest.raises(AmpError) as info:  # A.9: asked again, revoked
                await sessions[0].resume()
            assert info.value.code == 3004
            publishing.cancel()  # the publisher goes away
            with trio.fail_after(5):
                while any(link.open and link.peer_did == pub.did for link in server.daemon.links):
                    await trio.sleep(0.02)
            with pytest.raises(AmpError) as info:  # A.10: no fresh status, strict mode
                await sessions[1].resume()
            assert info.value.code == 5002
