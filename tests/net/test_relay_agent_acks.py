"""An agent behind an RFC 003 relay sends an invoke's recipient ACK right
after the invoke's terminal reply (net/features/relay_agent.py
AcksAfterReplies): never before it, once, and for nothing else."""

from __future__ import annotations

import os

from ampcap.net.features.relay_agent import AcksAfterReplies
from ampcap.peer.outbound import Outbound
from ampcap.wire.envelope import Envelope, seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType

CALLER, AGENT = Identity.from_seed(b"\x01" * 32), Identity.from_seed(b"\x02" * 32)
NOW = 1_800_000_000_000


def _invoke() -> Envelope:
    env, _ = seal(CALLER, typ=int(MessageType.CAP_INVOKE), to=AGENT.did, body={"id": "x:1.0.0", "params": {}},
                  now_ms=NOW, entropy=os.urandom, ttl=60_000)
    return env


def _reply(typ: MessageType, reply_to: bytes) -> Outbound:
    return Outbound(typ=int(typ), body={}, reply_to=reply_to, to=CALLER.did)


def test_the_ack_follows_the_terminal_reply_only() -> None:
    acks = AcksAfterReplies()
    env = _invoke()
    acks.hold(env, NOW)
    for interim in (MessageType.PROC_OK, MessageType.PROCESSING, MessageType.PROGRESS):
        assert acks.after(_reply(interim, env.id)) is None
    assert acks.after(_reply(MessageType.CAP_RESULT, b"\x00" * 16)) is None  # another invoke's
    ack = acks.after(_reply(MessageType.CAP_RESULT, env.id))
    assert ack is not None and ack.typ == int(MessageType.ACK) and ack.reply_to == env.id
    assert ack.to == CALLER.did and ack.body["ack_source"] == "recipient"
    assert acks.after(_reply(MessageType.CAP_RESULT, env.id)) is None and len(acks) == 0  # once
    refused = _invoke()
    acks.hold(refused, NOW)
    assert acks.after(_reply(MessageType.ERROR, refused.id)) is not None


def test_waiting_acks_are_bounded() -> None:
    acks = AcksAfterReplies(limit=3)
    envs = [_invoke() for _ in range(5)]
    for env in envs:
        acks.hold(env, NOW)
    assert len(acks) == 3
    assert acks.after(_reply(MessageType.CAP_RESULT, envs[0].id)) is None  # forgotten: the relay asks again
    assert acks.after(_reply(MessageType.CAP_RESULT, envs[4].id)) is not None
