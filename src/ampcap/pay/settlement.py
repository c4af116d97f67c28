"""Settlement proofs (RFC 007 §6) and the adapter interface (ruling R26).

A settlement adapter turns a payment's money movements into a signed
``settlement-proof`` binding (``payment_id``, ``money``, ``network``). The
payee's engine (:mod:`.payee`) is sans-I/O, so an adapter here *plans*: it
says which balance movements settle the step and returns the proof; the
state store commits the movements with the lifecycle change in one
transaction (store/payments.py). An adapter for a real network plugs in
behind the same :class:`SettlementAdapter` protocol; one that cannot
complete a step raises :class:`SettlementUnavailable` (5002, retryable) and
nothing is committed.

Verification (§6.1), :func:`verify_proof`, in the RFC's order: shape
(1001), binding to the payment (3001), the adapter's key from local trust
(3001 when unknown: an adapter nobody vouches for fails closed), algorithm
and signature over ``CBOR(["APP-proof-v1", bstr(deterministic CBOR of the
payload)])`` (3001). The payload is carried as a map and re-encoded
deterministically to check, so a proof is verified over exactly the values
it states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import VerifyKey

from ..errors import AmpError
from ..wire.cbor import dumps
from .codes import MALFORMED, UNAUTHORIZED, UNAVAILABLE
from .money import Money, parse_money

__all__ = ["PROOF_V", "PROOF_CONTEXT", "ProofPayload", "SettlementProof", "proof_signing_input", "sign_proof",
           "parse_proof", "verify_proof", "AdapterKeys", "Account", "Movement", "Settlement",
           "SettlementAdapter", "SettlementUnavailable", "InsufficientFunds"]

PROOF_V = 1
PROOF_CONTEXT = "APP-proof-v1"


class ProofPayload(msgspec.Struct, frozen=True, kw_only=True):
    network: str
    payment_id: bytes
    money: Money
    reference: str
    confirmations: int | None = None
    finalized_at: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"proof_v": PROOF_V, "network": self.network, "payment_id": self.payment_id,
                               "money": self.money.to_wire(), "reference": self.reference}
        if self.confirmations is not None:
            out["confirmations"] = self.confirmations
        if self.finalized_at is not None:
            out["finalized_at"] = self.finalized_at
        return out


class SettlementProof(msgspec.Struct, frozen=True, kw_only=True):
    payload: ProofPayload
    adapter_id: str
    sig: bytes

    @property
    def final(self) -> bool:
        return self.payload.finalized_at is not None

    def to_wire(self) -> dict[str, Any]:
        return {"payload": self.payload.to_wire(), "adapter_id": self.adapter_id, "sig_alg": "Ed25519",
                "sig": self.sig}


def proof_signing_input(payload: ProofPayload) -> bytes:
    return dumps([PROOF_CONTEXT, dumps(payload.to_wire())])


def sign_proof(payload: ProofPayload, adapter_id: str, sign: Callable[[bytes], bytes]) -> SettlementProof:
    """``sign`` is the adapter's Ed25519 signer (``Identity.sign``)."""
    return SettlementProof(payload=payload, adapter_id=adapter_id, sig=sign(proof_signing_input(payload)))


def _uint(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 1 << 64:
        raise AmpError(MALFORMED, "must be an unsigned integer", path=path)
    return value


def _text(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise AmpError(MALFORMED, f"{key} must be a text string", path=f"{path}.{key}")
    return value


def parse_proof(value: Any, path: str = "settlement") -> SettlementProof:
    """§6.1 step 1: a ``settlement-proof`` object, or 1001."""
    if not isinstance(value, Mapping):
        raise AmpError(MALFORMED, "settlement proof must be a map", path=path)
    payload = value.get("payload")
    where = f"{path}.payload"
    if not isinstance(payload, Mapping):
        raise AmpError(MALFORMED, "settlement proof needs a payload map", path=where)
    if payload.get("proof_v") != PROOF_V or isinstance(payload.get("proof_v"), bool):
        raise AmpError(MALFORMED, "payload.proof_v must be 1", path=f"{where}.proof_v")
    payment_id = payload.get("payment_id")
    if not isinstance(payment_id, bytes) or len(payment_id) != 16:
        raise AmpError(MALFORMED, "payload.payment_id must be 16 bytes", path=f"{where}.payment_id")
    sig = value.get("sig")
    if not isinstance(sig, bytes) or len(sig) != 64:
        raise AmpError(MALFORMED, "sig must be 64 bytes", path=f"{path}.sig")
    if not isinstance(value.get("sig_alg"), str):
        raise AmpError(MALFORMED, "sig_alg must be a text string", path=f"{path}.sig_alg")
    try:
        money = parse_money(payload.get("money"), f"{where}.money")
    except AmpError as exc:  # inside a proof every money fault is a shape fault
        raise AmpError(MALFORMED, exc.message, path=exc.path) from None
    return SettlementProof(
        payload=ProofPayload(
            network=_text(payload, "network", where), payment_id=payment_id, money=money,
            reference=_text(payload, "reference", where),
            confirmations=None if "confirmations" not in payload else _uint(payload["confirmations"],
                                                                             f"{where}.confirmations"),
            finalized_at=None if "finalized_at" not in payload else _uint(payload["finalized_at"],
                                                                           f"{where}.finalized_at")),
        adapter_id=_text(value, "adapter_id", path), sig=sig)


# Local trust policy (§6.1 step 4): the Ed25519 key of an adapter DID, or
# None when this party does not trust that adapter.
AdapterKeys = Callable[[str], "bytes | None"]


def verify_proof(proof: SettlementProof, *, payment_id: bytes, money: Money, keys: AdapterKeys,
                 path: str = "settlement") -> None:
    """§6.1 steps 2-6: bound to this payment and these values, signed by a
    trusted adapter; ``AmpError(3001)`` otherwise."""
    payload = proof.payload
    if payload.payment_id != payment_id:
        raise AmpError(UNAUTHORIZED, "settlement proof is for another payment", path=f"{path}.payload.payment_id")
    if payload.money != money or payload.network != money.network:
        raise AmpError(UNAUTHORIZED, "settlement proof money/network differ from the payment's",
                       path=f"{path}.payload.money")
    try:
        key = keys(proof.adapter_id)
    except AmpError:
        key = None
    if key is None or len(key) != 32:
        raise AmpError(UNAUTHORIZED, "settlement adapter is not trusted here", path=f"{path}.adapter_id")
    try:
        VerifyKey(key).verify(proof_signing_input(payload), proof.sig)
    except (BadSignatureError, CryptoError, ValueError):
        raise AmpError(UNAUTHORIZED, "settlement proof signature does not verify", path=f"{path}.sig") from None


# ------------------------------------------------------------ the adapter


class Account(msgspec.Struct, frozen=True, gc=False, order=True):
    """A balance: one owner (a DID, or a ledger-internal holding account) in
    one asset on one network."""

    owner: str
    asset: str
    network: str


class Movement(msgspec.Struct, frozen=True, gc=False):
    """``amount`` from ``source`` to ``target``. ``entry`` names the movement
    uniquely (``<payment_id hex>:capture``): the store refuses a second
    movement under one entry, so a step can never move money twice."""

    entry: str
    source: Account
    target: Account
    amount: int
    # Only money entering the ledger may take its source below zero.
    overdraft: bool = False


class Settlement(msgspec.Struct, frozen=True):
    """What an adapter planned for one step: the movements to commit and
    the proof (None for steps that prove nothing: a reservation, a release)."""

    movements: tuple[Movement, ...] = ()
    proof: SettlementProof | None = None


class SettlementUnavailable(Exception):
    """The adapter cannot complete the step now (5002, retryable)."""

    code = UNAVAILABLE


class InsufficientFunds(Exception):
    """The source account cannot cover the step (4101): a business outcome."""


class SettlementAdapter(Protocol):
    """A settlement network as the payee's engine sees it. ``balance``
    reads the store (the record, R19); every method is deterministic for its
    inputs (§6)."""

    @property
    def adapter_id(self) -> str: ...

    def supports(self, money: Money) -> bool:
        """Whether this adapter settles ``money``'s asset on its network (4104 when not)."""
        ...

    def reserve(self, payment_id: bytes, payer: str, money: Money, balance: Callable[[Account], int]) -> Settlement:
        """Authorization: hold ``money`` of the payer's funds; InsufficientFunds."""
        ...

    def capture(self, payment_id: bytes, payer: str, payee: str, held: Money, money: Money,
                now_ms: int) -> Settlement:
        """Move ``money`` (at most ``held``) to the payee, release the rest; with a proof."""
        ...

    def release(self, payment_id: bytes, payer: str, held: Money) -> Settlement:
        """Cancel after authorization: the hold goes back to the payer."""
        ...

    def refund(self, payment_id: bytes, payer: str, payee: str, money: Money, now_ms: int,
               balance: Callable[[Account], int]) -> Settlement:
        """Move ``money`` back from the payee to the payer, with a proof; InsufficientFunds."""
        ...

    def verify(self, proof: SettlementProof, *, payment_id: bytes, money: Money) -> None:
        """§6.1 under this adapter's trust; ``AmpError`` (1001/3001) otherwise."""
        ...
