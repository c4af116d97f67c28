"""Replies waiting for an HTTP principal's poll (RFC 002 §6.2, ruling R21), sans-I/O.

A message POSTed over HTTP whose reply is not ready within the server's
short wait is answered ``202``; its replies (and any later ones) wait here,
in the mailbox of the transport principal, until that principal polls
``GET /amp/v1/messages?cursor=…&limit=…``.

Cursor: opaque text ``<epoch>.<seq>``. Every stored reply gets the next
number of one counter shared by all mailboxes, so positions only grow
(monotonic for every consumer). Polling with cursor ``c`` says "I have
everything up to ``c``": those replies are acknowledged, and the poll
returns what comes after. An acknowledged reply is still kept for
``replay_window_ms``, so a poll that repeats an older cursor (a client that
lost a response) gets it again: at-least-once within the window, as §6.2
allows. A cursor of another epoch (an earlier run of the server) counts as
no cursor; a cursor past anything issued is malformed (1001).

Bounds, so a principal that never polls cannot grow our memory: a mailbox
holds at most ``max_messages`` / ``max_bytes`` and all of them together
``max_total_bytes``. :meth:`Mailboxes.has_room` is asked before a POST is
accepted (429 when full): new work is refused, not replies dropped. A
terminal reply is always stored (the number of them is bounded by the
executor's in-flight limit per principal); an interim one (PROGRESS,
PROCESSING) is dropped when the mailbox is full. Replies are also dropped
when their own lifetime (``ts + ttl``) ends: nobody may act on them then.

Time is an argument (``now_ms``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..errors import AmpError

__all__ = ["Mailboxes", "Page"]


@dataclass(slots=True)
class _Entry:
    seq: int
    raw: bytes
    expires_ms: int
    acked_ms: int | None = None  # when a poll acknowledged it (kept for the replay window)


@dataclass(slots=True)
class _Box:
    entries: deque[_Entry] = field(default_factory=deque)
    size: int = 0
    acked: int = 0  # the highest position this principal acknowledged


@dataclass(frozen=True, slots=True)
class Page:
    """One poll's answer: the §6.2 wrapper's three fields."""

    messages: list[bytes]
    next_cursor: str | None
    has_more: bool


class Mailboxes:
    """Every HTTP principal's pending replies."""

    def __init__(self, *, epoch: str, max_messages: int = 1024, max_bytes: int = 16 << 20,
                 max_total_bytes: int = 64 << 20, replay_window_ms: int = 60_000, max_limit: int = 1000) -> None:
        if not epoch or "." in epoch:
            raise ValueError("epoch must be non-empty text without '.'")
        self.epoch = epoch
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes
        self.replay_window_ms = replay_window_ms
        self.max_limit = max_limit
        self._boxes: dict[str, _Box] = {}
        self._seq = 0
        self.total_bytes = 0

    def __len__(self) -> int:
        return len(self._boxes)

    def pending(self, principal: str) -> int:
        """Replies stored for ``principal`` and not yet acknowledged."""
        box = self._boxes.get(principal)
        return 0 if box is None else sum(1 for e in box.entries if e.acked_ms is None)

    def has_room(self, principal: str) -> bool:
        """May ``principal`` submit more work (would its replies fit)?"""
        if self.total_bytes >= self.max_total_bytes:
            return False
        box = self._boxes.get(principal)
        return box is None or (len(box.entries) < self.max_messages and box.size < self.max_bytes)

    def put(self, principal: str, raw: bytes, *, expires_ms: int, interim: bool, now_ms: int) -> bool:
        """Store one reply; False when an interim one was dropped for want of room."""
        self._expire(principal, now_ms)
        box = self._boxes.get(principal)
        if box is None:
            box = self._boxes[principal] = _Box()
        if interim and (len(box.entries) >= self.max_messages or box.size + len(raw) > self.max_bytes
                        or self.total_bytes + len(raw) > self.max_total_bytes):
            return False
        self._seq += 1
        box.entries.append(_Entry(self._seq, raw, expires_ms))
        box.size += len(raw)
        self.total_bytes += len(raw)
        return True

    def poll(self, principal: str, cursor: str | None, limit: int | None, now_ms: int) -> Page:
        """The replies after ``cursor`` (at most ``limit``), acknowledging
        everything up to it; ``AmpError(1001)`` for a malformed cursor or limit."""
        after = self._position(cursor)
        if limit is None or limit == 0:
            limit = 50
        if limit < 0:
            raise AmpError(1001, "limit must not be negative", path="limit")
        limit = min(limit, self.max_limit)
        box = self._boxes.get(principal)
        if box is None:
            return Page([], cursor if after else None, False)
        if after is not None and after > box.acked:
            for entry in box.entries:
                if entry.seq > after:
                    break
                if entry.acked_ms is None:
                    entry.acked_ms = now_ms
            box.acked = after
        self._expire(principal, now_ms)
        box = self._boxes.get(principal)
        start = after if after is not None else box.acked if box is not None else 0
        out: list[bytes] = []
        last = start
        more = False
        for entry in box.entries if box is not None else ():
            if entry.seq <= start:
                continue
            if len(out) == limit:
                more = True
                break
            out.append(entry.raw)
            last = entry.seq
        return Page(out, f"{self.epoch}.{last}" if last else None, more)

    def _position(self, cursor: str | None) -> int | None:
        if cursor is None or cursor == "":
            return None
        epoch, dot, seq = cursor.partition(".")
        if not dot or not seq.isascii() or not seq.isdigit() or len(seq) > 19:
            raise AmpError(1001, "malformed poll cursor", path="cursor")
        if epoch != self.epoch:
            return None  # issued by an earlier run: start from what is kept
        position = int(seq)
        if position > self._seq:
            raise AmpError(1001, "poll cursor past anything issued", path="cursor")
        return position

    def _expire(self, principal: str, now_ms: int) -> None:
        """Drop what is acknowledged and past the replay window, or past its
        own lifetime; forget an empty mailbox (its position lives in the cursor)."""
        box = self._boxes.get(principal)
        if box is None:
            return
        window = self.replay_window_ms
        kept: deque[_Entry] = deque()
        for entry in box.entries:
            if entry.expires_ms <= now_ms or (entry.acked_ms is not None and entry.acked_ms + window <= now_ms):
                box.size -= len(entry.raw)
                self.total_bytes -= len(entry.raw)
            else:
                kept.append(entry)
        box.entries = kept
        if not kept:
            del self._boxes[principal]

    def expire_all(self, now_ms: int) -> None:
        """Run the expiry over every mailbox (the edge calls it now and then)."""
        for principal in list(self._boxes):
            self._expire(principal, now_ms)
