"""The narrow interface the relay core asks of its durable queue.

:class:`ampcap.store.relay_queue.StoreRelayQueue` implements it over the
state store (SQLite or PostgreSQL); the core never sees SQL. Every method is
one transaction, so whatever must be durable before an effect (a receipt
sent, an ACK forwarded) is committed when the method returns (store
contract rule 8). Nothing here loads the queue into memory: reads are by
index, a page at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .model import NewRecord, PushClaim, QueuedCopy, TransferInfo

__all__ = ["RelayQueue", "EnqueueResult", "ExpiredCopy"]


class EnqueueResult(Protocol):
    # Read-only members, so that a frozen dataclass satisfies them.
    @property
    def seq(self) -> int | None:
        """The new record's sequence number; None when every recipient was a duplicate."""
    @property
    def queued(self) -> tuple[str, ...]: ...
    @property
    def duplicates(self) -> tuple[str, ...]: ...
    @property
    def over_quota(self) -> tuple[str, ...]: ...
    @property
    def claimed(self) -> tuple[str, ...]:
        """The queued recipients whose entries were written claimed (``enqueue(claim=...)``)."""


class ExpiredCopy(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def recipient(self) -> str: ...
    @property
    def msg_id(self) -> bytes: ...
    @property
    def from_did(self) -> str: ...
    @property
    def upstream(self) -> str | None: ...
    @property
    def upstream_mode(self) -> str | None: ...


class RelayQueue(Protocol):
    def register(self, did: str, now: int) -> None:
        """Remember that ``did`` registered with this relay (R24)."""

    def is_registered(self, did: str) -> bool: ...

    def enqueue(self, record: NewRecord, *, quota: int, claim: PushClaim | None = None) -> EnqueueResult:
        """Insert the record and one live entry per recipient, in one
        transaction: a recipient whose dedupe key ``(from, msg_id,
        recipient)`` is live is a duplicate (no second entry, §5.6.3); one
        that already holds ``quota`` live entries is over quota. When no
        recipient is left, nothing is written. The entries of
        ``claim.recipients`` are written claimed (inflight, as
        :meth:`claim` leaves them)."""

    def prior_receipt(self, from_did: str, msg_id: bytes, recipient: str, now: int) -> bytes | None:
        """The transfer receipt this relay signed for a live dedupe key (a
        repeated handoff gets it again)."""

    def page(self, recipient: str, after_seq: int, limit: int, now: int) -> list[QueuedCopy]:
        """Live, locally deliverable entries of ``recipient`` with ``seq >
        after_seq``, in ``seq`` order, at most ``limit``; by index."""

    def mark_attempted(self, copies: Sequence[tuple[int, str]], now: int) -> None:
        """pending -> inflight for entries handed out by a poll (no claim:
        a poll is an attempt whose outcome only an ACK tells)."""

    def claim(self, seq: int, recipient: str, owner: str, now: int, lease_until: int,
              redeliver_at: int) -> QueuedCopy | None:
        """Claim one entry for a push (R25): only when it is live, due, and
        unclaimed, ours, or its claim's lease ran out (its owner died). None
        when another owner holds it. Unless an ACK commits it first, the
        entry is due again at ``redeliver_at``."""

    def release(self, seq: int, recipient: str, owner: str, next_attempt_at: int, error: int | None) -> bool:
        """An attempt failed: inflight -> pending, due at ``next_attempt_at``."""

    def renew(self, owner: str, lease_until: int) -> int:
        """Extend every claim ``owner`` holds; how many."""

    def due(self, recipient: str, owner: str, now: int, limit: int) -> list[QueuedCopy]:
        """Entries of ``recipient`` due for a (re)push that ``owner`` may claim."""

    def next_due(self, recipient: str) -> int | None: ...

    def commit(self, msg_id: bytes, recipient: str, senders: Sequence[str],
               now: int) -> tuple[list[QueuedCopy], list[int]]:
        """Mark ``recipient``'s live entries of ``msg_id`` (from one of
        ``senders``) delivered; remove records whose recipients are all
        terminal. (the committed entries as they were, finalized seqs)."""

    def expire(self, now: int, limit: int) -> tuple[Sequence[ExpiredCopy], list[int]]:
        """Entries whose ``expires_at`` passed while live (now expired), and
        the records removed because nothing live is left in them."""

    def next_expiry(self) -> int | None: ...

    def cursor_pass(self, consumer: str, *, new: bool) -> int:
        """The consumer's poll pass number (a new pass when ``new``); kept
        in the store, so a cursor stays monotonic across restarts."""

    def get(self, seq: int, recipient: str) -> QueuedCopy | None: ...

    def set_transfer(self, seq: int, recipient: str, info: TransferInfo) -> None: ...

    def transfers_overdue(self, now: int, limit: int) -> list[QueuedCopy]:
        """Entries whose handoff is pending past its deadline."""

    def handoffs_due(self, now: int, max_attempts: int, limit: int) -> list[QueuedCopy]:
        """Entries routed to a downstream relay, handed back (rolled back),
        with handoff attempts left and their retry time reached."""

    def next_transfer_deadline(self, max_attempts: int) -> int | None:
        """The earliest handoff deadline or handoff retry time."""

    def find_transfer(self, msg_id: bytes, from_did: str, recipient: str, downstream: str) -> QueuedCopy | None: ...

    def remove(self, seq: int, recipient: str) -> bool:
        """Drop one entry (custody moved); True when its record went with it."""
