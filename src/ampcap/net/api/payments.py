"""The payer's Python API (RFC 007 CAP path): :class:`Payer` sends the
workflow's request bodies (:mod:`ampcap.pay.payer`) to a payee as
CAP_INVOKEs of ``org.agentries.payment.workflow:1.0.0`` and checks what
comes back.

* one ``payment_id`` per intent, made by :meth:`Payer.quote` (or given),
  reused by every later step, so a retried step is the same §5.9
  ``op_key`` with the same body and the payee answers it without a second
  transition; transport retries resend the same message (``retry=True``);
* the quote is checked (same payment, payee and money; not expired) before
  :meth:`Payer.authorize` builds its body from it, so the terms cannot drift;
* a capture's or refund's settlement proof is verified (§6.1) under the
  payer's adapter trust before the payment counts as settled: by default
  the payee's own DID, which is the adapter id of ampcap's local ledger;
* ``delegation``: pay on a principal's behalf (RFC 005 evidence in the
  invoke body, A.7/A.18); a :class:`~ampcap.net.api.sessions.Session` as
  ``target``: session-scoped payments (the body's ``session`` matches the
  envelope's, A.6/A.20).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from typing import Any

from ...errors import AmpError
from ...pay.codes import MALFORMED
from ...pay.money import Money
from ...pay.payer import (Quote, authorize_body, capture_body, check_quote, check_settled, new_payment_id, op_body,
                          quote_request_body)
from ...pay.workflow import WORKFLOW_ID, WORKFLOW_NAME, WORKFLOW_VERSION
from ...wire.didkey import ed25519_from_did_key

__all__ = ["Payer", "Quote"]


class Payer:
    """Pays one payee through ``target``: a :class:`Remote` or a :class:`Session` to it."""

    def __init__(self, target: Any, *, payee: str | None = None, delegation: Any = None,
                 trusted_adapters: Collection[str] | None = None, timeout: float = 30.0,
                 clock_ms: Callable[[], int] | None = None,
                 entropy: Callable[[int], bytes] = os.urandom) -> None:
        self.target = target
        self.payee = payee if payee is not None else getattr(target, "did", None) or getattr(target, "peer_did", None)
        self.delegation = delegation
        self.session_id: bytes | None = getattr(target, "session_id", None)
        self.trusted = frozenset(trusted_adapters) if trusted_adapters is not None else (
            frozenset({self.payee}) if self.payee else frozenset())
        self.timeout = timeout
        self._now = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._entropy = entropy

    async def _send(self, body: dict[str, Any]) -> Any:
        if self.session_id is not None:
            body = {**body, "session": {"session_id": self.session_id, "session_scope": True}}
            return await self.target.invoke(WORKFLOW_NAME, version=WORKFLOW_VERSION, params=body,
                                            timeout=self.timeout, delegation=self.delegation)
        return await self.target.invoke(WORKFLOW_ID, params=body, timeout=self.timeout, retry=True,
                                        delegation=self.delegation)

    def _keys(self, adapter_id: str) -> bytes | None:
        if adapter_id not in self.trusted:
            return None
        try:
            return ed25519_from_did_key(adapter_id)
        except AmpError:
            return None

    @staticmethod
    def _expect(result: Any, op: str) -> dict[str, Any]:
        if not isinstance(result, dict) or result.get("op") != op:
            raise AmpError(MALFORMED, f"expected a {op} body from the payee", path="result")
        return result

    async def quote(self, money: Money, *, service_ref: str | None = None,
                    payment_id: bytes | None = None) -> Quote:
        """Ask for a quote (a new ``payment_id`` unless one is given: pass
        the same one to retry the same intent) and check it."""
        if self.payee is None:
            raise ValueError("Payer needs the payee's DID")
        pid = payment_id if payment_id is not None else new_payment_id(self._entropy)
        request = quote_request_body(pid, self.payee, money, service_ref=service_ref)
        return check_quote(await self._send(request), request, now_ms=self._now())

    async def authorize(self, quote: Quote) -> dict[str, Any]:
        """Authorize a checked quote (4102 here, without sending, once it expired).
        A ``status = "failed"`` answer raises :class:`AmpError` with its reason_code."""
        if self._now() > quote.expires_at:
            raise AmpError(4102, "the quote expired")
        result = self._expect(await self._send(authorize_body(quote)), "authorize_result")
        if result.get("status") != "authorized":
            raise AmpError(int(result.get("reason_code", 5001)), f"authorization failed: {result.get('reason')}")
        return result

    async def capture(self, quote: Quote, amount_minor: int | None = None) -> dict[str, Any]:
        """Capture (all, or ``amount_minor``) and verify its settlement proof."""
        body = capture_body(quote, amount_minor)
        result = self._expect(await self._send(body), "capture_result")
        check_settled(result, payment_id=quote.payment_id, money=Money(body["money"]["amount_minor"],
                                                                           quote.money.asset, quote.money.network),
                      keys=self._keys)
        return result

    async def cancel(self, payment_id: bytes, *, reason: str | None = None) -> dict[str, Any]:
        return self._expect(await self._send(op_body("cancel", payment_id, reason=reason)), "cancel_result")

    async def refund(self, payment_id: bytes, *, money: Money | None = None,
                     reason: str | None = None) -> dict[str, Any]:
        """Refund (all of the capture, or ``money``); a proof, when present, is verified."""
        result = self._expect(await self._send(op_body("refund", payment_id, money=money, reason=reason)),
                              "refund_result")
        if money is not None and "settlement" in result:
            check_settled(result, payment_id=payment_id, money=money, keys=self._keys)
        return result

    async def status(self, payment_id: bytes) -> dict[str, Any]:
        return self._expect(await self._send(op_body("status_query", payment_id)), "status")

    async def pay(self, money: Money, *, service_ref: str | None = None,
                  payment_id: bytes | None = None) -> tuple[Quote, dict[str, Any]]:
        """Quote, authorize and capture one payment: the checked quote and the
        verified capture result. Pass the ``payment_id`` of an interrupted
        ``pay`` to finish that intent (each step replays idempotently)."""
        quote = await self.quote(money, service_ref=service_ref, payment_id=payment_id)
        await self.authorize(quote)
        return quote, await self.capture(quote)
