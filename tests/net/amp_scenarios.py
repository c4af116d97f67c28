"""RFC 004 Appendix A and ruling checks against a daemon serving ``--demo``.

Each scenario takes a connected :class:`RawPeer` and asserts on the exact
replies (types, ``reply_to``, codes, counts, bytes). ``test_daemon.py`` runs
them in-process over memory streams, ``test_integration.py`` over loopback
TCP against ``ampcap serve`` in a separate process.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import trio

from amp_helpers import DECLARE, ECHO, ERROR, INVOKE, PROGRESS, QUERY, RESULT, RawPeer

Scenario = Callable[[RawPeer], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def error_code(msg: object) -> int:
    env = msg.envelope  # type: ignore[attr-defined]
    body = msg.body  # type: ignore[attr-defined]
    if env.typ == ERROR:
        return int(body["code"])
    assert env.typ == RESULT and body["status"] == "error", body
    return int(body["error"]["code"])


async def settle(seconds: float = 0.3) -> None:
    """Leave room for a (wrong) second terminal reply to show up."""
    await trio.sleep(seconds)


@scenario
async def a5_valid_params_one_success(peer: RawPeer) -> None:
    env = peer.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "hi"}})
    reply = await peer.terminal(env.id)
    assert reply.envelope.typ == RESULT and reply.envelope.reply_to == env.id
    assert reply.body == {"status": "success", "result": {"message": "hi", "version": "1.0.0"}}
    await settle()
    assert len(peer.terminals(env.id)) == 1


@scenario
async def a6_missing_required_field_4004(peer: RawPeer) -> None:
    reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {}})
    assert reply.envelope.typ == ERROR and error_code(reply) == 4004


@scenario
async def a8_identity_mismatch_4001(peer: RawPeer) -> None:
    reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "capability": "org.ampcap.demo.math.add",
                               "version": "1.0.0", "params": {"message": "x"}})
    assert reply.envelope.typ == ERROR and error_code(reply) == 4001


@scenario
async def a16_id_with_negotiate_4001(peer: RawPeer) -> None:
    reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "negotiate": {"range": ">=1.0.0 <2.0.0"},
                               "params": {"message": "x"}})
    assert reply.envelope.typ == ERROR and error_code(reply) == 4001


@scenario
async def a17_query_no_match_4002(peer: RawPeer) -> None:
    env = peer.send(QUERY, {"filter": {"capability": "org.agentries.nonexistent"}})
    reply = await peer.terminal(env.id)
    assert reply.envelope.typ == ERROR and error_code(reply) == 4002
    await settle(0.1)
    assert not peer.replies(env.id, DECLARE)


@scenario
async def a7_legacy_type_query(peer: RawPeer) -> None:
    reply = await peer.request(QUERY, {"filter": {"type": "echo", "version": ">=1.0.0 <2.0.0"}})
    assert reply.envelope.typ == DECLARE
    assert [c["id"] for c in reply.body["capabilities"]] == [f"{ECHO}:1.1.0", f"{ECHO}:1.0.0"]


@scenario
async def negotiation_a2_a3_range(peer: RawPeer) -> None:
    cases = [({"preferred": "1.1.0"}, "1.1.0"),
             ({"preferred": "1.2.0", "acceptable": ["1.0.0", "1.1.0"]}, "1.0.0"),
             ({"range": ">=1.0.0 <2.0.0"}, "1.1.0")]
    for hints, expected in cases:
        reply = await peer.invoke({"capability": ECHO, "negotiate": hints, "params": {"message": "m"}})
        assert reply.body["result"]["version"] == expected, (hints, reply.body)
    reply = await peer.invoke({"capability": ECHO, "negotiate": {"range": ">=3.0.0 <4.0.0"},
                               "params": {"message": "m"}})
    assert error_code(reply) == 4003  # A.4


@scenario
async def a19_delegation_3004(peer: RawPeer) -> None:
    reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"},
                               "delegation": {"chain": ["bogus"]}})
    assert reply.envelope.typ == ERROR and error_code(reply) == 3004


@scenario
async def a20_a21_session_echoed(peer: RawPeer) -> None:
    # Without session_scope the context is RFC 004's inert extension: echoed, nothing else.
    session = {"session_id": os.urandom(16)}
    env = peer.send(INVOKE, {"id": f"{ECHO}:2.0.0", "params": {"message": "abc"}, "session": session})
    reply = await peer.terminal(env.id)
    assert reply.envelope.typ == RESULT and reply.envelope.reply_to == env.id
    assert reply.body["status"] == "success"
    assert reply.body["result"] == {"message": "abc", "version": "2.0.0", "length": 3}
    assert reply.body["session"] == session
    # With session_scope = true, RFC 006 semantics apply (A.20: "unchanged except for RFC 006
    # session semantics"): a session nobody opened is 4001 (RFC 006 §4.4, §9).
    scoped = await peer.invoke({"id": f"{ECHO}:2.0.0", "params": {"message": "abc"},
                                "session": {**session, "session_scope": True}})
    assert error_code(scoped) == 4001


@scenario
async def a23_error_code_bytes(peer: RawPeer) -> None:
    mismatch = await peer.invoke({"capability": ECHO, "version": "9.0.0", "params": {"message": "x"}})
    assert error_code(mismatch) == 4003
    assert b"\x64code\x19\x0f\xa3" in mismatch.raw  # "code": 4003 inside the signed message bytes
    delegated = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}, "delegation": {}})
    assert error_code(delegated) == 3004
    assert b"\x64code\x19\x0b\xbc" in delegated.raw


@scenario
async def timeout_gives_exactly_one_5003(peer: RawPeer) -> None:
    env = peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 5000}, "timeout_ms": 300})
    reply = await peer.terminal(env.id, timeout=5)
    assert reply.envelope.typ == RESULT and error_code(reply) == 5003
    await settle(0.6)
    assert len(peer.terminals(env.id)) == 1


@scenario
async def crash_gives_exactly_one_5001(peer: RawPeer) -> None:
    env = peer.send(INVOKE, {"id": "org.ampcap.demo.fail:1.0.0", "params": {}})
    reply = await peer.terminal(env.id)
    assert reply.envelope.typ == RESULT and reply.body["status"] == "error"
    assert reply.body["error"]["code"] == 5001 and reply.body["error"]["name"] == "INTERNAL_ERROR"
    await settle()
    assert len(peer.terminals(env.id)) == 1


@scenario
async def duplicate_invoke_executes_once(peer: RawPeer) -> None:
    body = {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 300}}
    first = peer.send(INVOKE, body)
    peer.send(INVOKE, body, msg_id=first.id, ts_ms=first.ts)  # the very same message again
    reply = await peer.terminal(first.id)
    await settle(0.4)
    assert len(peer.terminals(first.id)) == 1
    # One execution: the 300 ms sleep reports progress 3 times, not 6.
    assert len(peer.replies(first.id, PROGRESS)) == 3
    # After completion the cached terminal message is sent again, nothing runs.
    peer.send(INVOKE, body, msg_id=first.id, ts_ms=first.ts)
    await peer.wait_for(lambda: len(peer.terminals(first.id)) == 2)
    again = peer.terminals(first.id)[1]
    assert again.body == reply.body == {"status": "success", "result": {"slept_ms": 300}}
    assert len(peer.replies(first.id, PROGRESS)) == 3
    # Same id, different body: not a retry (R8) → 4001, cached result not revealed.
    peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 1}}, msg_id=first.id, ts_ms=first.ts)
    await peer.wait_for(lambda: len(peer.terminals(first.id)) == 3)
    assert error_code(peer.terminals(first.id)[2]) == 4001


@scenario
async def query_pages_without_gaps(peer: RawPeer) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(4):
        body: dict[str, object] = {"filter": {"capability": ECHO}, "limit": 1}
        if cursor is not None:
            body["cursor"] = cursor
        reply = await peer.request(QUERY, body)
        assert reply.envelope.typ == DECLARE
        seen += [c["id"] for c in reply.body["capabilities"]]
        cursor = reply.body.get("next_cursor")
        if cursor is None:
            break
    assert seen == [f"{ECHO}:2.0.0", f"{ECHO}:1.1.0", f"{ECHO}:1.0.0"]
    bad = await peer.request(QUERY, {"filter": {"capability": ECHO}, "cursor": "not-a-cursor"})
    assert error_code(bad) == 4001  # A.15
