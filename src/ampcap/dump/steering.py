"""What the dump says about ampcap's extensions (R23, docs/steering.md):
the names a HELLO offers and a HELLO_ACK agrees on, a cancel message, and a
deprecation notice and a caller's trace context (``ampcap.trace``,
docs/scaling.md) in ``ext``, each with whether its own signature verifies.
Sans-I/O: lines for a record's notes, nothing else."""

from __future__ import annotations

from typing import Any

from ..caps.deprecation import EXT_KEY, read_entry
from ..wire.extensions import cancelled_invoke, offered_by
from ..wire.envelope import Envelope
from ..wire.identity import KeyResolver
from ..wire.registry import MessageType
from ..wire import trace_context

__all__ = ["steering_notes"]

_HELLO, _HELLO_ACK = int(MessageType.HELLO), int(MessageType.HELLO_ACK)
_EXTENSION = int(MessageType.EXTENSION)


def steering_notes(env: Envelope, body: Any, body_known: bool, resolver: KeyResolver) -> list[str]:
    notes: list[str] = []
    if body_known and env.typ in (_HELLO, _HELLO_ACK):
        names = sorted(offered_by(body))
        if names:
            notes.append(f"extensions {'offered' if env.typ == _HELLO else 'agreed'}: {', '.join(names)}")
    if body_known and env.typ == _EXTENSION:
        invoke = cancelled_invoke(body)
        if invoke is not None:
            notes.append(f"ampcap cancel of invoke {invoke.hex()}"
                         + ("" if env.reply_to == invoke else " (reply_to does not name it)"))
    if type(env.ext) is dict and EXT_KEY in env.ext:
        notices = read_entry(env.ext, env.sender, env.reply_to, resolver.ed25519_for)
        if notices:
            notes.extend(f"ampcap deprecation (its signature verifies): {n.line()}" for n in notices)
        else:
            notes.append("ampcap deprecation entry that does not verify (ignored by callers)")
    if type(env.ext) is dict and trace_context.EXT_KEY in env.ext:
        parent = trace_context.read_entry(env.ext, env.sender, env.id, resolver.ed25519_for)
        if parent is not None:
            notes.append(f"ampcap trace context (its signature verifies): traceparent {parent.header()}"
                         + (f", tracestate {len(parent.tracestate)} characters" if parent.tracestate else ""))
        else:
            notes.append("ampcap trace context that is malformed or does not verify (ignored by daemons)")
    return notes
