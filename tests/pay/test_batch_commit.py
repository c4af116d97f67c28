"""Payment steps committed once per turn of the daemon's loop
(``PaymentStore.apply_many``, ``PaymentService.workflow_in_ticks``): each
plan in its own savepoint, so a plan that lost to another of the batch is
undone alone and planned again; a store that fails writes nothing and every
step is answered 5001. Store level on both backends; served level through a
real daemon with many payers in flight at once."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from ampcap.errors import AmpError
from ampcap.net.api.payments import Payer
from ampcap.net.api.peer import Peer
from ampcap.pay.bodies import parse_request
from ampcap.pay.codes import Answered
from ampcap.pay.ledger import LEDGER_NETWORK
from ampcap.pay.money import Money
from ampcap.pay.state import Plan
from ampcap.store.database import StateStore
from ampcap.wire.identity import Identity

sys.path.insert(0, str(Path(__file__).parent))
from conftest import PAYER, T0, World, money, pid  # noqa: E402
from test_served import payee_daemon  # noqa: E402


def _plan(world: World, params: dict[str, Any]) -> Plan:
    plan = world.payee.plan(parse_request(params), sender=PAYER, now_ms=T0, view=world.state)
    assert isinstance(plan, Plan) and plan.writes
    return plan


def _quote(world: World, n: int) -> dict[str, Any]:
    return {"pay_v": 1, "op": "quote_request", "payment_id": pid(n), "payee": world.payee_did, "money": money(500)}


def test_a_plan_that_lost_within_the_batch_is_undone_alone(store: StateStore) -> None:
    world = World(store)
    first, again, other = _plan(world, _quote(world, 1)), _plan(world, _quote(world, 1)), _plan(world, _quote(world, 2))
    assert world.state.apply_many([first, again, other]) == [True, False, True]
    assert world.state.payment(pid(1)) is not None and world.state.payment(pid(2)) is not None
    assert world.state.payment(pid(1)).version == 1  # type: ignore[union-attr]
    # Two authorizations spending one balance: the second debit finds it gone.
    world2 = World(store, funds=0)
    world2.fund("did:example:poor", 700, "poor")
    plans = []
    for n in (3, 4):
        quote = world2.payee.plan(parse_request(_quote(world2, n)), sender="did:example:poor", now_ms=T0,
                                  view=world2.state)
        assert isinstance(quote, Plan) and world2.state.apply(quote)
        assert isinstance(quote.decision, Answered)
        q = quote.decision.result
        plans.append(world2.payee.plan(parse_request(
            {"pay_v": 1, "op": "authorize", "payment_id": pid(n), "quote_id": q["quote_id"], "payer": q["payer"],
             "payee": q["payee"], "money": q["money"]}), sender="did:example:poor", now_ms=T0, view=world2.state))
    assert world2.state.apply_many(plans) == [True, False]
    assert world2.state.balances("USD", "ampcap-local-ledger")["did:example:poor"] == 200


def test_a_store_failing_in_the_batch_writes_nothing(store: StateStore) -> None:
    world = World(store)
    plans = [_plan(world, _quote(world, n)) for n in (5, 6)]
    original = world.state._write_plan
    calls = []

    def failing(db: Any, plan: Plan) -> None:
        calls.append(plan)
        if len(calls) == 2:
            raise RuntimeError("the store went away")
        original(db, plan)

    world.state._write_plan = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        world.state.apply_many(plans)
    assert world.state.payment(pid(5)) is None and world.state.payment(pid(6)) is None


USD = Money(1, "USD", LEDGER_NETWORK)


@pytest.mark.trio
async def test_many_payers_in_one_turn_share_commits_and_every_step_is_answered(store: StateStore) -> None:
    """32 payers pay at once (quote, authorize, capture each), and two of
    them race a capture against a cancel of one payment in the same turn:
    every step gets its answer from what committed, exactly one of the race
    wins, and the ledger sums to zero."""
    async with payee_daemon(store) as (daemon, url, service):
        commits, batched = 0, 0
        original = service.state.apply_many

        def counting(plans: list[Plan]) -> list[bool]:
            nonlocal commits, batched
            commits += 1
            batched += len(plans)
            return original(plans)

        service.state.apply_many = counting  # type: ignore[method-assign]
        payers = [Identity.generate(os.urandom) for _ in range(32)]
        paid: list[str] = []

        async def pay(identity: Identity) -> None:
            async with Peer(identity).connect(url) as remote:
                _quote, captured = await Payer(remote).pay(USD)
                paid.append(captured["status"])

        async with trio.open_nursery() as nursery:
            for identity in payers:
                nursery.start_soon(pay, identity)
        assert paid == ["settled"] * 32
        assert batched > commits > 0  # steps of one turn shared a commit

        racer = payers[0]
        async with Peer(racer).connect(url) as remote:
            payer = Payer(remote)
            quote = await payer.quote(USD)
            await payer.authorize(quote)
            outcomes: list[Any] = []

            async def attempt(step: Any) -> None:
                try:
                    outcomes.append((await step(quote))["status"])
                except AmpError as exc:
                    outcomes.append(exc.code)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attempt, payer.capture)
                nursery.start_soon(attempt, lambda q: payer.cancel(q.payment_id))
            assert sorted(map(str, outcomes)) in (["4103", "settled"], ["4103", "canceled"]), outcomes
        balances = service.state.balances("USD", LEDGER_NETWORK)
        assert sum(balances.values()) == 0
        won = 1 if "settled" in outcomes else 0
        assert balances[daemon.identity.did] == 32 + won
