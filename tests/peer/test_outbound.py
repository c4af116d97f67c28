"""What stands in for a reply too large for the connection (peer/outbound.py)."""

from __future__ import annotations

import pytest

from ampcap.peer.outbound import Outbound, stand_in_for_oversize
from ampcap.wire.registry import MessageType

REQUEST = bytes(range(16))
THREAD = bytes(16)


def _reply(typ: MessageType, reply_to: bytes | None = REQUEST) -> Outbound:
    return Outbound(typ=int(typ), body={"big": "..."}, reply_to=reply_to, thread_id=THREAD, to="did:key:zCaller")


def test_a_result_becomes_a_small_result_error_to_the_same_request() -> None:
    stand_in = stand_in_for_oversize(_reply(MessageType.CAP_RESULT), 3_000_000, 1 << 20)
    assert stand_in is not None and stand_in.typ == MessageType.CAP_RESULT
    assert (stand_in.reply_to, stand_in.thread_id, stand_in.to) == (REQUEST, THREAD, "did:key:zCaller")
    assert stand_in.body["status"] == "error" and stand_in.body["error"]["code"] == 5001
    assert "3000000 bytes" in stand_in.body["error"]["message"]


@pytest.mark.parametrize("typ", [MessageType.CAP_DECLARE, MessageType.ERROR])
def test_other_terminal_replies_become_an_error_5001(typ: MessageType) -> None:
    stand_in = stand_in_for_oversize(_reply(typ), 3_000_000, 1 << 20)
    assert stand_in is not None and stand_in.typ == MessageType.ERROR and stand_in.body["code"] == 5001
    assert stand_in.reply_to == REQUEST


@pytest.mark.parametrize("out", [_reply(MessageType.PROGRESS), _reply(MessageType.PROCESSING),
                                 _reply(MessageType.ACK), _reply(MessageType.CAP_INVOKE, reply_to=None)])
def test_interim_replies_and_requests_get_no_stand_in(out: Outbound) -> None:
    assert stand_in_for_oversize(out, 3_000_000, 1 << 20) is None
