"""The relay core (RFC 003 Relay Core profile): events in, actions out.

The edge (phase B: ``ampcap relay``) calls one method per thing that
happened (a message submitted, a poll, a link up or down, a push that
failed, the clock) and performs the actions it gets back, in order:
:class:`Deliver` (push on a live link or webhook), :class:`Reply` (a signed
ERROR or relay ACK for the submitter), :class:`Forward` and
:class:`ReportCommit` (federation POSTs, in :mod:`.custody`), plus audit
records (:class:`Accepted`, :class:`Committed`, :class:`Finalized`,
:class:`Audit`). Every queue write an action depends on is committed by the
queue before the method returns.

No clock, socket, file or RNG here: ``now`` is an argument, entropy and the
jitter source are injected, the queue is a :class:`RelayQueue`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ..errors import AmpError
from ..wire.cbor import DEFAULT_LIMITS, DecodeLimits
from ..wire.didkey import split_did_url
from ..wire.envelope import Envelope, decode_envelope, id_timestamp
from ..wire.httpmap import encode_poll
from ..wire.identity import Identity, KeyResolver
from ..wire.receive import ID_TS_TOLERANCE_MS, MAX_CLOCK_SKEW_MS, verifying_profile
from ..wire.registry import MessageType
from .custody import Custody
from .delivery import Random, next_attempt_at
from .model import (NO_ACK_TYPES, Accepted, Action, Committed, Deliver, Finalized, NewRecord, PollPage, PushClaim,
                    QueuedCopy, Refusal, RelayConfig, Reply)
from .queue import RelayQueue
from .replies import relay_ack, relay_error
from .routes import RelayRoutes
from .states import RECIPIENT_TABLE, RecipientEvent, RecipientState, advance

__all__ = ["RelayCore", "Ingress", "encode_cursor", "decode_cursor"]

_ACK = int(MessageType.ACK)
_NO_RELAY_ACK = NO_ACK_TYPES  # never acknowledge an acknowledgement
Entropy = Callable[[int], bytes]


class Ingress:
    """What :meth:`RelayCore.submit` did with one message."""

    __slots__ = ("actions", "refusal", "committed", "envelope")

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.refusal: Refusal | None = None
        self.committed: list[Committed] = []
        self.envelope: Envelope | None = None


def encode_cursor(pass_no: int, seq: int) -> str:
    return f"{pass_no}-{seq}"


def decode_cursor(cursor: str) -> tuple[int, int]:
    pass_text, sep, seq_text = cursor.partition("-")
    if not sep or not pass_text.isdigit() or not seq_text.isdigit() or len(cursor) > 40:
        raise AmpError(1001, "poll cursor is not one this relay issued", path="cursor")
    return int(pass_text), int(seq_text)


class RelayCore:
    def __init__(self, config: RelayConfig, identity: Identity, queue: RelayQueue, resolver: KeyResolver, *,
                 entropy: Entropy, random: Random, routes: RelayRoutes | None = None, owner: str = "relay",
                 limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        if identity.did != config.relay_did:
            raise ValueError("the relay's identity must be config.relay_did")
        self.config = config
        self.identity = identity
        self.queue = queue
        self.resolver = resolver
        self.entropy = entropy
        self.random = random
        self.routes = routes if routes is not None else RelayRoutes()
        self.owner = owner
        """This process's claim name (R25): unique per relay process sharing one store."""
        self.limits = limits
        self.online: dict[str, int] = {}
        """DID -> live links (AMPS/WSS sessions, webhooks): who can take a push now."""
        self.custody = Custody(self)
        self._renewed_at = -(1 << 62)

    # ------------------------------------------------------------ links

    def register(self, did: str, now: int) -> None:
        """A DID authenticated to us (HELLO on AMPS/WSS, a bearer token): we take messages for it."""
        self.queue.register(did, now)

    def link_up(self, did: str, now: int, *, batch: int = 100) -> list[Action]:
        """A live link to ``did`` opened: register it and push what is due."""
        self.online[did] = self.online.get(did, 0) + 1
        self.register(did, now)
        return self._push_due(did, now, batch)

    def link_down(self, did: str) -> None:
        left = self.online.get(did, 0) - 1
        if left > 0:
            self.online[did] = left
        else:
            self.online.pop(did, None)

    def _push_due(self, did: str, now: int, batch: int) -> list[Action]:
        actions: list[Action] = []
        for copy in self.queue.due(did, self.owner, now, batch):
            claimed = self.claim_delivery(copy.seq, did, now)
            if claimed is not None:
                actions.append(Deliver(recipient=did, raw=claimed.raw, seq=claimed.seq))
                if self._unacknowledged(claimed.raw):
                    actions += self.settle_unacknowledged(claimed.msg_id, did, claimed.from_did, now)
        return actions

    def _unacknowledged(self, raw: bytes) -> bool:
        """Is this an acknowledgement (ACK, PROC_OK, PROC_FAIL, ERROR), which
        nobody acknowledges in turn?"""
        try:
            return decode_envelope(raw, self.limits).typ in _NO_RELAY_ACK
        except AmpError:
            return False

    def settle_unacknowledged(self, msg_id: bytes, recipient: str, from_did: str, now: int) -> list[Action]:
        """An acknowledgement is never acknowledged (RFC 001), so no recipient
        ACK will ever commit it: its hand-over (a push, a poll page) is its
        terminal delivery. Without this it would be pushed again until it
        expired. (At most once: a push that then fails loses it, as any
        acknowledgement lost on the wire is lost.)"""
        committed, finalized = self.queue.commit(msg_id, recipient, (from_did,), now)
        actions: list[Action] = []
        for c in committed:
            actions.append(Committed(seq=c.seq, recipient=recipient, msg_id=c.msg_id))
            # Handed over is its terminal state: an upstream relay holding it
            # in dual custody hears so (else it keeps its copy until expiry).
            actions += self.custody.report_terminal(c, "delivered", now)
        actions += [Finalized(seq=f, reason="done") for f in finalized]
        return actions

    def push_claim(self, recipients: Sequence[str], now: int) -> PushClaim | None:
        """The claim for ``enqueue`` of the recipients pushed at once (on a live link here)."""
        if not recipients:
            return None
        return PushClaim(recipients=frozenset(recipients), owner=self.owner, lease_until=now + self.config.lease_ms,
                         redeliver_at=now + self.config.redeliver_ms)

    def claim_delivery(self, seq: int, recipient: str, now: int) -> QueuedCopy | None:
        return self.queue.claim(seq, recipient, self.owner, now, now + self.config.lease_ms,
                                now + self.config.redeliver_ms)

    def delivery_failed(self, seq: int, recipient: str, now: int, *, error: int | None = None) -> list[Action]:
        """A push did not reach ``recipient`` (link dropped, webhook refused):
        back to pending, due again after backoff, never past expiry."""
        copy = self.queue.get(seq, recipient)
        if copy is None or copy.state is not RecipientState.INFLIGHT:
            return []  # committed, expired or released meanwhile: nothing to retry
        advance(RECIPIENT_TABLE, copy.state, RecipientEvent.ATTEMPT_FAILED)
        at = next_attempt_at(now, max(copy.attempts, 1), copy.expires_at, base_ms=self.config.backoff_base_ms,
                             cap_ms=self.config.backoff_cap_ms, jitter_ms=self.config.jitter_ms, random=self.random)
        # Past the horizon: it stays pending and expires with its record.
        self.queue.release(seq, recipient, self.owner, at if at is not None else copy.expires_at + 1, error)
        return []

    # ------------------------------------------------------------ ingress (§5.1)

    def _refuse(self, result: Ingress, code: int, message: str, *, to: str | None, reply_to: bytes | None,
                now: int, reason: str | None = None) -> Ingress:
        result.refusal = Refusal(code=code, message=message, reason=reason)
        if to is not None:
            raw = relay_error(self.identity, to=to, reply_to=reply_to, code=code, message=message, now=now,
                              entropy=self.entropy, ttl=self.config.reply_ttl_ms,
                              details={"reason": reason} if reason else None)
            result.actions.append(Reply(to=to, raw=raw, code=code))
        return result

    def time_problem(self, env: Envelope, now: int) -> str | None:
        """RFC 001 temporal checks (1003). A TTL=0 message lives for the
        allowed clock skew only: "now" is all it has."""
        horizon = env.ts + (env.ttl if env.ttl > 0 else MAX_CLOCK_SKEW_MS)
        if now > horizon:
            return "message expired (now > ts + ttl)"
        if env.ts > now + MAX_CLOCK_SKEW_MS:
            return "message timestamp is too far in the future"
        if abs(id_timestamp(env.id) - env.ts) > ID_TS_TOLERANCE_MS:
            return "message id timestamp differs from ts by more than 1 s"
        return None

    def submit(self, raw: bytes, *, principal: str | None, now: int, envelope: Envelope | None = None,
               verified: bool = False) -> Ingress:
        """One AMP message handed to the relay (POST, AMPS, WSS). ``principal``
        is the authenticated transport principal (None only where the edge
        has no authentication, e.g. the raw-framing compatibility mode).
        ``envelope``: ``raw`` already decoded (an AMPS/WSS link's receive
        checks did it); ``verified``: its signature already checked there,
        so a recipient ACK is not verified twice."""
        result = Ingress()
        if len(raw) > self.config.max_message_bytes:
            return self._refuse(result, 1001, f"message is {len(raw)} bytes; this relay takes at most "
                                f"{self.config.max_message_bytes}", to=principal, reply_to=None, now=now)
        if envelope is not None:
            env = envelope
        else:
            try:
                env = decode_envelope(raw, self.limits)
            except AmpError as exc:
                return self._refuse(result, exc.code, exc.message, to=principal, reply_to=None, now=now)
        result.envelope = env
        sender = split_did_url(env.sender)[0]
        # Principal binding first (RFC 002 §7.1, strict): an error for a
        # forged `from` goes to the principal, never to the DID it named.
        if principal is not None and sender != principal:
            return self._refuse(result, 3001, "the transport principal is not the message's sender",
                                to=principal, reply_to=env.id, now=now)
        if env.v != 1:
            return self._refuse(result, 1004, f"protocol version {env.v} is not supported", to=sender,
                                reply_to=env.id, now=now)
        problem = self.time_problem(env, now)
        if problem is not None:
            return self._refuse(result, 1003, problem, to=sender, reply_to=env.id, now=now)
        if env.ttl > self.config.max_ttl_ms:
            return self._refuse(result, 2003, f"ttl {env.ttl} ms is longer than this relay keeps messages "
                                f"({self.config.max_ttl_ms} ms)", to=sender, reply_to=env.id, now=now, reason="ttl")
        if env.typ == _ACK and env.reply_to is not None and self._claims_recipient_ack(env):
            if not verified and verifying_profile(env, self.resolver) is None:
                return self._refuse(result, 1002, "recipient ACK signature does not verify", to=sender,
                                    reply_to=env.id, now=now)
            result.actions += self._commit(env, sender, now, result)
        recipients = tuple(dict.fromkeys(split_did_url(r)[0] for r in env.recipients))
        if env.ttl == 0:
            # Delivered now or refused 2003 (§5.1), whoever the recipient
            # is: one not registered is not reachable now either (A.1).
            return self._immediate(result, env, raw, sender, recipients, now)
        if env.typ in _NO_RELAY_ACK and all(r in self.online for r in recipients):
            # An acknowledgement for recipients on a live link: its hand-over
            # is its delivery (see settle_unacknowledged), so queueing it
            # would only be written and removed again in the same moment.
            result.actions += [Deliver(recipient=r, raw=raw) for r in recipients]
            result.actions.append(Accepted(msg_id=env.id, from_did=sender, seq=None, queued=()))
            return result
        routed: list[str] = []
        for r in recipients:
            where = self.destination(r)
            if where is None:
                return self._refuse(result, 2001, f"{r} is not registered with this relay and no route leads "
                                    "to it", to=sender, reply_to=env.id, now=now)
            if where == "routed":
                routed.append(r)
        record = NewRecord(msg_id=env.id, raw=raw, from_did=sender, recipients=recipients, accepted_at=now,
                           expires_at=env.ts + env.ttl, hop_limit=self.config.default_hop_limit)
        queued = self.queue.enqueue(record, quota=self.config.max_queued_per_recipient,
                                    claim=self.push_claim([r for r in recipients if r in self.online
                                                           and r not in routed], now))
        if queued.over_quota:
            return self._refuse(result, 2003, f"{queued.over_quota[0]} has too many queued messages",
                                to=sender, reply_to=env.id, now=now, reason="quota")
        forwarded: list[str] = []
        if queued.seq is not None:
            for r in queued.queued:
                if r in routed:
                    forwarded.append(r)
                    result.actions += self.custody.start(queued.seq, r, now)
                elif r in queued.claimed:
                    result.actions.append(Deliver(recipient=r, raw=raw, seq=queued.seq))
                    if env.typ in _NO_RELAY_ACK:
                        result.actions += self.settle_unacknowledged(env.id, r, sender, now)
        result.actions.append(Accepted(msg_id=env.id, from_did=sender, seq=queued.seq, queued=queued.queued,
                                       duplicates=queued.duplicates, forwarded=tuple(forwarded)))
        if self.config.ack_on_accept and env.typ not in _NO_RELAY_ACK:
            result.actions.append(Reply(to=sender, raw=relay_ack(self.identity, to=sender, reply_to=env.id, now=now,
                                                                 entropy=self.entropy, ttl=self.config.reply_ttl_ms)))
        return result

    def destination(self, recipient: str) -> str | None:
        """``"local"`` (registered, online, or taken for anyone), ``"routed"``
        (a route sends it on), or None (2001)."""
        if recipient in self.online or self.queue.is_registered(recipient):
            return "local"
        if self.routes.route_for(recipient) is not None:
            return "routed"
        return "local" if self.config.accept_unregistered else None

    def _immediate(self, result: Ingress, env: Envelope, raw: bytes, sender: str, recipients: Sequence[str],
                   now: int) -> Ingress:
        """TTL=0 (§5.1): never queued; delivered now to every recipient on a
        live link, or refused 2003 when any of them has none (all or nothing,
        so a sender's retry cannot reach some recipients twice)."""
        offline = [r for r in recipients if r not in self.online]
        if offline:
            return self._refuse(result, 2003, f"ttl 0 and {offline[0]} is not reachable now", to=sender,
                                reply_to=env.id, now=now, reason="ttl0-offline")
        result.actions += [Deliver(recipient=r, raw=raw) for r in recipients]
        result.actions.append(Accepted(msg_id=env.id, from_did=sender, seq=None, queued=()))
        return result

    # ------------------------------------------------------------ commit (§5.5)

    @staticmethod
    def _claims_recipient_ack(env: Envelope) -> bool:
        body = env.body
        return isinstance(body, dict) and body.get("ack_source") == "recipient"

    def _commit(self, ack: Envelope, sender: str, now: int, result: Ingress) -> list[Action]:
        """A recipient ACK whose signature verified: commit the entries of
        ``reply_to`` addressed to its sender and sent by one of its
        recipients (the original sender). Each recipient independently."""
        assert ack.reply_to is not None
        originals = tuple(split_did_url(t)[0] for t in ack.recipients)
        committed, finalized = self.queue.commit(ack.reply_to, sender, originals, now)
        actions: list[Action] = []
        for copy in committed:
            state = copy.state
            if state is RecipientState.PENDING:
                # Pending again (a push failed, a claim lapsed) yet the
                # recipient has it: it was an attempt after all.
                state = advance(RECIPIENT_TABLE, state, RecipientEvent.ATTEMPT)
            advance(RECIPIENT_TABLE, state, RecipientEvent.RECIPIENT_ACK)
            done = Committed(seq=copy.seq, recipient=sender, msg_id=copy.msg_id)
            result.committed.append(done)
            actions.append(done)
            actions += self.custody.report_terminal(copy, "delivered", now)
        actions += [Finalized(seq=s, reason="done") for s in finalized]
        return actions

    # ------------------------------------------------------------ polling (§5.4, RFC 002 §6.2)

    def poll(self, consumer: str, cursor: str | None, limit: int, now: int) -> PollPage:
        """One page for ``consumer`` (its authenticated DID). No cursor starts
        a new pass over everything not yet committed (a restarted agent gets
        again what it never acknowledged); a cursor continues its pass.
        Cursors ``(pass, seq)`` only ever grow for one consumer."""
        limit = max(1, min(limit, self.config.poll_limit_max))
        current = self.queue.cursor_pass(consumer, new=cursor is None)
        if cursor is None:
            pass_no, after = current, 0
        else:
            pass_no, after = decode_cursor(cursor)
            if pass_no > current:
                raise AmpError(1001, "poll cursor is not one this relay issued", path="cursor")
        copies = self.queue.page(consumer, after, limit + 1, now)
        more = len(copies) > limit
        copies = copies[:limit]
        self.queue.mark_attempted([(c.seq, c.recipient) for c in copies], now)
        actions: list[Action] = []
        for c in copies:  # acknowledgements: taken is delivered (see settle_unacknowledged)
            if self._unacknowledged(c.raw):
                actions += self.settle_unacknowledged(c.msg_id, c.recipient, c.from_did, now)
        messages = tuple(c.raw for c in copies)
        if copies:
            next_cursor: str | None = encode_cursor(pass_no, copies[-1].seq)
        else:
            next_cursor = cursor if cursor is not None else encode_cursor(pass_no, after)
        return PollPage(messages=messages, next_cursor=next_cursor, has_more=more,
                        body=encode_poll(list(messages), next_cursor, more), actions=tuple(actions))

    # ------------------------------------------------------------ time

    def tick(self, now: int, *, batch: int = 100) -> list[Action]:
        """Run what is due: expiry (§5.2), overdue handoffs (rollback),
        handoff retries, pushes due to online recipients, claim renewal."""
        actions: list[Action] = []
        expired, finalized = self.queue.expire(now, batch)
        for copy in expired:
            actions += self.custody.report_expired(copy, now)
        actions += [Finalized(seq=s, reason="expired") for s in finalized]
        actions += self.custody.tick(now, batch)
        # Renewed a few times per lease, not on every tick (relay --workers
        # ticks four times a second): each renewal is a write.
        if now - self._renewed_at >= self.config.lease_ms // 3:
            self.queue.renew(self.owner, now + self.config.lease_ms)
            self._renewed_at = now
        for did in list(self.online):
            actions += self._push_due(did, now, batch)
        return actions

    def next_deadline(self, now: int) -> int:
        """When :meth:`tick` has work next (the edge arms one timer)."""
        candidates = [now + self.config.lease_ms // 2]
        expiry = self.queue.next_expiry()
        if expiry is not None:
            candidates.append(expiry + 1)
        transfer = self.queue.next_transfer_deadline(self.config.handoff_max_attempts)
        if transfer is not None:
            candidates.append(transfer + 1)  # overdue means past the deadline
        for did in self.online:
            due = self.queue.next_due(did)
            if due is not None:
                candidates.append(due)
        return max(now, min(candidates))

    # ------------------------------------------------------------ federation (delegated)

    def receive_forward(self, body: bytes, *, principal: str | None, now: int) -> tuple[bytes, list[Action]]:
        """POST /amp/v1/relay/forward: (response body, actions)."""
        return self.custody.receive_forward(body, principal=principal, now=now)

    def forward_answered(self, seq: int, recipient: str, body: bytes, now: int) -> list[Action]:
        return self.custody.answered(seq, recipient, body, now)

    def forward_failed(self, seq: int, recipient: str, now: int, *, detail: str = "") -> list[Action]:
        return self.custody.failed(seq, recipient, now, detail=detail)

    def receive_commit_report(self, body: bytes, *, principal: str | None, now: int) -> tuple[bytes, list[Action]]:
        """POST /amp/v1/relay/commit: (response body, actions)."""
        return self.custody.receive_commit_report(body, principal=principal, now=now)
