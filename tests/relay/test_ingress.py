"""Ingress (RFC 003 §5.1), retention (§5.2), dedupe (§4, A.7), TTL=0 (A.1)
and the per-recipient quota, on the real queue."""

from __future__ import annotations

from ampcap.relay import Accepted, Deliver, Reply
from ampcap.wire.cbor import loads
from ampcap.wire.envelope import decode_envelope
from ampcap.wire.identity import DidKeyResolver
from ampcap.wire.receive import verifying_profile
from ampcap.wire.registry import MessageType
from relay_helpers import NOW, ident, make_relay, message

ALICE, BOB, CAROL = ident(1), ident(2), ident(3)


def _error(reply: Reply) -> tuple[int, bytes | None, str]:
    env = decode_envelope(reply.raw)
    assert env.typ == int(MessageType.ERROR)
    return env.body["code"], env.reply_to, env.sender


def test_accepted_message_is_queued_with_exact_bytes_and_acknowledged_by_the_relay(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    msg_id, raw = message(ALICE, BOB.did, ttl=60_000)
    result = relay.submit(raw, principal=ALICE.did, now=NOW)
    assert result.refusal is None
    [accepted] = [a for a in result.actions if isinstance(a, Accepted)]
    assert accepted.queued == (BOB.did,) and accepted.seq is not None
    copy = relay.queue.get(accepted.seq, BOB.did)
    assert copy is not None and copy.raw == raw  # byte-identical (§4)
    assert copy.expires_at == decode_envelope(raw).ts + 60_000  # ts + ttl
    assert copy.state.value == "pending"
    [ack] = [a for a in result.actions if isinstance(a, Reply)]
    env = decode_envelope(ack.raw)
    assert env.typ == int(MessageType.ACK) and env.body["ack_source"] == "relay"
    assert env.sender == relay.config.relay_did and env.reply_to == msg_id
    assert verifying_profile(env, DidKeyResolver()) is not None  # signed by the relay's identity


def test_principal_binding_refuses_a_forged_from_with_3001_to_the_principal(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did)
    result = relay.submit(raw, principal=CAROL.did, now=NOW)
    assert result.refusal is not None and result.refusal.code == 3001
    [reply] = result.actions
    assert reply.to == CAROL.did and _error(reply)[0] == 3001
    assert relay.queue.page(BOB.did, 0, 10, NOW) == []


def test_temporal_checks_refuse_expired_and_future_messages_with_1003(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    _, old = message(ALICE, BOB.did, now=NOW - 120_000, ttl=60_000)
    _, future = message(ALICE, BOB.did, now=NOW + 120_000)
    for raw in (old, future):
        result = relay.submit(raw, principal=ALICE.did, now=NOW)
        assert result.refusal is not None and result.refusal.code == 1003
        assert _error(result.actions[0])[0] == 1003


def test_size_limit_and_garbage(store) -> None:
    relay = make_relay(store, max_message_bytes=2048)
    relay.register(BOB.did, NOW)
    _, big = message(ALICE, BOB.did, text="x" * 4096)
    assert relay.submit(big, principal=ALICE.did, now=NOW).refusal.code == 1001
    assert relay.submit(b"\xff\x00garbage", principal=ALICE.did, now=NOW).refusal.code == 1001


def test_ttl_policy_and_unknown_recipient(store) -> None:
    relay = make_relay(store, max_ttl_ms=120_000)
    relay.register(BOB.did, NOW)
    _, long = message(ALICE, BOB.did, ttl=3_600_000)
    assert relay.submit(long, principal=ALICE.did, now=NOW).refusal.code == 2003
    _, unknown = message(ALICE, CAROL.did)
    assert relay.submit(unknown, principal=ALICE.did, now=NOW).refusal.code == 2001


def test_a1_ttl0_offline_is_refused_2003_and_never_queued(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    msg_id, raw = message(ALICE, BOB.did, ttl=0)
    result = relay.submit(raw, principal=ALICE.did, now=NOW)
    assert result.refusal is not None and result.refusal.code == 2003
    code, reply_to, sender = _error(result.actions[0])
    assert (code, reply_to, sender) == (2003, msg_id, relay.config.relay_did)
    assert b"\x64code\x19\x07\xd3" in result.actions[0].raw  # A.15: 2003 is 19 07 d3
    assert relay.link_up(BOB.did, NOW) == []  # not queued: nothing when Bob comes online
    assert relay.poll(BOB.did, None, 10, NOW).messages == ()


def test_ttl0_online_is_delivered_at_once_and_not_queued(store) -> None:
    relay = make_relay(store)
    relay.link_up(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did, ttl=0)
    result = relay.submit(raw, principal=ALICE.did, now=NOW + 5)
    assert result.refusal is None
    [deliver] = [a for a in result.actions if isinstance(a, Deliver)]
    assert deliver.raw == raw and deliver.seq is None
    assert relay.poll(BOB.did, None, 10, NOW).messages == ()


def test_a7_same_key_twice_makes_one_entry(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did)
    first = relay.submit(raw, principal=ALICE.did, now=NOW)
    second = relay.submit(raw, principal=ALICE.did, now=NOW + 10)
    [a1] = [a for a in first.actions if isinstance(a, Accepted)]
    [a2] = [a for a in second.actions if isinstance(a, Accepted)]
    assert a1.queued == (BOB.did,) and a2.queued == () and a2.duplicates == (BOB.did,)
    assert relay.poll(BOB.did, None, 10, NOW + 20).messages == (raw,)


def test_a7_duplicate_stays_suppressed_after_commit(store) -> None:
    from relay_helpers import recipient_ack
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    msg_id, raw = message(ALICE, BOB.did)
    relay.submit(raw, principal=ALICE.did, now=NOW)
    relay.poll(BOB.did, None, 10, NOW)
    assert relay.submit(recipient_ack(BOB, ALICE.did, msg_id), principal=BOB.did, now=NOW).committed
    again = relay.submit(raw, principal=ALICE.did, now=NOW + 100)
    assert [a.duplicates for a in again.actions if isinstance(a, Accepted)] == [(BOB.did,)]
    assert relay.poll(BOB.did, None, 10, NOW + 100).messages == ()


def test_quota_bounds_one_flooded_recipient_with_2003(store) -> None:
    relay = make_relay(store, max_queued_per_recipient=5)
    relay.register(BOB.did, NOW)
    relay.register(CAROL.did, NOW)
    codes = []
    for i in range(8):
        _, raw = message(ALICE, BOB.did, ttl=6 * 86_400_000, text=str(i))
        result = relay.submit(raw, principal=ALICE.did, now=NOW)
        codes.append(result.refusal.code if result.refusal else None)
    assert codes == [None] * 5 + [2003] * 3
    page = relay.poll(BOB.did, None, 100, NOW)
    assert len(page.messages) == 5
    # All or nothing: a message to Bob and Carol is refused whole while Bob is full.
    _, both = message(ALICE, [BOB.did, CAROL.did])
    assert relay.submit(both, principal=ALICE.did, now=NOW).refusal.code == 2003
    assert relay.poll(CAROL.did, None, 10, NOW).messages == ()
    # Another recipient is not affected.
    _, raw = message(ALICE, CAROL.did)
    assert relay.submit(raw, principal=ALICE.did, now=NOW).refusal is None


def test_expiry_removes_records_and_never_extends_ttl(store) -> None:
    relay = make_relay(store)
    relay.register(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did, ttl=1_000)
    seq = [a for a in relay.submit(raw, principal=ALICE.did, now=NOW).actions if isinstance(a, Accepted)][0].seq
    assert relay.poll(BOB.did, None, 10, NOW + 1_000).messages == (raw,)
    assert relay.poll(BOB.did, None, 10, NOW + 1_001).messages == ()  # past ts + ttl: not delivered
    actions = relay.tick(NOW + 1_001)
    assert [(a.seq, a.reason) for a in actions if type(a).__name__ == "Finalized"] == [(seq, "expired")]
    assert relay.queue.get(seq, BOB.did) is None


def test_error_reply_is_signed_by_the_relay(store) -> None:
    relay = make_relay(store)
    _, raw = message(ALICE, CAROL.did)
    reply = relay.submit(raw, principal=ALICE.did, now=NOW).actions[0]
    env = decode_envelope(reply.raw)
    assert env.sender == relay.config.relay_did and verifying_profile(env, DidKeyResolver()) is not None
    assert loads(reply.raw)["body"]["code"] == 2001


def test_the_core_holds_no_message_in_memory(tmp_path) -> None:
    """Records stay on disk: queueing 1,000 messages of 8 kB (8 MB) grows
    Python's heap by far less than the messages' size."""
    import gc
    import tracemalloc

    from ampcap.store.database import StateStore

    store = StateStore.open(tmp_path)
    try:
        relay = make_relay(store, ack_on_accept=False)
        relay.register(BOB.did, NOW)
        batch = [message(ALICE, BOB.did, text="x" * 8000)[1] for _ in range(1000)]
        relay.submit(batch[0], principal=ALICE.did, now=NOW)  # warm caches
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for raw in batch[1:]:
            assert relay.submit(raw, principal=ALICE.did, now=NOW).refusal is None
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert grown < 1_000_000, grown
        assert len(relay.poll(BOB.did, None, 500, NOW).messages) == 500
    finally:
        store.close()
