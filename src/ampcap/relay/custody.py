"""Custody transfer between relays (RFC 003 §5.6), both sides, driven by
:class:`~ampcap.relay.core.RelayCore` through the port :class:`CustodyHost`.

Upstream (we hold a message whose recipient a route sends on):
``start`` enters TRANSFER_PENDING and asks the edge to POST the §6.5 wrapper
(:class:`Forward`); the answer (``answered``) is accepted only with a
transfer receipt that verifies (§4.1: signed by the downstream relay, tuple
matching); anything else, a transport failure or the deadline
(``tick``) rolls back to LOCAL_QUEUED, where local delivery resumes and the
handoff is retried on the §5.6.7 schedule. Single custody drops the local
copy on acceptance; dual custody keeps it (DUAL_ACTIVE) until a commit
receipt (``receive_commit_report``) or local expiry.

Downstream (a trusted upstream hands us a message): ``receive_forward``
checks the principal (RFC 002 §7.3), the wrapper, loop and hop limit
(§5.6.5), then normal ingress; duplicates get the receipt we signed the
first time (§5.6.3). In dual mode, the recipient's terminal state is
reported upstream with a signed commit receipt (:class:`ReportCommit`).

Every transition goes through the §6.3 table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AmpError
from ..wire.cbor import DecodeLimits
from ..wire.didkey import split_did_url
from ..wire.envelope import Envelope, decode_envelope
from ..wire.identity import Identity, KeyResolver
from .delivery import handoff_retry_at
from .federation import (CommitReceipt, ForwardAnswer, ForwardRequest, LoopRefused, TransferReceipt,
                         decode_commit_report, decode_forward, decode_forward_answer, encode_commit_answer,
                         encode_commit_report, encode_forward, encode_forward_answer, next_hop, read_commit_receipt,
                         select_downstream, sign_commit_receipt, sign_transfer_receipt, verify_commit_receipt,
                         verify_transfer_receipt)
from .model import (NO_ACK_TYPES, Action, Audit, Deliver, Finalized, Forward, NewRecord, PushClaim, QueuedCopy,
                    RelayConfig, ReportCommit, TransferInfo)
from .queue import RelayQueue
from .routes import RelayRoutes
from .states import TRANSFER_TABLE, TransferEvent, TransferState, advance

if TYPE_CHECKING:
    from .queue import ExpiredCopy


class CustodyHost(Protocol):
    """What custody needs of the relay core (:class:`~ampcap.relay.core.RelayCore`
    is one): its queue, routes, identity and limits, and two of its checks.
    A port rather than the core's class, so the core can compose custody
    without the two modules importing each other."""

    config: RelayConfig
    queue: RelayQueue
    resolver: KeyResolver
    routes: RelayRoutes
    limits: DecodeLimits
    identity: Identity
    online: dict[str, int]

    def time_problem(self, env: Envelope, now: int) -> str | None: ...

    def destination(self, recipient: str) -> str | None: ...

    def claim_delivery(self, seq: int, recipient: str, now: int) -> QueuedCopy | None: ...

    def settle_unacknowledged(self, msg_id: bytes, recipient: str, from_did: str, now: int) -> list[Action]: ...

    def push_claim(self, recipients: Sequence[str], now: int) -> PushClaim | None: ...

__all__ = ["Custody"]

UNAUTHORIZED, RELAY_REJECTED = 3001, 2003
# A dual-custody transfer whose downstream may report before its receipt is
# in: pending, or rolled back (the answer lost, a retry to come).
_BEFORE_RECEIPT = (TransferState.TRANSFER_PENDING, TransferState.LOCAL_QUEUED)


class Custody:
    def __init__(self, core: CustodyHost) -> None:
        self.core = core

    # ------------------------------------------------------------ upstream

    def start(self, seq: int, recipient: str, now: int) -> list[Action]:
        """Begin (or retry) the handoff of one entry to its route's best relay."""
        core = self.core
        copy = core.queue.get(seq, recipient)
        route = core.routes.route_for(recipient)
        if copy is None or route is None:
            return []
        attempts = copy.transfer.attempts if copy.transfer is not None else 0
        try:
            path, hop = next_hop(core.config.relay_did, copy.relay_path, copy.hop_limit)
        except LoopRefused as exc:
            # A.6: no handoff; the entry stays local (it may still be polled).
            return [Audit(event="handoff-refused", seq=seq, recipient=recipient, code=exc.code, detail=exc.reason)]
        candidates = select_downstream(core.routes.candidates(route), mode=route.mode, hop_limit=hop)
        if not candidates:
            return [Audit(event="no-eligible-downstream", seq=seq, recipient=recipient)]
        chosen = candidates[0]
        state = TransferState.LOCAL_QUEUED if copy.transfer is None else copy.transfer.state
        if (state, TransferEvent.HANDOFF_STARTED) not in TRANSFER_TABLE:
            return []  # already handed off, or in custody elsewhere
        state = advance(TRANSFER_TABLE, state, TransferEvent.HANDOFF_STARTED)
        early = copy.transfer.commit_receipt if copy.transfer is not None else None
        core.queue.set_transfer(seq, recipient, TransferInfo(
            mode=route.mode, downstream=chosen.did, state=state, attempts=attempts + 1,
            deadline=now + core.config.handoff_accept_timeout_ms,
            commit_receipt=early if copy.transfer is not None and copy.transfer.downstream == chosen.did else None))
        wrapper = encode_forward(ForwardRequest(message=copy.raw, from_did=copy.from_did, recipient_did=recipient,
                                                relay_path=path, hop_limit=hop, upstream_relay=core.config.relay_did,
                                                transfer_mode=route.mode))
        return [Forward(seq=seq, recipient=recipient, downstream=chosen.did, url=chosen.url, wrapper=wrapper)]

    def _pending(self, seq: int, recipient: str) -> QueuedCopy | None:
        copy = self.core.queue.get(seq, recipient)
        if copy is None or copy.transfer is None or copy.transfer.state is not TransferState.TRANSFER_PENDING:
            return None
        return copy

    def _roll_back(self, copy: QueuedCopy, now: int, code: int | None, detail: str, *,
                   final: bool = False) -> list[Action]:
        """TRANSFER_PENDING -> ROLLED_BACK -> LOCAL_QUEUED; retry per §5.6.7
        unless ``final`` (a policy refusal that a retry cannot change)."""
        assert copy.transfer is not None
        state = advance(TRANSFER_TABLE, copy.transfer.state, TransferEvent.TIMEOUT_OR_INVALID)
        state = advance(TRANSFER_TABLE, state, TransferEvent.RESUME_LOCAL)
        config = self.core.config
        retry = None if final else handoff_retry_at(
            now, copy.transfer.attempts, copy.expires_at, base_ms=config.handoff_backoff_ms,
            cap_ms=config.handoff_backoff_cap_ms, max_attempts=config.handoff_max_attempts)
        self.core.queue.set_transfer(copy.seq, copy.recipient, TransferInfo(
            mode=copy.transfer.mode, downstream=copy.transfer.downstream, state=state,
            # No retry left: the attempt count says so, and the entry stays local.
            attempts=copy.transfer.attempts if retry is not None else config.handoff_max_attempts,
            deadline=retry if retry is not None else 0, commit_receipt=copy.transfer.commit_receipt))
        return [Audit(event="transfer-rolled-back", seq=copy.seq, recipient=copy.recipient, code=code,
                      detail=detail)]

    def answered(self, seq: int, recipient: str, body: bytes, now: int) -> list[Action]:
        """The downstream's relay-forward-response."""
        copy = self._pending(seq, recipient)
        if copy is None:
            return [Audit(event="late-forward-answer", seq=seq, recipient=recipient)]
        assert copy.transfer is not None
        try:
            answer = decode_forward_answer(body)
        except AmpError as exc:
            return self._roll_back(copy, now, exc.code, exc.message)
        if not answer.accepted:
            # 2003 (loop, hop limit, policy) will not change on a retry.
            return self._roll_back(copy, now, answer.error_code, answer.error_message or "refused",
                                   final=answer.error_code == RELAY_REJECTED)
        try:
            receipt = verify_transfer_receipt(answer.receipt, self.core.resolver, msg_id=copy.msg_id,
                                              from_did=copy.from_did, recipient_did=recipient,
                                              upstream_relay=self.core.config.relay_did,
                                              downstream_relay=copy.transfer.downstream)
        except AmpError as exc:
            # A.10/A.11: 3001 (or 1004); no custody change but the rollback.
            return self._roll_back(copy, now, exc.code, exc.message)
        if receipt.status != "accepted":
            return self._roll_back(copy, now, receipt.reason_code, "downstream receipt says rejected")
        state = advance(TRANSFER_TABLE, copy.transfer.state, TransferEvent.VALID_RECEIPT)
        actions: list[Action] = [Audit(event="transfer-accepted", seq=seq, recipient=recipient,
                                       detail=copy.transfer.downstream)]
        if copy.transfer.mode == "single":
            advance(TRANSFER_TABLE, state, TransferEvent.SINGLE_CUSTODY)
            # The receipt is the audit record; the local copy goes only now (§5.6.4).
            if self.core.queue.remove(seq, recipient):
                actions.append(Finalized(seq=seq, reason="transferred"))
            return actions
        state = advance(TRANSFER_TABLE, state, TransferEvent.DUAL_CUSTODY)
        info = TransferInfo(mode="dual", downstream=copy.transfer.downstream, state=state,
                            attempts=copy.transfer.attempts, deadline=0, receipt=answer.receipt)
        early = copy.transfer.commit_receipt
        if early is None:
            self.core.queue.set_transfer(seq, recipient, info)
            return actions
        # The downstream's commit report came before its transfer receipt
        # reached us (both are in flight at once when the recipient is on a
        # live link there): custody is accepted now, and the report applies.
        return actions + self._commit_reported(copy, info, early, read_commit_receipt(early)["result"])

    def failed(self, seq: int, recipient: str, now: int, *, detail: str = "") -> list[Action]:
        """The POST did not complete (connection refused, timeout at the edge)."""
        copy = self._pending(seq, recipient)
        return [] if copy is None else self._roll_back(copy, now, None, detail or "handoff failed")

    def tick(self, now: int, batch: int) -> list[Action]:
        actions: list[Action] = []
        for copy in self.core.queue.transfers_overdue(now, batch):  # A.8
            actions += self._roll_back(copy, now, None, "no transfer receipt before the deadline")
        for copy in self.core.queue.handoffs_due(now, self.core.config.handoff_max_attempts, batch):
            actions += self.start(copy.seq, copy.recipient, now)
        return actions

    def receive_commit_report(self, body: bytes, *, principal: str | None, now: int) -> tuple[bytes, list[Action]]:
        """§5.6.6 upstream side: verify, then DUAL_ACTIVE -> COMMIT_REPORTED."""
        core = self.core
        try:
            receipt_bytes = decode_commit_report(body)
            payload = read_commit_receipt(receipt_bytes)
            downstream = payload.get("downstream_relay")
            if principal is None or principal != downstream or not core.routes.trusted(principal):
                raise AmpError(UNAUTHORIZED, "the principal is not the commit receipt's trusted downstream relay")
            fields = (payload.get("msg_id"), payload.get("from_did"), payload.get("recipient_did"))
            if not (type(fields[0]) is bytes and type(fields[1]) is str and type(fields[2]) is str):
                raise AmpError(UNAUTHORIZED, "commit receipt: no transfer context (msg_id, from_did, recipient_did)")
            copy = core.queue.find_transfer(fields[0], fields[1], fields[2], principal)
            state = copy.transfer.state if copy is not None and copy.transfer is not None else None
            early = state in _BEFORE_RECEIPT and copy is not None and copy.transfer is not None \
                and copy.transfer.mode == "dual"
            if copy is None or (state is not TransferState.DUAL_ACTIVE and not early):
                raise AmpError(UNAUTHORIZED, "commit receipt for no accepted dual-custody transfer")
            receipt = verify_commit_receipt(receipt_bytes, core.resolver, msg_id=copy.msg_id,
                                            from_did=copy.from_did, recipient_did=copy.recipient,
                                            upstream_relay=core.config.relay_did, downstream_relay=principal)
        except AmpError as exc:
            return (encode_commit_answer(False, exc.code, exc.message),
                    [Audit(event="commit-report-refused", code=exc.code, detail=exc.message)])
        assert copy.transfer is not None
        if early:
            # Its transfer receipt is still on its way (or its answer was
            # lost and the handoff will be retried): custody has not moved
            # yet (§5.6.4), so the verified report is kept with the
            # transfer and applied when the receipt verifies.
            core.queue.set_transfer(copy.seq, copy.recipient, replace(copy.transfer, commit_receipt=receipt_bytes))
            return encode_commit_answer(True), [Audit(event="commit-reported-early", seq=copy.seq,
                                                      recipient=copy.recipient, detail=receipt.result)]
        return encode_commit_answer(True), self._commit_reported(copy, copy.transfer, receipt_bytes, receipt.result)

    def _commit_reported(self, copy: QueuedCopy, info: TransferInfo, receipt_bytes: bytes,
                         result: Any) -> list[Action]:
        """DUAL_ACTIVE -> COMMIT_REPORTED (-> LOCAL_REMOVED when delivered)."""
        core = self.core
        state = advance(TRANSFER_TABLE, info.state, TransferEvent.VALID_COMMIT_RECEIPT)
        core.queue.set_transfer(copy.seq, copy.recipient, replace(info, state=state, deadline=0,
                                                                  commit_receipt=receipt_bytes))
        actions: list[Action] = [Audit(event="commit-reported", seq=copy.seq, recipient=copy.recipient,
                                       detail=str(result))]
        if result == "delivered":
            advance(TRANSFER_TABLE, state, TransferEvent.AUDIT_PERSISTED)
            if core.queue.remove(copy.seq, copy.recipient):
                actions.append(Finalized(seq=copy.seq, reason="commit-reported"))
        # failed / expired: not delivered; the entry is local again (retry / expiry policy).
        return actions

    # ------------------------------------------------------------ downstream

    def receive_forward(self, body: bytes, *, principal: str | None, now: int) -> tuple[bytes, list[Action]]:
        core = self.core
        try:
            req = decode_forward(body)
        except AmpError as exc:
            return self._refusal(exc.code, exc.message), []
        # RFC 002 §7.3: before anything is looked at, the caller must be the
        # trusted relay the wrapper names (A.9: no queue insertion).
        if principal is None or principal != req.upstream_relay or not core.routes.trusted(principal):
            return self._refusal(UNAUTHORIZED, "the principal is not a trusted relay named upstream_relay"), []
        try:
            next_hop(core.config.relay_did, req.relay_path, req.hop_limit)  # A.5, A.6
        except LoopRefused as exc:
            return self._refusal(RELAY_REJECTED, exc.message), [
                Audit(event="handoff-refused", code=RELAY_REJECTED, detail=exc.reason)]
        try:
            env = decode_envelope(req.message, core.limits)
        except AmpError as exc:
            return self._refusal(exc.code, exc.message), []
        recipients = {split_did_url(r)[0] for r in env.recipients}
        if split_did_url(env.sender)[0] != req.from_did or req.recipient_did not in recipients:
            return self._refusal(1001, "from_did / recipient_did do not match the message"), []
        problem = core.time_problem(env, now)
        if problem is not None:
            return self._refusal(1003, problem), []
        where = core.destination(req.recipient_did)
        if where is None:
            return self._refusal(2001, f"{req.recipient_did} is not registered here and no route leads to it"), []
        if env.ttl == 0 or env.ttl > core.config.max_ttl_ms:
            return self._refusal(RELAY_REJECTED, "ttl outside what this relay queues"), []
        if len(req.message) > core.config.max_message_bytes:
            return self._refusal(1001, "message too large"), []
        prior = core.queue.prior_receipt(req.from_did, env.id, req.recipient_did, now)
        if prior is not None:  # A.7: the first acceptance, again
            return encode_forward_answer(ForwardAnswer(accepted=True, receipt=prior)), [
                Audit(event="duplicate-handoff", recipient=req.recipient_did)]
        receipt = sign_transfer_receipt(core.identity, TransferReceipt(
            msg_id=env.id, from_did=req.from_did, recipient_did=req.recipient_did, upstream_relay=req.upstream_relay,
            downstream_relay=core.config.relay_did, accepted_at=now, hop_limit_remaining=req.hop_limit - 1))
        queued = core.queue.enqueue(NewRecord(
            msg_id=env.id, raw=req.message, from_did=req.from_did, recipients=(req.recipient_did,), accepted_at=now,
            expires_at=env.ts + env.ttl, relay_path=req.relay_path, hop_limit=req.hop_limit,
            upstream=req.upstream_relay, transfer_mode=req.transfer_mode, receipt=receipt),
            quota=core.config.max_queued_per_recipient,
            claim=core.push_claim([req.recipient_did], now) if req.recipient_did in core.online else None)
        if queued.over_quota:
            return self._refusal(RELAY_REJECTED, f"{req.recipient_did} has too many queued messages"), []
        if queued.seq is None:  # a duplicate with no receipt kept (it came from a client first)
            return self._refusal(RELAY_REJECTED, "duplicate of a message already queued here"), []
        actions: list[Action] = [Audit(event="custody-accepted", seq=queued.seq, recipient=req.recipient_did,
                                       detail=req.upstream_relay)]
        r = req.recipient_did
        if r in queued.claimed:
            actions.append(Deliver(recipient=r, raw=req.message, seq=queued.seq))
            if env.typ in NO_ACK_TYPES:  # an acknowledgement: its push is its delivery
                actions += core.settle_unacknowledged(env.id, r, req.from_did, now)
        elif where == "routed":
            actions += self.start(queued.seq, r, now)
        return encode_forward_answer(ForwardAnswer(accepted=True, receipt=receipt)), actions

    @staticmethod
    def _refusal(code: int, message: str) -> bytes:
        return encode_forward_answer(ForwardAnswer(accepted=False, error_code=code, error_message=message))

    def _report(self, seq: int, recipient: str, msg_id: bytes, from_did: str, upstream: str, result: str,
                now: int) -> list[Action]:
        core = self.core
        receipt = sign_commit_receipt(core.identity, CommitReceipt(
            msg_id=msg_id, from_did=from_did, recipient_did=recipient, upstream_relay=upstream,
            downstream_relay=core.config.relay_did, result=result, committed_at=now,
            reason_code=2004 if result == "expired" else None))
        return [ReportCommit(upstream=upstream, url=core.routes.url_of(upstream), report=encode_commit_report(receipt))]

    def report_terminal(self, copy: QueuedCopy, result: str, now: int) -> list[Action]:
        """§5.6.6 downstream side: a dual-custody entry reached a terminal state."""
        if copy.upstream is None or copy.upstream_mode != "dual":
            return []
        return self._report(copy.seq, copy.recipient, copy.msg_id, copy.from_did, copy.upstream, result, now)

    def report_expired(self, copy: ExpiredCopy, now: int) -> list[Action]:
        if copy.upstream is None or copy.upstream_mode != "dual":
            return []
        return self._report(copy.seq, copy.recipient, copy.msg_id, copy.from_did, copy.upstream, "expired", now)
