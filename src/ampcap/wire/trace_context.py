"""The caller's trace context in an envelope ``ext`` entry (``ampcap.trace``), sans-I/O.

A CAP_INVOKE sent by a caller that traces (OpenTelemetry, net/features/tracing.py)
to a peer that traces too carries the W3C Trace Context of the caller's span,
so the provider's span joins the caller's trace and the calls the provider
makes while serving it join it as well::

    "ampcap.trace": {"traceparent": "00-<32 hex>-<16 hex>-<2 hex>",
                     ? "tracestate": text,
                     "sig": bstr}

Both sides must have announced ``ampcap.trace`` in HELLO (wire/extensions.py):
no other peer ever receives the entry. RFC 001 §8.7 leaves ``ext`` out of the
envelope signature, so the entry signs itself, as ``ampcap.deprecation``
does: ``sig`` is the sender's Ed25519 signature over the deterministic CBOR
of ``["ampcap.trace/1", from, id, traceparent, tracestate or null]`` (``id``
the envelope's own message id), which ties it to the sender and to this one
message. A receiver ignores an entry that is absent, malformed, too large or
whose signature does not verify: it is telemetry, never a reason to refuse
an invoke or to answer with an error.

Only this module knows the wire form; the OpenTelemetry objects are built
from a :class:`TraceParent` at the edge.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from .cbor import dumps
from .extensions import TRACE
from .signing import verify_signature

__all__ = ["EXT_KEY", "TraceParent", "parse_traceparent", "parse_tracestate", "signed_entry", "read_entry"]

EXT_KEY = TRACE  # the ext key is the extension's name, as for ampcap.deprecation
_CONTEXT = "ampcap.trace/1"
_TRACEPARENT_LEN = 55  # version 00: 2 + 1 + 32 + 1 + 16 + 1 + 2
MAX_TRACEPARENT = 256  # a later version may append fields; longer is not read at all
MAX_TRACESTATE = 512  # W3C: a vendor may cut tracestate at 512 characters
MAX_TRACESTATE_MEMBERS = 32


class TraceParent(msgspec.Struct, frozen=True, gc=False):
    """A parsed W3C ``traceparent`` (and the ``tracestate`` beside it, as text)."""

    trace_id: int  # 128 bits, never 0
    span_id: int  # 64 bits, never 0
    flags: int  # 8 bits; bit 0 = sampled
    tracestate: str | None = None

    def header(self) -> str:
        """The version-00 ``traceparent`` text."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


# version, trace id, parent (span) id, flags: lowercase hex only (W3C Trace Context §3.2.2).
_FIELDS = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_traceparent(value: Any) -> TraceParent | None:
    """``value`` as a W3C traceparent, or None when it is not one (any type,
    any length: it comes from the network). Version 00 is exactly 55
    characters; a later version is read for its first four fields when the
    next character is a dash, as W3C Trace Context §3.2.4 asks; ``ff`` is invalid."""
    if type(value) is not str or not _TRACEPARENT_LEN <= len(value) <= MAX_TRACEPARENT:
        return None
    found = _FIELDS.match(value)
    if found is None:
        return None
    version = found[1]
    if version == "ff" or (len(value) > _TRACEPARENT_LEN and (version == "00" or value[_TRACEPARENT_LEN] != "-")):
        return None
    trace_id, span_id = int(found[2], 16), int(found[3], 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id=trace_id, span_id=span_id, flags=int(found[4], 16))


# W3C Trace Context §3.3.1: a member is key=value; a key is a simple key or
# tenant@system; a value is up to 256 printable characters, no comma or "=",
# not ending in a space.
_MEMBER = re.compile(r"(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})"
                     r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def parse_tracestate(value: Any) -> str | None:
    """``value``, its members joined by bare commas, when it is a W3C
    tracestate (at most 512 characters, 1 to 32
    comma-separated ``key=value`` members as §3.3.1 spells them, no key
    twice), else None: what the edge hands OpenTelemetry is never one it
    would refuse (and log about, at a peer's will)."""
    if type(value) is not str or not value or len(value) > MAX_TRACESTATE:
        return None
    members = [m.strip(" \t") for m in value.split(",")]
    members = [m for m in members if m]
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    if not all(_MEMBER.fullmatch(m) for m in members):
        return None
    keys = [m.split("=", 1)[0] for m in members]
    return ",".join(members) if len(set(keys)) == len(keys) else None  # without the optional blanks


def _signing_input(sender: str, message_id: bytes, traceparent: str, tracestate: str | None) -> bytes:
    return dumps([_CONTEXT, sender, message_id, traceparent, tracestate])


def signed_entry(sign: Callable[[bytes], bytes], sender: str, message_id: bytes, parent: TraceParent) -> dict[str, Any]:
    """The ``ext`` map carrying ``parent`` for message ``message_id`` from ``sender``."""
    traceparent = parent.header()
    entry: dict[str, Any] = {"traceparent": traceparent}
    if parent.tracestate:
        entry["tracestate"] = parent.tracestate
    entry["sig"] = sign(_signing_input(sender, message_id, traceparent, parent.tracestate or None))
    return {EXT_KEY: entry}


def read_entry(ext: Any, sender: str, message_id: bytes, public_key: Callable[[str], bytes]) -> TraceParent | None:
    """The trace context an envelope's ``ext`` carries, when it is well formed
    and its signature verifies under ``sender``'s key; None otherwise (ext is
    untrusted input, RFC 001 §8.7: never an error). A tracestate longer than
    512 characters makes the whole entry ignored; a shorter one that is not
    plausible is dropped, the traceparent kept."""
    entry = ext.get(EXT_KEY) if type(ext) is dict else None
    if type(entry) is not dict:
        return None
    raw, state, sig = entry.get("traceparent"), entry.get("tracestate"), entry.get("sig")
    parent = parse_traceparent(raw)
    if parent is None or type(raw) is not str or type(sig) is not bytes or len(sig) != 64:
        return None
    if state is not None and (type(state) is not str or len(state) > MAX_TRACESTATE):
        return None  # nothing of this size is ours to hash: the whole entry is ignored
    try:
        if not verify_signature(public_key(sender), _signing_input(sender, message_id, raw, state), sig):
            return None
    except Exception:  # an unresolvable sender, a value CBOR cannot encode: not ours to trust
        return None
    tracestate = parse_tracestate(state)
    return parent if tracestate is None else msgspec.structs.replace(parent, tracestate=tracestate)
