"""Pushes (§5.3): on a live link, backoff with injected jitter bounded by
expiry, endpoint priority, and claims so that two relay processes sharing
one store never push one entry at once (R25)."""

from __future__ import annotations

import random

from ampcap.relay import Deliver
from ampcap.relay.delivery import backoff_ms, handoff_retry_at, next_attempt_at, order_endpoints
from ampcap.store.database import StateStore
from relay_helpers import NOW, ident, make_relay, message

ALICE, BOB = ident(1), ident(2)


def test_endpoint_priority_amps_wss_https_keeping_service_order() -> None:
    urls = ["https://a/1", "wss://b/1", "amps://c:1", "https://a/2", "ftp://x", "amps://d:2", "wss://e/2"]
    assert order_endpoints(urls) == ["amps://c:1", "amps://d:2", "wss://b/1", "wss://e/2", "https://a/1",
                                     "https://a/2"]


def test_backoff_doubles_caps_and_takes_its_jitter_from_the_source() -> None:
    zero = lambda: 0.0  # noqa: E731
    assert [backoff_ms(n, base_ms=1000, cap_ms=60_000, jitter_ms=1000, random=zero) for n in (1, 2, 3, 7, 100)] == \
        [1000, 2000, 4000, 60_000, 60_000]
    assert backoff_ms(1, base_ms=1000, cap_ms=60_000, jitter_ms=1000, random=lambda: 0.5) == 1500
    a = [backoff_ms(3, base_ms=1000, cap_ms=60_000, jitter_ms=1000, random=random.Random(1).random) for _ in range(3)]
    b = [backoff_ms(3, base_ms=1000, cap_ms=60_000, jitter_ms=1000, random=random.Random(1).random) for _ in range(3)]
    assert a == b and all(4000 <= x < 5000 for x in a)
    # Bounded by the expiry horizon, not by a count.
    assert next_attempt_at(NOW, 3, NOW + 3000, base_ms=1000, cap_ms=60_000, jitter_ms=0, random=zero) is None
    assert next_attempt_at(NOW, 1, NOW + 3000, base_ms=1000, cap_ms=60_000, jitter_ms=0, random=zero) == NOW + 1000


def test_handoff_retry_schedule_is_the_5_6_7_default() -> None:
    at = [handoff_retry_at(0, n, 10**9, base_ms=1000, cap_ms=30_000, max_attempts=10) for n in (1, 2, 3, 6, 9)]
    assert at == [1000, 2000, 4000, 30_000, 30_000]
    assert handoff_retry_at(0, 3, 10**9, base_ms=1000, cap_ms=30_000, max_attempts=3) is None
    assert handoff_retry_at(0, 1, 500, base_ms=1000, cap_ms=30_000, max_attempts=3) is None


def test_push_on_link_up_then_backoff_after_a_failed_push(store) -> None:
    relay = make_relay(store, jitter_ms=0)
    relay.register(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did, ttl=3_600_000)
    relay.submit(raw, principal=ALICE.did, now=NOW)
    [push] = relay.link_up(BOB.did, NOW + 1)
    assert isinstance(push, Deliver) and push.raw == raw and push.recipient == BOB.did
    assert relay.tick(NOW + 2) == []  # claimed: not pushed twice while the claim lives
    relay.delivery_failed(push.seq, BOB.did, NOW + 10)
    assert relay.queue.get(push.seq, BOB.did).next_attempt_at == NOW + 10 + 1000
    assert [a for a in relay.tick(NOW + 500) if isinstance(a, Deliver)] == []
    [again] = [a for a in relay.tick(NOW + 1010) if isinstance(a, Deliver)]
    assert again.raw == raw
    relay.delivery_failed(again.seq, BOB.did, NOW + 1020)
    assert relay.queue.get(push.seq, BOB.did).next_attempt_at == NOW + 1020 + 2000


def test_online_recipient_gets_the_push_at_ingress(store) -> None:
    relay = make_relay(store)
    relay.link_up(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did)
    result = relay.submit(raw, principal=ALICE.did, now=NOW)
    assert [a.raw for a in result.actions if isinstance(a, Deliver)] == [raw]


def test_unacknowledged_push_is_redelivered_after_its_lease(store) -> None:
    relay = make_relay(store, redeliver_ms=1000)
    relay.link_up(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did)
    relay.submit(raw, principal=ALICE.did, now=NOW)
    relay.link_down(BOB.did)
    relay.link_up(BOB.did, NOW + 10)  # nothing: the first claim is still live
    assert [a.raw for a in relay.tick(NOW + 2000) if isinstance(a, Deliver)] == [raw]


def test_two_relay_processes_sharing_a_store_never_push_one_entry_at_once(tmp_path) -> None:
    one, two = StateStore.open(tmp_path), StateStore.open(tmp_path)
    try:
        a = make_relay(one, owner="process-a", lease_ms=1000, redeliver_ms=1000)
        b = make_relay(two, owner="process-b", lease_ms=1000, redeliver_ms=5000)
        a.register(BOB.did, NOW)
        raws = []
        for i in range(10):
            _, raw = message(ALICE, BOB.did, text=str(i))
            a.submit(raw, principal=ALICE.did, now=NOW)
            raws.append(raw)
        pushed_a = [x.raw for x in a.link_up(BOB.did, NOW + 1, batch=6)]
        pushed_b = [x.raw for x in b.link_up(BOB.did, NOW + 1)]
        assert len(pushed_a) == 6 and len(pushed_b) == 4
        assert sorted(pushed_a + pushed_b) == sorted(raws)  # each once
        # Process A dies (stops renewing): its claims lapse and B takes them over.
        b.tick(NOW + 500)  # B renews its own
        taken = [x.raw for x in b.tick(NOW + 1500) if isinstance(x, Deliver)]
        assert sorted(taken) == sorted(pushed_a)
    finally:
        one.close()
        two.close()
