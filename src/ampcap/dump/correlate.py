"""Request/reply correlation for the dump.

A reply names its request through ``reply_to``. The correlator remembers every
message id it has seen (bounded, oldest forgotten first) so a reply can name
the request's type and the latency between the two; CAP_INVOKE gets stricter
bookkeeping because RFC 004 §7.2 / ruling R5 promise exactly one terminal
reply (CAP_RESULT or ERROR) per invoke.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..wire.registry import MessageType
from .records import Record

__all__ = ["Correlator"]

_INVOKE = int(MessageType.CAP_INVOKE)
_TERMINAL = frozenset({int(MessageType.CAP_RESULT), int(MessageType.ERROR)})


@dataclass(slots=True)
class _Request:
    record: Record
    terminal: Record | None = None
    shown: bool = False  # the session showed this request (it passed the filters)


class Correlator:
    """Feed records in capture order with :meth:`add`; call :meth:`finish` at the end."""

    def __init__(self, max_tracked: int = 100_000, max_bytes: int = 256 << 20) -> None:
        self._seen: OrderedDict[bytes, _Request] = OrderedDict()
        self._max = max_tracked
        # Remembered requests keep their records (a flag may come at the
        # end), so their bytes are bounded too: 16 MiB messages add up fast.
        self._max_bytes = max_bytes
        self._bytes = 0

    def add(self, rec: Record) -> None:
        if rec.id is None or rec.typ is None:
            return
        if rec.reply_to is not None:
            self._reply(rec)
        if rec.id not in self._seen:
            self._seen[rec.id] = _Request(rec)
            self._bytes += len(rec.raw)
            while len(self._seen) > self._max or (self._bytes > self._max_bytes and len(self._seen) > 1):
                _, forgotten = self._seen.popitem(last=False)
                self._bytes -= len(forgotten.record.raw)

    def _reply(self, rec: Record) -> None:
        assert rec.reply_to is not None
        req = self._seen.get(rec.reply_to)
        if req is None:
            # Normal for one-direction inputs, so a note rather than a flag.
            rec.notes.append(f"reply to unseen message {rec.reply_to.hex()}")
            return
        asked = req.record
        rec.answers = (rec.reply_to.hex(), asked.typ_name or "?")
        rec.latency_ms = _latency_ms(asked, rec)
        if asked.typ != _INVOKE or rec.typ not in _TERMINAL:
            return
        if req.terminal is not None:
            rec.flags.append(f"second terminal reply to invoke {rec.reply_to.hex()} "
                             f"(first was #{req.terminal.index} {req.terminal.typ_name})")
            return
        req.terminal = rec

    def mark_shown(self, rec: Record) -> None:
        """The session showed ``rec`` (call in capture order, after :meth:`add`)."""
        req = self._seen.get(rec.id) if rec.id is not None else None
        if req is not None and req.record is rec:
            req.shown = True

    def invoke_latency(self, rec: Record) -> tuple[float, bool] | None:
        """If ``rec`` is the terminal reply of a remembered invoke and its
        latency is known: that latency, and whether the invoke was shown."""
        if rec.latency_ms is None or rec.reply_to is None:
            return None
        req = self._seen.get(rec.reply_to)
        if req is None or req.terminal is not rec:
            return None
        return rec.latency_ms, req.shown

    def settled(self, rec: Record) -> bool:
        """Whether no later record can change ``rec``: only an invoke still
        waiting for its terminal reply (and still remembered) can be flagged
        later, by :meth:`finish`."""
        if rec.typ != _INVOKE or rec.id is None:
            return True
        req = self._seen.get(rec.id)
        return req is None or req.record is not rec or req.terminal is not None

    def finish(self) -> list[Record]:
        """Flag every invoke still without a terminal reply; return them."""
        open_invokes = []
        for req in self._seen.values():
            if req.record.typ == _INVOKE and req.terminal is None:
                req.record.flags.append("invoke has no terminal reply (CAP_RESULT or ERROR) in the capture")
                open_invokes.append(req.record)
        return open_invokes


def _latency_ms(request: Record, reply: Record) -> float | None:
    # Capture times measure what the wire saw; fall back to the senders' ts.
    if request.at is not None and reply.at is not None:
        return round((reply.at - request.at) * 1000.0, 3)
    if request.ts is not None and reply.ts is not None:
        return float(reply.ts - request.ts)
    return None
