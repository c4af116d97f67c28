"""A paid call cut short by ``kill -9`` (R19 with RFC 007): the payment and
the invoke's journal record agree. A real ``ampcap serve --payments
--state-dir`` is killed while a paid capability runs, i.e. after its payment
was spent and before its terminal reply was journaled (the worst moment):

* non-idempotent: the retry of the same invoke gets the journal's 5002
  ("retry with a new id") and the payment is given back in the commit that
  wrote that 5002, so a new invoke naming the same payment runs, once;
* idempotent: the same invoke runs again on retry, still spent by it (not
  charged twice), and no other invoke can spend it.

The ledger is counted exactly: one capture each, nothing moved twice, every
balance of the asset sums to zero."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings  # noqa: E402
from ampcap.net.api.payments import Payer  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402
from ampcap.net.features.payments import DEMO_CREDIT  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.pay.ledger import LEDGER_NETWORK  # noqa: E402
from ampcap.pay.money import Money  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

pytestmark = pytest.mark.trio

RESULT = frozenset({int(MessageType.CAP_RESULT), int(MessageType.ERROR)})
INTERIM = frozenset({int(MessageType.PROGRESS), int(MessageType.PROCESSING), int(MessageType.ACK)})
SETTINGS = ProbeSettings(timeout_s=15.0, settle_s=0.2)
PRICE = Money(300, "USD", LEDGER_NETWORK)
ONCE, AGAIN = "org.test.paid_sleep:1.0.0", "org.test.paid_sleep_idempotent:1.0.0"


def _manifest(tmp: Path) -> Path:
    path = tmp / "paid.toml"
    table = """
[[capability]]
name = "{name}"
version = "1.0.0"
idempotent = {idempotent}
price = {{ amount_minor = 300, asset = "USD", network = "ampcap-local-ledger" }}
input_schema = {{ type = "object", required = ["ms"], properties = {{ ms = {{ type = "integer" }} }} }}
output_schema = {{ type = "object" }}
binding = {{ python = "ampcap.caps.demo:sleep" }}
"""
    path.write_text(table.format(name="org.test.paid_sleep", idempotent="false")
                    + table.format(name="org.test.paid_sleep_idempotent", idempotent="true"))
    return path


def _rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    """The daemon's tables as another process reads them (WAL: safe while it runs)."""
    db = sqlite3.connect(state / "state.sqlite3", timeout=5.0)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _spent(state: Path) -> dict[bytes, bytes]:
    """payment_id -> the message id of the invoke that spent it."""
    return {bytes(p): bytes(i) for p, i in _rows(state, "SELECT payment_id, invoke_id FROM pay_consumed")}


def _balances(state: Path) -> dict[str, int]:
    return {owner: int(b) for owner, b in _rows(
        state, f"SELECT owner, balance FROM ledger_balances WHERE asset = 'USD' AND network = '{LEDGER_NETWORK}'")}


async def _buy(url: str, caller: Identity, service_ref: str) -> bytes:
    async with Peer(caller).connect(url) as remote:
        quote, captured = await Payer(remote).pay(PRICE, service_ref=service_ref)
        assert captured["status"] == "settled"
        return quote.payment_id


async def _call(url: str, caller: Identity, wire: bytes, env: Any, *, wait: bool = True) -> Any:
    probe = await Probe.open(parse_url(url), SETTINGS, identity=caller)
    try:
        await probe.open_session()
        await probe.send_bytes(probe.frame(wire))
        if not wait:
            return None
        ex = await probe.collect(env, RESULT, interim_types=INTERIM, timeout_s=15)
        assert len(ex.terminals) == 1
        return ex.terminals[0].envelope
    finally:
        await probe.aclose()


async def _sealed(url: str, caller: Identity, capability: str, params: dict[str, Any]) -> tuple[Any, bytes]:
    probe = await Probe.open(parse_url(url), SETTINGS, identity=caller)
    try:
        await probe.open_session()
        return probe.seal(MessageType.CAP_INVOKE, {"id": capability, "params": params}, to=probe.peer_did)
    finally:
        await probe.aclose()


async def test_a_paid_call_killed_mid_run_gives_its_payment_back_or_runs_again_unpaid(tmp_path: Path) -> None:
    state = tmp_path / "state"
    caller = Identity.generate(os.urandom)
    args = ("--payments", "--state-dir", str(state), "--manifest", str(_manifest(tmp_path)))
    with serve_process(tmp_path, *args) as first:
        payee = first.did
        once_pay = await _buy(first.url, caller, ONCE)
        again_pay = await _buy(first.url, caller, AGAIN)
        once_env, once_wire = await _sealed(first.url, caller, ONCE, {"ms": 60_000, "$payment": once_pay})
        again_env, again_wire = await _sealed(first.url, caller, AGAIN, {"ms": 3_000, "$payment": again_pay})
        await _call(first.url, caller, once_wire, once_env, wait=False)
        await _call(first.url, caller, again_wire, again_env, wait=False)
        # The worst moment: both payments spent (committed), both capabilities running.
        with trio.fail_after(15):
            while len(_spent(state)) < 2:
                await trio.sleep(0.05)
        assert _spent(state) == {once_pay: once_env.id, again_pay: again_env.id}
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    paid = DEMO_CREDIT.amount_minor - 2 * PRICE.amount_minor
    assert _balances(state)[caller.did] == paid and _balances(state)[payee] == 2 * PRICE.amount_minor

    with serve_process(tmp_path, *args) as second:
        # The restart closed the non-idempotent invoke with 5002 and, in that
        # commit, gave its payment back; the idempotent one keeps it.
        assert _spent(state) == {again_pay: again_env.id}
        cut = await _call(second.url, caller, once_wire, once_env)
        assert cut.body["status"] == "error" and cut.body["error"]["code"] == 5002
        assert "interrupted by a restart" in cut.body["error"]["message"]
        # A new invoke with the same payment: the call the payer paid for.
        retry_env, retry_wire = await _sealed(second.url, caller, ONCE, {"ms": 10, "$payment": once_pay})
        ran = await _call(second.url, caller, retry_wire, retry_env)
        assert ran.body == {"status": "success", "result": {"slept_ms": 10}}
        assert _spent(state)[once_pay] == retry_env.id
        # It bought that one call: a third invoke is refused before running.
        third_env, third_wire = await _sealed(second.url, caller, ONCE, {"ms": 10, "$payment": once_pay})
        refused = await _call(second.url, caller, third_wire, third_env)
        assert refused.body["code"] == 3001 and "already bought" in refused.body["message"]

        # The idempotent invoke, retried as is, runs again on the payment it spent.
        short_env, short_wire = await _sealed(second.url, caller, AGAIN, {"ms": 10, "$payment": again_pay})
        other = await _call(second.url, caller, short_wire, short_env)
        assert other.body["code"] == 3001  # another invoke cannot take it
        redone = await _call(second.url, caller, again_wire, again_env)
        assert redone.body == {"status": "success", "result": {"slept_ms": 3_000}}
        assert _spent(state) == {once_pay: retry_env.id, again_pay: again_env.id}

        # The money moved once per payment and no more: 2 captures, nothing returned or doubled.
        balances = _balances(state)
        assert balances[caller.did] == paid and balances[payee] == 2 * PRICE.amount_minor
        assert sum(balances.values()) == 0
        entries = _rows(state, "SELECT entry, amount FROM ledger_entries WHERE entry LIKE '%capture%'")
        assert sorted(a for _, a in entries) == [PRICE.amount_minor] * 2


async def test_a_paid_call_the_drain_cuts_short_gives_its_payment_back(tmp_path: Path) -> None:
    """SIGTERM while a paid call runs: past --drain-timeout the call ends with
    5002 ("daemon is shutting down"), and the commit of that reply gives the
    payment back (a restart's closure and the drain's agree)."""
    state = tmp_path / "state"
    caller = Identity.generate(os.urandom)
    args = ("--payments", "--state-dir", str(state), "--manifest", str(_manifest(tmp_path)), "--drain-timeout", "0.3")
    with serve_process(tmp_path, *args) as first:
        payment = await _buy(first.url, caller, ONCE)
        env, wire = await _sealed(first.url, caller, ONCE, {"ms": 60_000, "$payment": payment})
        probe = await Probe.open(parse_url(first.url), SETTINGS, identity=caller)
        try:
            await probe.open_session()
            await probe.send_bytes(probe.frame(wire))
            with trio.fail_after(15):
                while payment not in _spent(state):
                    await trio.sleep(0.05)
            first.proc.send_signal(signal.SIGTERM)
            ex = await probe.collect(env, RESULT, interim_types=INTERIM, timeout_s=15)
        finally:
            await probe.aclose()
        assert first.proc.wait(15) == 0
    body = ex.terminals[0].envelope.body
    assert body["status"] == "error" and body["error"]["code"] == 5002
    assert _spent(state) == {}
    with serve_process(tmp_path, *args) as second:
        again = await _call(second.url, caller, wire, env)  # the same invoke: the journal's answer
        assert again.body == body
        new_env, new_wire = await _sealed(second.url, caller, ONCE, {"ms": 10, "$payment": payment})
        ran = await _call(second.url, caller, new_wire, new_env)
        assert ran.body == {"status": "success", "result": {"slept_ms": 10}}
        assert _spent(state) == {payment: new_env.id}
        balances = _balances(state)
        assert balances[caller.did] == DEMO_CREDIT.amount_minor - PRICE.amount_minor and sum(balances.values()) == 0
