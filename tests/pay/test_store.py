"""store/payments.py: the conditions that keep two workers from moving
money twice, on two real connections to one database file (R25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampcap.pay.bodies import parse_request
from ampcap.pay.codes import Answered, ExecutionFailed, Rejected
from ampcap.pay.lifecycle import State
from ampcap.pay.money import Money
from ampcap.pay.payee import handle
from ampcap.store.database import StateStore

from .conftest import NET, PAYER, T0, World, pid


@pytest.fixture
def two_workers(store_pair: tuple[StateStore, StateStore]) -> tuple[World, World]:
    return World(store_pair[0]), World(store_pair[1], funds=0)


def test_a_capture_racing_a_cancel_lets_exactly_one_win(two_workers: tuple[World, World]) -> None:
    a, b = two_workers
    quote = a.quote(1).result
    a.authorize(1, quote)
    # Both workers plan against the same stored version...
    capture = parse_request({"pay_v": 1, "op": "capture", "payment_id": pid(1), "quote_id": quote["quote_id"],
                             "money": quote["money"]})
    cancel = parse_request({"pay_v": 1, "op": "cancel", "payment_id": pid(1)})
    plan_a = a.payee.plan(capture, sender=PAYER, now_ms=T0, view=a.state)
    plan_b = b.payee.plan(cancel, sender=PAYER, now_ms=T0, view=b.state)
    assert plan_a.writes and plan_b.writes
    # ...one commits, the other's conditions no longer hold: nothing of it is written.
    assert a.state.apply(plan_a)
    assert not b.state.apply(plan_b)
    # Re-planned (what handle() does), the cancel now finds a settled payment.
    decision, _ = handle(b.payee, cancel.to_wire(), sender=PAYER, now_ms=T0, state=b.state)
    assert isinstance(decision, Rejected) and decision.code == 4103
    assert a.state.payment(pid(1)).state is State.SETTLED
    assert a.balances()[a.payee_did] == 500 and a.balances()[PAYER] == 9_500


def test_the_same_plan_never_commits_twice(two_workers: tuple[World, World]) -> None:
    a, b = two_workers
    quote = a.quote(1).result
    a.authorize(1, quote)
    capture = parse_request({"pay_v": 1, "op": "capture", "payment_id": pid(1), "quote_id": quote["quote_id"],
                             "money": quote["money"]})
    plan = a.payee.plan(capture, sender=PAYER, now_ms=T0, view=a.state)
    assert a.state.apply(plan)
    assert not b.state.apply(plan)  # a redelivered commit: version moved on
    # The other worker, handed the same request, answers the recorded result.
    decision, _ = handle(b.payee, capture.to_wire(), sender=PAYER, now_ms=T0, state=b.state)
    assert isinstance(decision, Answered) and decision.replayed
    assert a.balances()[a.payee_did] == 500


def test_a_debit_the_balance_no_longer_covers_is_refused(store: StateStore) -> None:
    world = World(store, funds=600)
    q1, q2 = world.quote(1, 500).result, world.quote(2, 500).result
    plan1 = world.payee.plan(parse_request({**q1, "op": "authorize", "pay_v": 1}), sender=PAYER, now_ms=T0,
                             view=world.state)
    plan2 = world.payee.plan(parse_request({**q2, "op": "authorize", "pay_v": 1}), sender=PAYER, now_ms=T0,
                             view=world.state)
    assert world.state.apply(plan1)
    assert not world.state.apply(plan2)  # planned when 600 was there; now 100
    assert world.authorize(2, q2).result["reason_code"] == 4101
    assert world.balances()[PAYER] == 100


def test_deposits_are_idempotent_by_reference(store: StateStore) -> None:
    world = World(store, funds=0)
    move = world.ledger.deposit("topup-1", PAYER, Money(50, "USD", NET))
    assert world.state.deposit(move)
    assert not world.state.deposit(move)
    assert world.balances()[PAYER] == 50


def test_state_survives_reopening(tmp_path: Path) -> None:
    db = StateStore.open(tmp_path)
    world = World(db)
    quote = world.quote(1).result
    world.authorize(1, quote)
    db.close()
    again = StateStore.open(tmp_path)
    world2 = World(again, funds=0)
    assert world2.state.payment(pid(1)).state is State.AUTHORIZED
    assert world2.authorize(1, quote).replayed
    assert world2.capture(1, quote).result["status"] == "settled"
    assert world2.balances()[world2.payee_did] == 500
    again.close()


def test_a_store_that_fails_mid_commit_is_an_execution_failure(store: StateStore) -> None:
    world = World(store)
    quote = world.quote(1).result
    world.authorize(1, quote)
    store.query("DROP TABLE ledger_entries")  # the next commit fails inside its transaction
    decision = world.capture(1, quote)
    assert isinstance(decision, ExecutionFailed) and decision.code == 5001
    assert world.state.payment(pid(1)).state is State.AUTHORIZED  # rolled back


def test_the_sql_follows_the_store_contract() -> None:
    # Portable to the PostgreSQL backend: ? placeholders, no %, no SQLite-only forms.
    import re

    import ampcap.store.payments as component

    text = Path(component.__file__).read_text()
    sql = " ".join(re.findall(r'"((?:INSERT|UPDATE|SELECT|CREATE|DELETE)[^"]*)"', text)) + " ".join(component._SCHEMA)
    assert sql and "%" not in sql
    for banned in ("INSERT OR", "REPLACE INTO", "AUTOINCREMENT", "WITHOUT ROWID", "rowid", "PRAGMA"):
        assert banned.lower() not in sql.lower(), banned
    types = set(re.findall(r"\b(TEXT|BLOB|INTEGER|REAL|NUMERIC|BOOLEAN|VARCHAR|FLOAT)\b", " ".join(component._SCHEMA)))
    assert types <= {"TEXT", "BLOB", "INTEGER"}


def test_a_payment_is_spent_once_except_by_the_same_invoke_again(two_workers: tuple[World, World]) -> None:
    """pay_consumed: the first invoke spends it; another invoke (even on the
    other worker) cannot; the same invoke run again after a restart can."""
    first, second = two_workers
    assert first.state.consume(pid(9), "org.example.paid:1.0.0", PAYER, T0, b"invoke-1")
    assert not second.state.consume(pid(9), "org.example.paid:1.0.0", PAYER, T0, b"invoke-2")
    assert not second.state.consume(pid(9), "org.example.paid:1.0.0", "did:example:other", T0, b"invoke-1")
    assert second.state.consume(pid(9), "org.example.paid:1.0.0", PAYER, T0, b"invoke-1")
    assert not second.state.consume(pid(9), "org.example.paid:1.0.0", PAYER, T0)  # no invoke id: never again
    assert first.state.consumed(pid(9)) == "org.example.paid:1.0.0"
