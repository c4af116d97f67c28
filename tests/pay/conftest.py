"""Fixtures for the payment tests. ``store`` is the one place a backend is
chosen: the PostgreSQL branch (issue 33) parametrizes it, and every test
here runs unchanged on both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampcap.pay.ledger import LocalLedger
from ampcap.pay.money import Money
from ampcap.pay.payee import Payee, handle
from ampcap.store import open_store as open_target
from ampcap.store.database import StateStore
from ampcap.store.payments import PaymentStore
from ampcap.wire.identity import Identity

PAYER = "did:example:payer"
PAYEE_SEED = bytes(range(32))
LEDGER_SEED = bytes(range(32, 64))
USD = "USD"
NET = "ampcap-local-ledger"
T0 = 1_800_000_000_000


@pytest.fixture
def open_store() -> Iterator[Callable[[], StateStore]]:
    """A factory of fresh, empty stores (property tests need one per example);
    every store it made is closed at the end."""
    made: list[StateStore] = []

    def fresh() -> StateStore:
        made.append(StateStore.open(None))
        return made[-1]

    yield fresh
    for db in made:
        db.close()


@pytest.fixture
def store(store_target: str) -> Iterator[StateStore]:
    """One store per test, on SQLite and on PostgreSQL (``store_target``)."""
    db = open_target(store_target)
    yield db
    db.close()


@pytest.fixture
def store_pair(store_target: str) -> Iterator[tuple[StateStore, StateStore]]:
    """Two connections to one database: two workers sharing state (R25), on both backends."""
    first, second = open_target(store_target), open_target(store_target)
    yield first, second
    first.close()
    second.close()


def money(amount: int, asset: str = USD, network: str = NET) -> dict[str, Any]:
    return {"amount_minor": amount, "asset": asset, "network": network}


def pid(n: int) -> bytes:
    return n.to_bytes(16, "big")


class World:
    """A payee with a local ledger over one store, and helpers that send it
    CAP params the way the daemon's executor does."""

    def __init__(self, db: StateStore, *, funds: int = 10_000) -> None:
        self.ledger = LocalLedger(Identity.from_seed(LEDGER_SEED))
        self.payee_did = Identity.from_seed(PAYEE_SEED).did
        self.payee = Payee(self.payee_did, self.ledger, quote_ttl_ms=60_000)
        self.state = PaymentStore(db)
        if funds:
            self.fund(PAYER, funds)

    def fund(self, owner: str, amount: int, reference: str | None = None) -> None:
        assert self.state.deposit(self.ledger.deposit(reference or f"{owner}:{amount}", owner,
                                                      Money(amount, USD, NET)))

    def send(self, params: dict[str, Any], *, sender: str = PAYER, now: int = T0, **kw: Any) -> Any:
        decision, _plan = handle(self.payee, params, sender=sender, now_ms=now, state=self.state, **kw)
        return decision

    def quote(self, n: int, amount: int = 500, *, sender: str = PAYER, now: int = T0) -> Any:
        return self.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(n), "payee": self.payee_did,
                          "money": money(amount)}, sender=sender, now=now)

    def authorize(self, n: int, quote: dict[str, Any], *, sender: str = PAYER, now: int = T0, **over: Any) -> Any:
        body = {"pay_v": 1, "op": "authorize", "payment_id": pid(n), "quote_id": quote["quote_id"],
                "payer": quote["payer"], "payee": quote["payee"], "money": quote["money"], **over}
        return self.send(body, sender=sender, now=now)

    def capture(self, n: int, quote: dict[str, Any], amount: int | None = None, *, now: int = T0) -> Any:
        m = dict(quote["money"]) if amount is None else money(amount)
        return self.send({"pay_v": 1, "op": "capture", "payment_id": pid(n), "quote_id": quote["quote_id"],
                          "money": m}, now=now)

    def op(self, n: int, op: str, *, sender: str = PAYER, now: int = T0, **fields: Any) -> Any:
        return self.send({"pay_v": 1, "op": op, "payment_id": pid(n), **fields}, sender=sender, now=now)

    def balances(self) -> dict[str, int]:
        return self.state.balances(USD, NET)


@pytest.fixture
def world(store: StateStore) -> World:
    return World(store)
