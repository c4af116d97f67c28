"""The relay core's values: its configuration, the queue rows it reads,
and the actions it hands the edge (RFC 003 §4).

Everything is a frozen dataclass. A queue row carries the exact ingress
bytes (``raw``) and nothing re-encoded; ``expires_at`` is ``ts + ttl`` of the
envelope, never extended (§5.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.registry import MessageType
from .states import RecipientState, TransferState

__all__ = ["NO_ACK_TYPES", "PushClaim", "RelayConfig", "NewRecord", "QueuedCopy", "TransferInfo", "Deliver", "Reply", "Forward",
           "ReportCommit", "Committed", "Finalized", "Accepted", "Audit", "Action", "Refusal", "PollPage"]

NO_ACK_TYPES = frozenset({int(MessageType.ACK), int(MessageType.PROC_OK), int(MessageType.PROC_FAIL),
                          int(MessageType.ERROR)})
"""Acknowledgements: nobody acknowledges them in turn (RFC 001), so their
hand-over (a push, a poll page) is their delivery, and the relay never
answers one with a relay ACK."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayConfig:
    """Policy knobs (limits are parameters, not constants)."""

    relay_did: str
    """The relay's own identity: its ERROR/ACK ``from``, its ``relay_path`` entry."""
    max_message_bytes: int = 16 << 20
    """§5.1 size limit on one AMP payload (RFC 002 §3.2 recommends up to 64 MiB for relays)."""
    max_ttl_ms: int = 7 * 86_400_000
    """§5.2: the longest ``ttl`` accepted (2003 beyond)."""
    max_queued_per_recipient: int = 10_000
    """Live queue entries one recipient may hold; more is refused 2003 (one
    recipient flooded with long-TTL messages cannot fill the disk)."""
    accept_unregistered: bool = False
    """R24: accept only for DIDs that registered (or that a route sends on)."""
    ack_on_accept: bool = True
    """Answer an accepted message with a signed relay ACK (``ack_source = "relay"``)."""
    lease_ms: int = 30_000
    """R25: how long a delivery claim lasts unless its process renews it."""
    redeliver_ms: int = 30_000
    """A pushed message not acknowledged within this is pushed again (at-least-once)."""
    backoff_base_ms: int = 1_000
    backoff_cap_ms: int = 60_000
    """§5.3 / RFC 002 §8.3: 1 s doubling to 60 s, plus jitter of up to one second."""
    jitter_ms: int = 1_000
    handoff_accept_timeout_ms: int = 5_000
    """§5.6.7 defaults."""
    handoff_backoff_ms: int = 1_000
    handoff_backoff_cap_ms: int = 30_000
    handoff_max_attempts: int = 3
    default_hop_limit: int = 8
    """§5.6.2: the hop limit of a message that arrives without one."""
    poll_limit_max: int = 500
    reply_ttl_ms: int = 300_000
    """TTL of the relay's own ERROR and ACK messages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRecord:
    """What ingress hands the queue: one message, its live recipients."""

    msg_id: bytes
    raw: bytes
    from_did: str
    recipients: tuple[str, ...]
    accepted_at: int
    expires_at: int
    relay_path: tuple[str, ...] = ()
    hop_limit: int = 8
    upstream: str | None = None
    """The relay that handed this record over (federation), for its commit report."""
    transfer_mode: str | None = None
    """``"single"``/``"dual"`` for a record received by handoff."""
    receipt: bytes | None = None
    """The transfer receipt we signed for it (a duplicate handoff gets it again, §5.6.3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PushClaim:
    """Claim these recipients' new entries for a push in the enqueueing
    transaction itself (R25): a recipient on a live link here is pushed at
    once, and one transaction instead of two is the relay's largest saving
    per forwarded message."""

    recipients: frozenset[str]
    owner: str
    lease_until: int
    redeliver_at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferInfo:
    mode: str
    downstream: str
    state: TransferState
    attempts: int = 0
    deadline: int = 0
    receipt: bytes | None = None
    commit_receipt: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedCopy:
    """One recipient's entry of a queue record, as the store returns it."""

    seq: int
    recipient: str
    msg_id: bytes
    from_did: str
    raw: bytes
    expires_at: int
    state: RecipientState
    attempts: int = 0
    next_attempt_at: int = 0
    relay_path: tuple[str, ...] = ()
    hop_limit: int = 8
    upstream: str | None = None
    upstream_mode: str | None = None
    transfer: TransferInfo | None = None


# ----------------------------------------------------------- actions (out)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Push ``raw`` to ``recipient`` on its live link (or webhook). The edge
    reports the outcome with :meth:`RelayCore.delivery_failed` (a transport
    failure); success needs nothing: only the recipient's ACK commits."""

    recipient: str
    raw: bytes
    seq: int | None = None
    """None for a TTL=0 message, which is never queued."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A message the relay signed (ERROR, relay ACK) for the submitter."""

    to: str
    raw: bytes
    code: int | None = None
    """The ERROR's code; None for an ACK."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """POST ``wrapper`` (RFC 002 §6.5) to ``url`` and hand the response body
    to :meth:`RelayCore.forward_answered` (or call ``forward_failed``)."""

    seq: int
    recipient: str
    downstream: str
    url: str
    wrapper: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportCommit:
    """POST ``report`` (RFC 002 §6.6) to the upstream relay at ``url``."""

    upstream: str
    url: str | None
    report: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """A recipient's delivery was committed by its ACK (audit)."""

    seq: int
    recipient: str
    msg_id: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Finalized:
    """A queue record left the queue: every recipient terminal, or custody moved."""

    seq: int
    reason: str  # "done", "expired", "transferred", "commit-reported"


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """Ingress accepted a message (audit; the relay ACK, if any, is a :class:`Reply`)."""

    msg_id: bytes
    from_did: str
    seq: int | None
    queued: tuple[str, ...]
    duplicates: tuple[str, ...] = ()
    forwarded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Audit:
    """A custody event worth a log line: a transfer accepted, rolled back,
    a receipt refused (with its code), a commit report taken."""

    event: str
    seq: int | None = None
    recipient: str | None = None
    code: int | None = None
    detail: str = ""


Action = Deliver | Reply | Forward | ReportCommit | Committed | Finalized | Accepted | Audit


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Why ingress refused a message (its code is also in a :class:`Reply`)."""

    code: int
    message: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PollPage:
    """One §6.2 poll response, and its wire bytes."""

    messages: tuple[bytes, ...]
    next_cursor: str | None
    has_more: bool
    body: bytes = field(default=b"", repr=False)
    actions: tuple[Action, ...] = ()
    """What the page set off (a commit report for an acknowledgement taken
    that an upstream relay holds in dual custody): performed after the answer."""
