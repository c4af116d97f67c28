"""The local ledger settlement adapter (ruling R26): balances in the state
store, proofs signed by the ledger's own Ed25519 key. It makes a paid
capability work end to end on one machine, and is what the tests and the
demo settle with.

Accounts are (owner, asset, network). An authorization moves the amount
from the payer's account into a holding account of the payment
(``hold:<payment_id hex>``), so reserved money is visible and the sum of all
balances of an asset never changes except by :meth:`LocalLedger.deposit`.
Capture moves from the hold to the payee (and the unused rest back to the
payer); a refund moves from the payee back to the payer. Every movement has
an entry name unique per payment and step, and the store refuses a second
movement under the same entry.

Finality is immediate: a committed movement is final, so captures answer
``settled`` and refunds ``refunded`` (passing through ``refund_pending`` in
the §7 table), each with a proof whose ``finalized_at`` is the commit time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..errors import AmpError
from ..wire.didkey import ed25519_from_did_key
from ..wire.identity import Identity
from .money import Money
from .settlement import (Account, InsufficientFunds, Movement, ProofPayload, Settlement, SettlementProof,
                         sign_proof, verify_proof)

__all__ = ["LocalLedger", "LEDGER_NETWORK", "DEPOSITS", "hold_account"]

LEDGER_NETWORK = "ampcap-local-ledger"
DEPOSITS = "ledger:deposits"  # the owner money enters the ledger from (its balance goes negative)


def hold_account(payment_id: bytes, money: Money) -> Account:
    return Account(f"hold:{payment_id.hex()}", money.asset, money.network)


class LocalLedger:
    """A :class:`~.settlement.SettlementAdapter` over store balances."""

    def __init__(self, key: Identity, *, network: str = LEDGER_NETWORK,
                 assets: Collection[str] | None = None, trusted: Collection[str] = ()) -> None:
        self.key = key
        self.network = network
        self.assets = frozenset(assets) if assets is not None else None
        # Other ledgers whose proofs this one accepts (their DIDs); its own always.
        self.trusted = frozenset(trusted) | {key.did}

    @property
    def adapter_id(self) -> str:
        return self.key.did

    def supports(self, money: Money) -> bool:
        return money.network == self.network and (self.assets is None or money.asset in self.assets)

    def account(self, owner: str, money: Money) -> Account:
        return Account(owner, money.asset, money.network)

    def deposit(self, reference: str, owner: str, money: Money) -> Movement:
        """Money entering the ledger (an operator's top-up): from the
        deposits account, whose balance is minus everything ever deposited."""
        return Movement(f"deposit:{reference}", Account(DEPOSITS, money.asset, money.network),
                        self.account(owner, money), money.amount_minor, overdraft=True)

    def _proof(self, payment_id: bytes, money: Money, step: str, now_ms: int) -> SettlementProof:
        payload = ProofPayload(network=money.network, payment_id=payment_id, money=money,
                               reference=f"{self.network}:{payment_id.hex()}:{step}", confirmations=1,
                               finalized_at=now_ms)
        return sign_proof(payload, self.adapter_id, self.key.sign)

    def reserve(self, payment_id: bytes, payer: str, money: Money, balance: Callable[[Account], int]) -> Settlement:
        source = self.account(payer, money)
        if balance(source) < money.amount_minor:
            raise InsufficientFunds(f"{payer} holds less than {money.amount_minor} {money.asset}")
        return Settlement((Movement(f"{payment_id.hex()}:hold", source, hold_account(payment_id, money),
                                    money.amount_minor),))

    def capture(self, payment_id: bytes, payer: str, payee: str, held: Money, money: Money,
                now_ms: int) -> Settlement:
        hold = hold_account(payment_id, held)
        moves = [Movement(f"{payment_id.hex()}:capture", hold, self.account(payee, money), money.amount_minor)]
        rest = held.amount_minor - money.amount_minor
        if rest:
            moves.append(Movement(f"{payment_id.hex()}:release", hold, self.account(payer, held), rest))
        return Settlement(tuple(moves), self._proof(payment_id, money, "capture", now_ms))

    def release(self, payment_id: bytes, payer: str, held: Money) -> Settlement:
        return Settlement((Movement(f"{payment_id.hex()}:release", hold_account(payment_id, held),
                                    self.account(payer, held), held.amount_minor),))

    def refund(self, payment_id: bytes, payer: str, payee: str, money: Money, now_ms: int,
               balance: Callable[[Account], int]) -> Settlement:
        source = self.account(payee, money)
        if balance(source) < money.amount_minor:
            raise InsufficientFunds(f"the payee holds less than {money.amount_minor} {money.asset}")
        return Settlement((Movement(f"{payment_id.hex()}:refund", source, self.account(payer, money),
                                    money.amount_minor),), self._proof(payment_id, money, "refund", now_ms))

    def keys(self, adapter_id: str) -> bytes | None:
        """Local trust (§6.1 step 4): only ledgers named in ``trusted``."""
        if adapter_id not in self.trusted:
            return None
        try:
            return ed25519_from_did_key(adapter_id)
        except AmpError:
            return None

    def verify(self, proof: SettlementProof, *, payment_id: bytes, money: Money) -> None:
        verify_proof(proof, payment_id=payment_id, money=money, keys=self.keys)
