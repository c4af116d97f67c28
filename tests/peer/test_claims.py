"""What a worker does with the store's answer to its claim (peer/claims.py, R25)."""

from __future__ import annotations

from typing import Any

from ampcap.peer.claims import REUSED, Verdict, judge
from ampcap.peer.dedupe import InvokeKey, Terminal
from ampcap.peer.journal import Claim, ClaimStatus, JournalRecord, JournalState
from ampcap.peer.outbound import Outbound

T0 = 1_700_000_000_000
KEY = InvokeKey("did:key:z6Mkcaller", b"\x01" * 16)
RUNNING = JournalRecord(key=KEY, fingerprint=b"f", capability_id="org.x.slow:1.0.0", state=JournalState.RUNNING,
                        expires_at=T0 + 60_000, owner="w2", lease_until=T0 - 1, thread_id=b"t" * 16)
DONE = JournalRecord(key=KEY, fingerprint=b"f", capability_id="org.x.slow:1.0.0", state=JournalState.DONE,
                     expires_at=T0 + 60_000, terminal=Terminal(b"the bytes", T0 + 60_000))
sealed: list[Outbound] = []


def seal(out: Outbound, now_ms: int) -> Terminal:
    sealed.append(out)
    return Terminal(b"5002 of " + out.reply_to, now_ms + 1_000)  # type: ignore[operator]


def never(_: str) -> bool:
    return False


def always(_: str) -> bool:
    return True


def test_each_answer_of_the_store() -> None:
    assert judge(Claim(ClaimStatus.CLAIMED), T0, never, seal).verdict is Verdict.RUN
    answer = judge(Claim(ClaimStatus.DONE, DONE), T0, never, seal)
    assert answer.verdict is Verdict.ANSWER and answer.terminal == DONE.terminal  # the bytes first sent (R8)
    assert judge(Claim(ClaimStatus.HELD, RUNNING), T0, never, seal).verdict is Verdict.WAIT
    refused = judge(Claim(ClaimStatus.CONFLICT, DONE), T0, never, seal)
    assert refused.verdict is Verdict.REFUSE and refused.error is REUSED and refused.error.code == 4001
    assert not sealed


def test_a_lapsed_claim_is_what_a_restart_interrupted() -> None:
    # Not idempotent: closed with 5002, sealed once, threaded like the reply it stands for.
    closing = judge(Claim(ClaimStatus.ABANDONED, RUNNING), T0, never, seal)
    assert closing.verdict is Verdict.CLOSE and closing.closed is not None
    assert closing.closed.state is JournalState.DONE and closing.closed.owner is None
    assert closing.terminal == closing.closed.terminal == Terminal(b"5002 of " + KEY.msg_id, T0 + 1_000)
    [out] = sealed
    body: Any = out.body
    assert out.thread_id == RUNNING.thread_id and body["error"]["code"] == 5002
    # Idempotent: one taker runs it again.
    assert judge(Claim(ClaimStatus.ABANDONED, RUNNING), T0, always, seal).verdict is Verdict.TAKE_OVER
