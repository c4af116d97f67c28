"""RFC 007 payee state in the daemon's database (R19, R25, R26): payment
lifecycle records, the §5.9 ``op_key`` table, and the local ledger's
balances and entries. Implements :class:`ampcap.pay.state.PaymentState`.

Portable SQL (store contract): ``?`` placeholders, TEXT/BLOB/INTEGER only,
``ON CONFLICT`` upserts, no rowid. Every plan commits in one transaction
and only if what it read still holds, each condition checked by rowcount:

* the payment row: inserted (``ON CONFLICT DO NOTHING``, one row) for a new
  payment, otherwise updated ``WHERE version = <read version>``;
* the ``op_key`` row is new (``ON CONFLICT DO NOTHING``, one row);
* every movement's entry is new (the same), every debit finds the
  balance (``WHERE balance >= amount``), and no credit overflows 64 bits.

A paid call's spend (``pay_consumed``) names the invoke that spent it
(caller, message id). When the invoke journal closes that invoke as cut
short (5002 after a restart, or a dead worker's claim), the spend is
deleted in that same transaction (:meth:`PaymentStore.release`, hooked with
:func:`~ampcap.store.journal.on_interrupted`): the payment buys the retry.

A failed condition rolls the whole transaction back (:class:`_Lost`) and
``apply`` returns False: the engine re-plans from the stored state. Two
workers sharing the store can therefore never capture twice, nor capture
a payment another worker canceled.
"""

from __future__ import annotations

from typing import Any

from ..errors import AmpError
from ..pay.lifecycle import State
from ..pay.money import MAX_AMOUNT, Money
from ..pay.settlement import Account, Movement
from ..pay.state import OpRecord, PaymentRecord, Plan
from ..peer.dedupe import InvokeKey
from .database import StateStore, Transaction
from .journal import on_interrupted

__all__ = ["PaymentStore", "COMPONENT", "VERSION"]

COMPONENT, VERSION = "payments", 3

_CONSUMED = """CREATE TABLE IF NOT EXISTS pay_consumed (
        payment_id BLOB NOT NULL PRIMARY KEY, capability_id TEXT NOT NULL, caller TEXT NOT NULL,
        invoke_id BLOB NOT NULL, consumed_at INTEGER NOT NULL)"""
_BY_INVOKE = "CREATE INDEX IF NOT EXISTS pay_consumed_invoke ON pay_consumed (caller, invoke_id)"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS pay_payments (
        payment_id BLOB NOT NULL PRIMARY KEY, payer TEXT NOT NULL, payee TEXT NOT NULL,
        quote_id BLOB NOT NULL, amount INTEGER NOT NULL, asset TEXT NOT NULL, network TEXT NOT NULL,
        quote_expires_at INTEGER NOT NULL, state TEXT NOT NULL, authorized INTEGER NOT NULL,
        captured INTEGER NOT NULL, refunded INTEGER NOT NULL, reason_code INTEGER,
        settlement BLOB, refund_settlement BLOB, session_id BLOB, service_ref TEXT,
        version INTEGER NOT NULL, updated_at INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS pay_ops (
        payment_id BLOB NOT NULL, op TEXT NOT NULL, sender TEXT NOT NULL, digest BLOB NOT NULL,
        result BLOB NOT NULL, PRIMARY KEY (payment_id, op, sender))""",
    """CREATE TABLE IF NOT EXISTS ledger_balances (
        owner TEXT NOT NULL, asset TEXT NOT NULL, network TEXT NOT NULL, balance INTEGER NOT NULL,
        PRIMARY KEY (owner, asset, network))""",
    """CREATE TABLE IF NOT EXISTS ledger_entries (
        entry TEXT NOT NULL PRIMARY KEY, source TEXT NOT NULL, target TEXT NOT NULL, asset TEXT NOT NULL,
        network TEXT NOT NULL, amount INTEGER NOT NULL)""",
    _CONSUMED,
    _BY_INVOKE,
)
# Version 2: a paid capability's call spends its payment once (docs/payments.md).
# Version 3: the spends found by their invoke (an interrupted one is given back).
_MIGRATIONS = {1: (_CONSUMED,), 2: (_BY_INVOKE,)}

_COLUMNS = ("payment_id, payer, payee, quote_id, amount, asset, network, quote_expires_at, state, authorized, "
            "captured, refunded, reason_code, settlement, refund_settlement, session_id, service_ref, version, "
            "updated_at")

_NAMES = [c.strip() for c in _COLUMNS.split(",")]
_INSERT = (f"INSERT INTO pay_payments ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))}) "
           "ON CONFLICT (payment_id) DO NOTHING")
_UPDATE = (f"UPDATE pay_payments SET {', '.join(f'{n} = ?' for n in _NAMES[1:])} "
           "WHERE payment_id = ? AND version = ?")


class _Lost(Exception):
    """A condition of the plan no longer holds: roll back, re-plan."""


def _blob(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _record(row: tuple[Any, ...]) -> PaymentRecord:
    (payment_id, payer, payee, quote_id, amount, asset, network, expires, state, authorized, captured,
     refunded, reason_code, settlement, refund_settlement, session_id, service_ref, version, updated_at) = row
    return PaymentRecord(
        payment_id=bytes(payment_id), payer=payer, payee=payee, quote_id=bytes(quote_id),
        money=Money(int(amount), asset, network), quote_expires_at=int(expires), state=State(state),
        authorized=int(authorized), captured=int(captured), refunded=int(refunded),
        reason_code=None if reason_code is None else int(reason_code), settlement=_blob(settlement),
        refund_settlement=_blob(refund_settlement), session_id=_blob(session_id), service_ref=service_ref,
        version=int(version), updated_at=int(updated_at))


def _values(r: PaymentRecord) -> tuple[Any, ...]:
    return (r.payment_id, r.payer, r.payee, r.quote_id, r.money.amount_minor, r.money.asset, r.money.network,
            r.quote_expires_at, r.state.value, r.authorized, r.captured, r.refunded, r.reason_code, r.settlement,
            r.refund_settlement, r.session_id, r.service_ref, r.version, r.updated_at)


class PaymentStore:
    """The payee's payments and the local ledger over one :class:`StateStore`."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema(COMPONENT, VERSION, _SCHEMA, _MIGRATIONS)
        self.released = 0  # spends given back because their invoke was interrupted (this process)
        on_interrupted(store, COMPONENT, self.release)

    # ------------------------------------------------------------ PaymentView

    def payment(self, payment_id: bytes) -> PaymentRecord | None:
        rows = self.store.query(f"SELECT {_COLUMNS} FROM pay_payments WHERE payment_id = ?", (payment_id,))
        return _record(rows[0]) if rows else None

    def operation(self, payment_id: bytes, op: str, sender: str) -> OpRecord | None:
        rows = self.store.query("SELECT digest, result FROM pay_ops WHERE payment_id = ? AND op = ? AND sender = ?",
                                (payment_id, op, sender))
        if not rows:
            return None
        return OpRecord(payment_id=payment_id, op=op, sender=sender, digest=bytes(rows[0][0]),
                        result=bytes(rows[0][1]))

    def balance(self, account: Account) -> int:
        rows = self.store.query("SELECT balance FROM ledger_balances WHERE owner = ? AND asset = ? AND network = ?",
                                (account.owner, account.asset, account.network))
        return int(rows[0][0]) if rows else 0

    def balances(self, asset: str, network: str) -> dict[str, int]:
        """Every account of one asset (tests, the CLI's ledger view)."""
        return {owner: int(b) for owner, b in self.store.query(
            "SELECT owner, balance FROM ledger_balances WHERE asset = ? AND network = ? ORDER BY owner",
            (asset, network))}

    def consumed(self, payment_id: bytes) -> str | None:
        """The capability id a payment bought a call of, once spent (None: unspent)."""
        rows = self.store.query("SELECT capability_id FROM pay_consumed WHERE payment_id = ?", (payment_id,))
        return str(rows[0][0]) if rows else None

    def consume(self, payment_id: bytes, capability_id: str, caller: str, now_ms: int,
                invoke_id: bytes = b"") -> bool:
        """Spend ``payment_id`` on one call of ``capability_id``: True for the
        one invoke that spends it (a conditional insert, by rowcount: two
        daemons sharing the store cannot both spend it), and again for that
        same invoke (``caller``, ``invoke_id``) run again after a restart
        (an idempotent capability: R19); False for any other."""
        with self.store.transaction() as db:
            done = db.execute("INSERT INTO pay_consumed (payment_id, capability_id, caller, invoke_id, consumed_at) "
                              "VALUES (?, ?, ?, ?, ?) ON CONFLICT (payment_id) DO NOTHING",
                              (payment_id, capability_id, caller, invoke_id, now_ms))
            if done.rowcount == 1:
                return True
            row = db.execute("SELECT caller, invoke_id FROM pay_consumed WHERE payment_id = ?",
                             (payment_id,)).fetchone()
        return bool(invoke_id) and row is not None and row[0] == caller and bytes(row[1]) == invoke_id

    def release(self, db: Transaction, keys: list[InvokeKey]) -> int:
        """Within the journal's transaction closing ``keys`` as interrupted:
        give back the payments those invokes spent (the call never ended, and
        its caller is told to retry with a new id: the payment buys that
        retry). Returns how many."""
        count = 0
        for key in keys:
            count += db.execute("DELETE FROM pay_consumed WHERE caller = ? AND invoke_id = ?",
                                (key.sender, key.msg_id)).rowcount
        self.released += count
        return count

    # ----------------------------------------------------------- PaymentState

    def apply(self, plan: Plan) -> bool:
        try:
            with self.store.transaction() as db:
                self._write_plan(db, plan)
        except _Lost:
            return False
        return True

    def apply_many(self, plans: list[Plan]) -> list[bool]:
        """:meth:`apply` for several plans in one transaction (one commit for
        a daemon's tick of payment steps): each plan within a savepoint, so a
        plan whose condition no longer holds (another plan of the batch, or
        another worker, moved first) is undone alone and reported False, to
        be planned again; the others commit together. Raises (nothing
        written) when the store fails."""
        done: list[bool] = []
        with self.store.transaction() as db:
            for plan in plans:
                db.execute("SAVEPOINT pay_plan")
                try:
                    self._write_plan(db, plan)
                except _Lost:
                    db.execute("ROLLBACK TO SAVEPOINT pay_plan")
                    done.append(False)
                else:
                    done.append(True)
                db.execute("RELEASE SAVEPOINT pay_plan")
        return done

    def _write_plan(self, db: Any, plan: Plan) -> None:
        if plan.record is not None:
            self._write_record(db, plan.record)
        if plan.operation is not None:
            op = plan.operation
            done = db.execute("INSERT INTO pay_ops (payment_id, op, sender, digest, result) "
                              "VALUES (?, ?, ?, ?, ?) ON CONFLICT (payment_id, op, sender) DO NOTHING",
                              (op.payment_id, op.op, op.sender, op.digest, op.result))
            if done.rowcount != 1:
                raise _Lost
        for movement in plan.movements:
            self._move(db, movement)

    def deposit(self, movement: Movement) -> bool:
        """Commit one ledger movement by itself (a top-up); False when its
        entry was already committed (a retried deposit moves nothing)."""
        try:
            with self.store.transaction() as db:
                self._move(db, movement)
        except _Lost:
            return False
        return True

    @staticmethod
    def _write_record(db: Any, record: PaymentRecord) -> None:
        values = _values(record)
        if record.version == 1:
            done = db.execute(_INSERT, values)
        else:
            done = db.execute(_UPDATE, (*values[1:], record.payment_id, record.version - 1))
        if done.rowcount != 1:
            raise _Lost

    @staticmethod
    def _move(db: Any, m: Movement) -> None:
        if m.amount <= 0 or m.source.asset != m.target.asset or m.source.network != m.target.network:
            # The engine never plans one; refuse rather than write it (5001: a bug, not the caller's).
            raise AmpError(5001, f"malformed ledger movement {m.entry}")
        done = db.execute("INSERT INTO ledger_entries (entry, source, target, asset, network, amount) "
                          "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entry) DO NOTHING",
                          (m.entry, m.source.owner, m.target.owner, m.source.asset, m.source.network, m.amount))
        if done.rowcount != 1:
            raise _Lost  # this step already moved its money
        src = m.source
        db.execute("INSERT INTO ledger_balances (owner, asset, network, balance) VALUES (?, ?, ?, 0) "
                   "ON CONFLICT (owner, asset, network) DO NOTHING", (src.owner, src.asset, src.network))
        floor = -MAX_AMOUNT + m.amount if m.overdraft else m.amount
        done = db.execute("UPDATE ledger_balances SET balance = balance - ? "
                          "WHERE owner = ? AND asset = ? AND network = ? AND balance >= ?",
                          (m.amount, src.owner, src.asset, src.network, floor))
        if done.rowcount != 1:
            raise _Lost  # the balance moved since the plan read it
        dst = m.target
        done = db.execute("INSERT INTO ledger_balances (owner, asset, network, balance) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT (owner, asset, network) DO UPDATE SET balance = ledger_balances.balance + "
                          "excluded.balance WHERE ledger_balances.balance <= ?",
                          (dst.owner, dst.asset, dst.network, m.amount, MAX_AMOUNT - m.amount))
        if done.rowcount != 1:
            raise _Lost  # would overflow 64 bits
