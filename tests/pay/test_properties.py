"""Money is exact (issue 37 item 7): random operation sequences against the
payee and the §7 table, with replays, conflicting bodies, expiry, two
workers racing a capture against a cancel, and bad amounts; after every
step the ledger and the records must agree:

* balances are conserved (all accounts of the asset sum to zero, the
  deposits account holding minus what entered) and never negative;
* a payment's hold is exactly what it has authorized and not captured;
* nothing is captured twice (one capture entry per payment at most) and
  never more than was authorized;
* the payee holds exactly what was captured less what was refunded;
* every state change is a path through the §7 table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ampcap.pay.bodies import parse_request
from ampcap.pay.codes import Answered, ExecutionFailed, Rejected
from ampcap.pay.lifecycle import TABLE, State
from ampcap.store.database import StateStore

from .conftest import NET, PAYER, T0, World, pid

FUNDS = 1_000
OTHER = "did:example:other"
_REACHABLE: dict[State, set[State]] = {}
for (_src, _ev), _dst in TABLE.items():
    _REACHABLE.setdefault(_src, set()).add(_dst)


def _reachable(a: State, b: State) -> bool:
    seen, todo = {a}, [a]
    while todo:
        for nxt in _REACHABLE.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return b in seen


# Mostly amounts a payment can have, sometimes more than the payer holds or
# the authorization covers, now and then one that must be refused outright.
amounts = st.one_of(st.integers(1, 400), st.integers(1, 400), st.integers(0, 1_200),
                    st.sampled_from([-1, 0, 2**63, 2**64]))
pay_ids = st.integers(0, 1)
step = st.one_of(
    st.tuples(st.just("quote"), pay_ids, amounts),
    st.tuples(st.just("authorize"), pay_ids, st.booleans()),
    st.tuples(st.just("capture"), pay_ids, amounts),
    st.tuples(st.just("cancel"), pay_ids, st.booleans()),
    st.tuples(st.just("refund"), pay_ids, st.one_of(st.none(), amounts)),
    st.tuples(st.just("status"), pay_ids, st.booleans()),
    st.tuples(st.just("race"), pay_ids, st.booleans()),
    st.tuples(st.just("wait"), pay_ids, st.integers(0, 40_000)),
    st.tuples(st.just("buy"), pay_ids, st.integers(1, 400)),  # quote, authorize: reaches the later states

)


def _check(world: World, history: dict[bytes, State]) -> None:
    balances = world.balances()
    assert sum(balances.values()) == 0
    assert all(v >= 0 for k, v in balances.items() if k != "ledger:deposits")
    payee_should = 0
    for n in range(3):
        record = world.state.payment(pid(n))
        if record is None:
            continue
        assert balances.get("hold:" + pid(n).hex(), 0) == record.authorized
        assert record.captured <= record.money.amount_minor
        assert record.refunded <= record.captured
        captures = world.state.store.query("SELECT COUNT(*) FROM ledger_entries WHERE entry = ?",
                                           (pid(n).hex() + ":capture",))[0][0]
        assert captures == (1 if record.captured else 0)
        payee_should += record.captured - (record.refunded if record.state is State.REFUNDED else 0)
        before = history.get(record.payment_id)
        if before is not None and before is not record.state:
            assert _reachable(before, record.state), (before, record.state)
        history[record.payment_id] = record.state
        event(f"reached {record.state.value}")
    assert balances.get(world.payee_did, 0) == payee_should


def _run(world: World, quotes: dict[int, dict[str, Any]], answered: list[tuple[int, dict[str, Any]]],
         action: tuple[Any, ...], now: int) -> None:
    kind, n, arg = action
    if kind == "quote":
        d = world.quote(n, amount=arg, now=now) if arg >= 0 else world.send(
            {"pay_v": 1, "op": "quote_request", "payment_id": pid(n), "payee": world.payee_did,
             "money": {"amount_minor": arg, "asset": "USD", "network": NET}}, now=now)
        if isinstance(d, Answered):
            quotes[n] = d.result
        else:
            assert isinstance(d, Rejected) and d.code in (1001, 4001, 4104)
    elif kind == "buy":
        _run(world, quotes, answered, ("quote", n, arg), now)
        _run(world, quotes, answered, ("authorize", n, True), now)
    elif kind == "authorize" and n in quotes:
        d = world.authorize(n, quotes[n], now=now, sender=PAYER if arg else OTHER)
        assert isinstance(d, (Answered, Rejected))
        if isinstance(d, Answered):
            answered.append((n, d.result))
    elif kind == "capture" and n in quotes:
        d = world.capture(n, quotes[n], amount=arg if 0 <= arg < 2**63 else None, now=now) if arg >= 0 else \
            world.send({"pay_v": 1, "op": "capture", "payment_id": pid(n), "quote_id": quotes[n]["quote_id"],
                        "money": {"amount_minor": arg, "asset": "USD", "network": NET}}, now=now)
        assert not isinstance(d, ExecutionFailed)
    elif kind == "cancel":
        world.op(n, "cancel", now=now, sender=PAYER if arg else OTHER)
    elif kind == "refund":
        fields = {} if arg is None else {"money": {"amount_minor": arg, "asset": "USD", "network": NET}}
        d = world.op(n, "refund", now=now, **fields)
        assert not isinstance(d, ExecutionFailed)
    elif kind == "status":
        world.op(n, "status_query", now=now)
    elif kind == "race" and n in quotes:
        # Two workers plan a capture and a cancel on the same read, then commit in either order.
        cap = parse_request({"pay_v": 1, "op": "capture", "payment_id": pid(n), "quote_id": quotes[n]["quote_id"],
                             "money": quotes[n]["money"]})
        can = parse_request({"pay_v": 1, "op": "cancel", "payment_id": pid(n)})
        plans = [world.payee.plan(r, sender=PAYER, now_ms=now, view=world.state) for r in (cap, can)]
        if arg:
            plans.reverse()
        committed = [world.state.apply(p) if p.writes else False for p in plans]
        if all(p.record is not None for p in plans):
            # Both planned a transition from the same stored version: one wins.
            assert sum(committed) == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(step, min_size=6, max_size=40))
def test_random_operation_sequences_keep_money_exact(open_store: Callable[[], StateStore],
                                                     actions: list[tuple[Any, ...]]) -> None:
    world = World(open_store(), funds=FUNDS)
    quotes: dict[int, dict[str, Any]] = {}
    history: dict[bytes, State] = {}
    answered: list[tuple[int, dict[str, Any]]] = []
    now = T0
    for action in actions:
        if action[0] == "wait":
            now += action[2]
            continue
        _run(world, quotes, answered, action, now)
        _check(world, history)
    # Replaying every authorization that was answered answers the same and moves nothing.
    snapshot = world.balances()
    for n, result in answered:
        again = world.authorize(n, quotes[n], now=now + 1)
        assert isinstance(again, Answered) and again.replayed and again.result == result
    assert world.balances() == snapshot
