"""Rendering dump records: aligned text (optionally coloured), JSON, summary."""

from __future__ import annotations

import datetime
import json
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..display import json_safe, printable
from ..wire.registry import MessageType, error_info
from ..wire.transport import GoAway, HandshakeRequest, HandshakeResponse, TransportError
from .diag import diag, to_json_value
from .records import Record

__all__ = ["record_to_json", "render_text", "Summary", "percentile", "Style"]


# ------------------------------------------------------------------ JSON


def _control_json(control: Any) -> Any:
    if isinstance(control, (HandshakeRequest, HandshakeResponse, GoAway, TransportError)):
        return {k: to_json_value(list(v) if isinstance(v, tuple) else v)
                for k in control.__struct_fields__ if (v := getattr(control, k)) is not None}
    return to_json_value(control)


def record_to_json(rec: Record) -> dict[str, Any]:
    """The spec map's ``ampcap dump --json`` object for one record."""
    out: dict[str, Any] = {
        "index": rec.index,
        "frame_type": rec.frame_type.name if rec.frame_type is not None else None,
        "direction": rec.direction,
        "src": rec.src,
        "dst": rec.dst,
        "time": rec.at,
        "typ": rec.typ,
        "typ_name": rec.typ_name,
        "id": rec.id.hex() if rec.id is not None else None,
        "from": rec.sender,
        "to": list(rec.to) if isinstance(rec.to, (tuple, list)) else rec.to,
        "ts": rec.ts,
        "ttl": rec.ttl,
        "reply_to": rec.reply_to.hex() if rec.reply_to is not None else None,
        "thread_id": rec.thread_id.hex() if rec.thread_id is not None else None,
        "encrypted": rec.encrypted,
        "decrypted": rec.decrypted,
        "signature": rec.signature,
        "signature_profile": rec.signature_profile,
        "signature_note": rec.signature_note,
        "expiry": rec.time,
        "body": to_json_value(rec.body) if rec.body_known else None,
        "body_known": rec.body_known,
        "ext": to_json_value(rec.ext) if rec.ext is not None else None,
        "cddl": {"status": rec.cddl.status, "failing_paths": list(rec.cddl.failing_paths)},
        "extension_keys": list(rec.cddl.extension_keys),
        "errors": [_finding_json(f) for f in rec.errors],
        "answers": ({"id": rec.answers[0], "typ_name": rec.answers[1]} if rec.answers else None),
        "latency_ms": rec.latency_ms,
        "flags": list(rec.flags),
        "notes": list(rec.notes),
        "size": len(rec.raw),
        "session": rec.session,
        "session_op": rec.session_op,
        "input_answer": rec.input_answer,
    }
    if rec.delegation is not None:
        out["delegation"] = {"links": rec.delegation["links"], "verdict": rec.delegation["verdict"]}
    if rec.frame_type is not None and not rec.is_amp:
        out["control"] = _control_json(rec.control)
    return out


def _finding_json(f: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"code": f.code, "message": f.message}
    if f.path:
        d["path"] = f.path
    return d


# ------------------------------------------------------------------ text


@dataclass(frozen=True, slots=True)
class Style:
    """ANSI colouring, or none."""

    color: bool = False

    def _c(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def good(self, text: str) -> str:
        return self._c("32", text)

    def bad(self, text: str) -> str:
        return self._c("31", text)

    def warn(self, text: str) -> str:
        return self._c("33", text)

    def dim(self, text: str) -> str:
        return self._c("2", text)

    def bold(self, text: str) -> str:
        return self._c("1", text)


def _clock(at: float | None, ts: int | None) -> str:
    seconds = at if at is not None else (ts / 1000.0 if ts is not None else None)
    if seconds is None:
        return " " * 12
    try:
        t = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "?".ljust(12)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _verdict(style: Style, name: str, value: str | None, good: str = "valid") -> str:
    if value is None:
        return f"{name}=-"
    return f"{name}=" + (style.good(value) if value == good else style.bad(value))


def render_text(rec: Record, style: Style = Style(), *, max_bytes: int = 24) -> str:
    """A few aligned lines for one record."""
    where = rec.direction or ""
    if rec.src or rec.dst:
        where += f" {rec.src or '?'}→{rec.dst or '?'}"
    frame = rec.frame_type.name if rec.frame_type is not None else "UNFRAMED"
    what = rec.typ_name or (frame if not rec.is_amp else "?")
    where_col = f"{where:<34} " if where else ""
    head = (f"#{rec.index:<4} {where_col}{_clock(rec.at, rec.ts)}  {frame:<11} "
            f"{style.bold(f'{what:<16}')}")
    if rec.id is not None:
        head += f" id={rec.id.hex()}"
    lines = [head.rstrip()]
    indent = " " * 6
    if rec.is_amp and rec.sender is not None:
        to = ", ".join(rec.to) if isinstance(rec.to, (tuple, list)) else rec.to
        lines.append(f"{indent}from={printable(rec.sender)} to={printable(str(to))} ts={rec.ts} ttl={rec.ttl}"
                     + (f" reply_to={rec.reply_to.hex()}" if rec.reply_to is not None else "")
                     + (f" thread={rec.thread_id.hex()}" if rec.thread_id is not None else ""))
    if rec.is_amp and rec.signature is not None:
        sig = _verdict(style, "sig", rec.signature)
        if rec.signature_profile and rec.signature == "valid":
            sig += f"({rec.signature_profile})"
        elif rec.signature_profile:
            # R15: name the profile under which it would have verified.
            sig += style.warn(f" (verifies under {rec.signature_profile})")
        elif rec.signature_note:
            sig += style.warn(" (needs the recipient's secret)")
        cddl = _verdict(style, "cddl", rec.cddl.status)
        if rec.cddl.failing_paths:
            cddl += f" at {printable(', '.join(rec.cddl.failing_paths))}"
        verdicts = f"{indent}{sig}  {_verdict(style, 'time', rec.time)}  {cddl}"
        if rec.encrypted:
            verdicts += "  enc=" + (style.good("decrypted") if rec.decrypted else style.warn("sealed"))
        lines.append(verdicts)
    if rec.cddl.extension_keys:
        lines.append(f"{indent}extension keys: {printable(', '.join(rec.cddl.extension_keys))}")
    if rec.answers is not None:
        lat = f" after {rec.latency_ms:g} ms" if rec.latency_ms is not None else ""
        lines.append(f"{indent}answers {rec.answers[1]} {rec.answers[0]}{lat}")
    if rec.session is not None:
        lines.append(f"{indent}session {rec.session}" + (f" op={printable(rec.session_op)}" if rec.session_op else ""))
    if rec.delegation is not None:
        links = rec.delegation["links"]
        chain = " -> ".join([links[0]["delegator"], *(link["delegate"] for link in links)]) if links else "?"
        lines.append(f"{indent}delegation: {printable(chain)}")
        verdict = rec.delegation["summary"]
        good = rec.delegation["verdict"]["decision"] == "allow"
        lines.append(indent + (style.good(printable(verdict)) if good else style.bad(printable(verdict))))
    if rec.is_amp and rec.body_known:
        lines.append(f"{indent}body: {diag(rec.body, max_bytes=max_bytes)}")
    elif not rec.is_amp:
        lines.append(f"{indent}payload: {_control_text(rec.control, rec.raw, max_bytes)}")
    for f in rec.errors:
        # Findings, flags and notes may quote the peer (a bad key, a text).
        lines.append(indent + style.bad(printable(f"! {f.code} {_code_name(f.code)}"
                                                  + (f" at {f.path}" if f.path else "") + f": {f.message}")))
    for flag in rec.flags:
        lines.append(indent + style.warn(printable(f"~ {flag}")))
    for note in rec.notes:
        lines.append(indent + style.dim(printable(f"· {note}")))
    return "\n".join(lines)


def _control_text(control: Any, raw: bytes, max_bytes: int) -> str:
    if control is None:
        return diag(raw, max_bytes=max_bytes)
    if isinstance(control, bytes):
        return diag(control, max_bytes=max_bytes)
    parts = [f"{k}={diag(v, max_bytes=max_bytes)}" for k in control.__struct_fields__
             if (v := getattr(control, k)) is not None]
    return f"{type(control).__name__}(" + ", ".join(parts) + ")"


def _code_name(code: int) -> str:
    try:
        return error_info(code).name
    except (KeyError, ValueError):
        return "?"


# --------------------------------------------------------------- summary


def _carried_error_code(rec: Record) -> int | None:
    """The code of an ERROR message (RFC 001 §4.3, body ``code``) or a
    transport ERROR frame (RFC 002), None for anything else."""
    if isinstance(rec.control, TransportError):
        return rec.control.code
    if rec.typ == MessageType.ERROR and isinstance(rec.body, dict):
        code = rec.body.get("code")
        if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < 1 << 32:
            return code
    return None


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n·p/100), at least 1
    return ordered[int(rank) - 1]


_MAX_KINDS = 64  # distinct message types the summary counts apart


@dataclass(slots=True)
class Summary:
    """Counts accumulated while records stream past."""

    by_type: Counter[str] = field(default_factory=Counter)
    by_error: Counter[int] = field(default_factory=Counter)  # what the dump found wrong
    # Codes the traffic itself carries: ERROR messages and transport ERROR
    # frames. A capture can be flawless and still hold a refusal; the summary
    # must not say "errors: none" about it.
    by_reply_error: Counter[int] = field(default_factory=Counter)
    flags: int = 0
    records: int = 0
    # 8 bytes per answered invoke (a list of floats takes 32): the
    # percentiles need them all, and a long capture holds millions.
    invoke_latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    open_invokes: int = 0  # invokes without a terminal reply in the capture
    sessions: dict[str, Any] = field(default_factory=dict)  # hex id -> SessionStats (dump/sessions.py)

    def add(self, rec: Record) -> None:
        self.records += 1
        name = rec.typ_name or (rec.frame_type.name if rec.frame_type else "UNFRAMED")
        if name not in self.by_type and len(self.by_type) >= _MAX_KINDS:
            name = "other"  # unknown type numbers are the sender's choice: the table stays small
        self.by_type[name] += 1
        for f in rec.errors:  # our own findings' codes: a small set
            self.by_error[f.code] += 1
        code = _carried_error_code(rec)
        if code is not None and (code in self.by_reply_error or len(self.by_reply_error) < _MAX_KINDS):
            self.by_reply_error[code] += 1  # codes are the sender's choice: the table stays small
        self.flags += len(rec.flags)

    def render(self, style: Style = Style()) -> str:
        lat = list(self.invoke_latencies_ms)
        lines = [style.bold(f"-- summary: {self.records} frames")]
        if self.by_type:
            lines.append("   types:  " + ", ".join(f"{name} {n}" for name, n in sorted(self.by_type.items())))
        if self.by_error:
            lines.append("   problems found: " + ", ".join(f"{code} {_code_name(code)} ×{n}"
                                                         for code, n in sorted(self.by_error.items())))
        else:
            lines.append("   problems found: none")
        if self.by_reply_error:
            lines.append("   error replies: " + ", ".join(f"{code} {_code_name(code)} ×{n}"
                                                        for code, n in sorted(self.by_reply_error.items())))
        if self.flags:
            lines.append(style.warn(f"   correlation flags: {self.flags}"))
        if lat:
            lines.append(f"   invoke latency ms (n={len(lat)}): p50 {percentile(lat, 50):g}  "
                         f"p90 {percentile(lat, 90):g}  p99 {percentile(lat, 99):g}")
        if self.open_invokes:
            lines.append(style.warn(f"   {self.open_invokes} invoke(s) without a terminal reply"))
        for sid, stats in list(self.sessions.items())[:50]:
            ops = " ".join(printable(op, 16) for op in stats.ops) or "-"
            lines.append(f"   session {sid}: {stats.messages} messages, ops {ops}"
                         + (f", last status {printable(stats.status)}" if stats.status else ""))
        if len(self.sessions) > 50:
            lines.append(f"   … and {len(self.sessions) - 50} more sessions")
        return "\n".join(lines)


def dumps_json(rec: Record) -> str:
    return json_safe(json.dumps(record_to_json(rec), ensure_ascii=False, separators=(",", ":")))
