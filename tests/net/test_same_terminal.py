"""Ruling R8 amended, end to end: a CAP_INVOKE resent byte for byte after it
completed is answered with the first terminal message's bytes again (same
id, ts, signature), on whichever connection the resend arrives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import ECHO, ERROR, INVOKE, RESULT, demo_daemon, memory_peer, new_identity  # noqa: E402


@pytest.mark.trio
async def test_an_exact_resend_gets_the_first_terminal_message_again() -> None:
    alice = new_identity()
    async with demo_daemon() as daemon:
        async with memory_peer(daemon, alice) as peer:
            env = peer.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "once"}})
            assert env is not None
            first = await peer.terminal(env.id)
            assert first.envelope.typ == RESULT
            # The same invoke again, same id and ts: the same bytes leave us
            # (Ed25519 and deterministic CBOR), so this is an exact resend.
            again = peer.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "once"}}, msg_id=env.id,
                              ts_ms=env.ts)
            assert again == env
            await peer.wait_for(lambda: len(peer.terminals(env.id)) == 2)
            second = peer.terminals(env.id)[1]
            assert second.raw == first.raw and second.envelope.id == first.envelope.id
        async with memory_peer(daemon, alice) as other:  # a new connection, after the first one closed
            other.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "once"}}, msg_id=env.id, ts_ms=env.ts)
            third = await other.terminal(env.id)
            assert third.raw == first.raw
            # A rejection is a terminal message too: resent the same.
            bad = other.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": 1}})
            assert bad is not None
            refused = await other.terminal(bad.id)
            assert refused.envelope.typ == ERROR and refused.body["code"] == 4004
            other.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": 1}}, msg_id=bad.id, ts_ms=bad.ts)
            await other.wait_for(lambda: len(other.terminals(bad.id)) == 2)
            assert other.terminals(bad.id)[1].raw == refused.raw
        assert daemon.executor.running == 0
