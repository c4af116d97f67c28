"""Polling (§5.4, RFC 002 §6.2) and commit by recipient ACK only (§5.5):
A.2-A.4, and the ACKs that must never commit."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.relay import Accepted, Finalized
from ampcap.wire.envelope import seal
from ampcap.wire.httpmap import decode_poll
from ampcap.wire.registry import MessageType
from relay_helpers import NOW, ident, make_relay, message, recipient_ack

ALICE, BOB, CAROL, MALLORY = ident(1), ident(2), ident(3), ident(4)


def _queued(relay, raw, principal=ALICE.did, now=NOW) -> int:
    result = relay.submit(raw, principal=principal, now=now)
    assert result.refusal is None, result.refusal
    return [a for a in result.actions if isinstance(a, Accepted)][0].seq


@pytest.fixture
def relay(store):
    r = make_relay(store)
    for who in (ALICE, BOB, CAROL, MALLORY):
        r.register(who.did, NOW)
    return r


def test_a2_polling_redelivers_until_commit(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    first = relay.poll(BOB.did, None, 10, NOW)
    second = relay.poll(BOB.did, None, 10, NOW + 1)
    assert first.messages == second.messages == (raw,)
    assert relay.queue.get(seq, BOB.did).state.value in ("pending", "inflight")
    # The wire form is the §6.2 wrapper with the raw bytes.
    messages, cursor, more = decode_poll(second.body)
    assert messages == [raw] and cursor == second.next_cursor and more is False


def test_a3_recipient_ack_commits_and_record_is_done(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    relay.poll(BOB.did, None, 10, NOW)
    ack = recipient_ack(BOB, ALICE.did, msg_id)
    result = relay.submit(ack, principal=BOB.did, now=NOW + 5)
    assert [(c.seq, c.recipient) for c in result.committed] == [(seq, BOB.did)]
    assert Finalized(seq=seq, reason="done") in result.actions
    assert relay.queue.get(seq, BOB.did) is None
    assert relay.poll(BOB.did, None, 10, NOW + 6).messages == ()
    # The ACK itself is queued on for Alice, byte for byte.
    assert relay.poll(ALICE.did, None, 10, NOW + 6).messages == (ack,)


def test_a4_multi_recipient_partial_commit(relay) -> None:
    msg_id, raw = message(ALICE, [BOB.did, CAROL.did])
    seq = _queued(relay, raw)
    result = relay.submit(recipient_ack(BOB, ALICE.did, msg_id), principal=BOB.did, now=NOW)
    assert [c.recipient for c in result.committed] == [BOB.did]
    assert not any(isinstance(a, Finalized) for a in result.actions)
    assert relay.queue.get(seq, CAROL.did).state.value == "pending"
    assert relay.poll(BOB.did, None, 10, NOW).messages == ()
    assert relay.poll(CAROL.did, None, 10, NOW).messages == (raw,)
    done = relay.submit(recipient_ack(CAROL, ALICE.did, msg_id), principal=CAROL.did, now=NOW)
    assert Finalized(seq=seq, reason="done") in done.actions


def _not_committed(relay, seq, recipient=BOB.did) -> None:
    copy = relay.queue.get(seq, recipient)
    assert copy is not None and copy.state.value in ("pending", "inflight")


def test_forged_ack_signed_by_someone_else_never_commits(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    # An ACK that claims Bob's DID whose signature is not Bob's (one bit of it flipped).
    good = recipient_ack(BOB, ALICE.did, msg_id)
    sig_at = good.index(b"\x63sig") + 6
    tampered = good[:sig_at] + bytes([good[sig_at] ^ 1]) + good[sig_at + 1:]
    result = relay.submit(tampered, principal=BOB.did, now=NOW)
    assert result.committed == [] and result.refusal is not None and result.refusal.code == 1002
    _not_committed(relay, seq)


def test_ack_from_a_non_recipient_never_commits(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    result = relay.submit(recipient_ack(MALLORY, ALICE.did, msg_id), principal=MALLORY.did, now=NOW)
    assert result.committed == []
    _not_committed(relay, seq)
    # ... nor one whose transport principal is not its signer.
    result = relay.submit(recipient_ack(BOB, ALICE.did, msg_id), principal=MALLORY.did, now=NOW)
    assert result.committed == [] and result.refusal.code == 3001
    _not_committed(relay, seq)


def test_ack_with_wrong_reply_to_never_commits(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    other_id, _ = message(ALICE, BOB.did)
    result = relay.submit(recipient_ack(BOB, ALICE.did, other_id), principal=BOB.did, now=NOW)
    assert result.committed == []
    _not_committed(relay, seq)


def test_ack_addressed_to_another_sender_never_commits(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    result = relay.submit(recipient_ack(BOB, CAROL.did, msg_id), principal=BOB.did, now=NOW)
    assert result.committed == []
    _not_committed(relay, seq)


def test_proc_ok_and_relay_ack_never_commit(relay) -> None:
    msg_id, raw = message(ALICE, BOB.did)
    seq = _queued(relay, raw)
    for typ in (MessageType.PROC_OK, MessageType.PROC_FAIL):
        _, proc = seal(BOB, typ=int(typ), to=ALICE.did, body=None, now_ms=NOW, entropy=lambda n: b"\x01" * n,
                       ttl=60_000, reply_to=msg_id)
        assert relay.submit(proc, principal=BOB.did, now=NOW).committed == []
    relay_ack = recipient_ack(BOB, ALICE.did, msg_id, source="relay")
    assert relay.submit(relay_ack, principal=BOB.did, now=NOW).committed == []
    _not_committed(relay, seq)


def test_cursor_is_monotonic_and_pages(relay) -> None:
    raws = []
    for i in range(5):
        _, raw = message(ALICE, BOB.did, text=str(i))
        _queued(relay, raw)
        raws.append(raw)
    seen, cursors = [], []
    page = relay.poll(BOB.did, None, 2, NOW)
    while True:
        seen += page.messages
        cursors.append(page.next_cursor)
        if not page.has_more:
            break
        page = relay.poll(BOB.did, page.next_cursor, 2, NOW)
    assert seen == raws
    keys = [tuple(map(int, c.split("-"))) for c in cursors]
    assert keys == sorted(keys)
    # A fresh pass (no cursor) starts over with a larger cursor than any before.
    restart = relay.poll(BOB.did, None, 2, NOW)
    assert restart.messages == tuple(raws[:2])
    assert tuple(map(int, restart.next_cursor.split("-"))) > keys[-1]
    # An empty page keeps the cursor where it was.
    last = relay.poll(BOB.did, cursors[-1], 2, NOW)
    assert last.messages == () and last.next_cursor == cursors[-1] and not last.has_more


def test_bad_cursor_is_1001(relay) -> None:
    for bad in ("nope", "1-", "99999-1", "-5", "1-2-3"):
        with pytest.raises(AmpError) as info:
            relay.poll(BOB.did, bad, 10, NOW)
        assert info.value.code == 1001


def test_a_consumer_polls_only_its_own_messages(relay) -> None:
    _, raw = message(ALICE, BOB.did)
    _queued(relay, raw)
    assert relay.poll(CAROL.did, None, 10, NOW).messages == ()
