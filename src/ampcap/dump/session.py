"""A dump session: stream events in, filtered and correlated records out.

Shared by the file/pcap path (everything buffered, so late correlation flags
land on the right records) and the live tap (records printed as they pass).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..wire.registry import MessageType
from .correlate import Correlator
from .records import Inspector, Record
from .sessions import SessionTracker
from .render import Summary
from .streams import StreamEvent

__all__ = ["RecordFilter", "DumpSession", "known_type_filter", "MAX_TYPE_CODE"]

_CAP_TYPES = frozenset(int(t) for t in (MessageType.CAP_QUERY, MessageType.CAP_DECLARE,
                                        MessageType.CAP_INVOKE, MessageType.CAP_RESULT))


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """``--type``, ``--did`` and ``--capability``; all given ones must match."""

    type: str | None = None
    did: str | None = None
    capability: str | None = None

    def matches(self, rec: Record, answered_matched: bool = False) -> bool:
        if self.type is not None and not _type_matches(self.type, rec):
            return False
        if self.did is not None:
            to = rec.to if isinstance(rec.to, (list, tuple)) else (rec.to,)
            if rec.sender != self.did and self.did not in to:
                return False
        if self.capability is not None:
            # A reply (e.g. CAP_RESULT) carries no capability name: it matches
            # when the request it answers did.
            if not (answered_matched or _mentions_capability(rec, self.capability)):
                return False
        return True


MAX_TYPE_CODE = (1 << 64) - 1  # typ is a CBOR uint: what one can hold, as cbor2 decodes it


def known_type_filter(wanted: str) -> bool:
    """Could ``--type`` ever match? A message or frame type name, or a code
    a message's ``typ`` (a CBOR unsigned integer) can hold."""
    from ..wire.frames import FrameType
    from ..wire.registry import MessageType

    w = wanted.strip().upper()
    if w in MessageType.__members__ or w in FrameType.__members__:
        return True
    try:
        code = int(wanted, 0)
    except ValueError:
        return False
    return 0 <= code <= MAX_TYPE_CODE


def _type_matches(wanted: str, rec: Record) -> bool:
    w = wanted.strip().upper()
    if rec.typ_name is not None and rec.typ_name == w:
        return True
    if rec.frame_type is not None and rec.frame_type.name == w:
        return True
    try:
        code = int(wanted, 0)
    except ValueError:
        return False
    return rec.typ == code


def _mentions_capability(rec: Record, name: str) -> bool:
    if rec.typ not in _CAP_TYPES or not rec.body_known or not isinstance(rec.body, dict):
        return False
    return _names_in(rec.body, name, 0)


def _names_in(value: Any, name: str, depth: int) -> bool:
    if depth > 4:
        return False
    if isinstance(value, dict):
        for key in ("capability", "type", "name"):
            if value.get(key) == name:
                return True
        ident = value.get("id")
        if isinstance(ident, str) and (ident == name or ident.startswith(name + ":")):
            return True
        return any(_names_in(v, name, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
    if isinstance(value, list):
        return any(_names_in(v, name, depth + 1) for v in value)
    return False


MAX_HELD = 100_000  # records waiting behind an open invoke
MAX_HELD_BYTES = 256 << 20  # and their bytes (messages may be 16 MiB each)
MAX_MATCHED = 100_000  # ids remembered for --capability (their replies are shown too)


class DumpSession:
    """Events → records; keeps correlation and the summary."""

    def __init__(self, inspector: Inspector, record_filter: RecordFilter = RecordFilter()) -> None:
        self.inspector = inspector
        self.filter = record_filter
        self.correlator = Correlator()
        self.sessions = SessionTracker()
        self.summary = Summary()
        self.summary.sessions = self.sessions.sessions
        self.any_findings = False
        self.records = 0  # every record, shown or not
        self.framed = 0  # of which a frame (not a framing failure before one could be cut out)
        self._matched_ids: dict[bytes, None] = {}  # insertion-ordered: the oldest is forgotten first

    def record(self, event: StreamEvent) -> Record:
        w = event.where
        if event.frame is not None:
            rec = self.inspector.frame(event.frame, direction=w.direction, src=w.src, dst=w.dst, at=event.at)
        else:
            assert event.error is not None
            rec = self.inspector.stream_error(event.error, direction=w.direction, src=w.src, dst=w.dst,
                                              at=event.at)
        self.correlator.add(rec)
        self.records += 1
        if rec.frame_type is not None:
            self.framed += 1
        self.sessions.add(rec)
        return rec

    def shown(self, rec: Record) -> bool:
        """Whether ``rec`` passes the filters (and count it in the summary if so).

        The summary describes what was shown: an invoke's latency counts
        when the invoke or its terminal reply passed the filters (``--type
        CAP_INVOKE`` still gets the latencies of the invokes it lists).
        """
        if rec.errors or rec.flags:
            self.any_findings = True
        answered = rec.reply_to is not None and rec.reply_to in self._matched_ids
        passes = self.filter.matches(rec, answered)
        if passes:
            if rec.id is not None and self.filter.capability is not None:
                self._matched_ids[rec.id] = None
                if len(self._matched_ids) > MAX_MATCHED:
                    del self._matched_ids[next(iter(self._matched_ids))]
            self.summary.add(rec)
            self.correlator.mark_shown(rec)
        latency = self.correlator.invoke_latency(rec)
        if latency is not None and (passes or latency[1]):
            self.summary.invoke_latencies_ms.append(latency[0])
        return passes

    def finish(self) -> list[Record]:
        """Flag unanswered invokes; return them (the summary counts the
        ones that pass the filters)."""
        open_invokes = self.correlator.finish()
        if open_invokes:
            self.any_findings = True
        self.summary.open_invokes = sum(1 for rec in open_invokes if self.filter.matches(rec, False))
        return open_invokes

    def run_all(self, events: Any, emit: Callable[[Record], None]) -> list[Record]:
        """Emit the records that pass the filters, in capture order, each as
        soon as no later frame can change it.

        An invoke without its terminal reply yet may still be flagged at the
        end, so it and every record after it wait. Memory then follows the
        invokes open at one time, not the length of the capture; past
        ``MAX_HELD`` waiting records (or ``MAX_HELD_BYTES`` of them) the
        oldest goes out anyway (a flag it gets later still counts in the
        summary).
        """
        held: deque[Record] = deque()
        settled = self.correlator.settled
        held_bytes = 0
        for event in events:
            rec = self.record(event)
            held.append(rec)
            held_bytes += len(rec.raw)
            while held and (len(held) > MAX_HELD or held_bytes > MAX_HELD_BYTES or settled(held[0])):
                rec = held.popleft()
                held_bytes -= len(rec.raw)
                if self.shown(rec):
                    emit(rec)
        open_invokes = self.finish()
        for rec in held:
            if self.shown(rec):
                emit(rec)
        return open_invokes
