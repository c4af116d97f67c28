"""Deprecation in-band (ampcap's R23), sans-I/O: which versions a provider
has deprecated, and the signed envelope ``ext`` entry that tells a caller.

A version is deprecated when its manifest entry says ``stability =
"deprecated"`` (with ``deprecated_by`` and ``sunset_date`` when known), or
when a ``deprecated_ranges`` of any version of the same name contains it
(RFC 004 §4.2). A CAP_RESULT for such a version, and a CAP_DECLARE listing
one, carry ``ext["ampcap.deprecation"]`` to a peer that announced
``ampcap.deprecation`` in HELLO (wire/extensions.py)::

    {"notices": [{"id": "name:version", ? "ranges": [* text],
                  ? "replacement": text, ? "sunset": "YYYY-MM-DD"}, ...],
     "sig": bstr}

RFC 001 §8.7 leaves ``ext`` out of the envelope signature, so the entry
signs itself: ``sig`` is the sender's Ed25519 signature over the
deterministic CBOR of ``["ampcap.deprecation/1", from, reply_to, notices]``
(``reply_to`` the message's own, or null), which ties it to the sender and
to the request it answers. A receiver that cannot verify it ignores it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import msgspec

from .descriptor import Descriptor, Stability
from .semver import Range
from ..display import printable
from ..wire.cbor import dumps
from ..wire.signing import verify_signature

__all__ = ["EXT_KEY", "AmpDeprecationWarning", "Notice", "notices_for", "signed_entry", "read_entry", "DeprecationNotices"]

EXT_KEY = "ampcap.deprecation"
_CONTEXT = "ampcap.deprecation/1"
_MAX_NOTICES = 256  # read from a peer: the rest are ignored


class AmpDeprecationWarning(DeprecationWarning):
    """A provider said, in-band, that a capability version it served is deprecated."""


class Notice(msgspec.Struct, frozen=True, gc=False):
    """One deprecated version: ``id`` (name:version), the ``deprecated_ranges``
    that cover it, its ``replacement`` and ``sunset`` date when known."""

    id: str
    ranges: tuple[str, ...] = ()
    replacement: str | None = None
    sunset: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.ranges:
            out["ranges"] = list(self.ranges)
        if self.replacement is not None:
            out["replacement"] = self.replacement
        if self.sunset is not None:
            out["sunset"] = self.sunset
        return out

    @classmethod
    def from_wire(cls, obj: Any) -> Notice | None:
        if type(obj) is not dict or type(obj.get("id")) is not str:
            return None
        ranges = obj.get("ranges", [])
        replacement, sunset = obj.get("replacement"), obj.get("sunset")
        if type(ranges) is not list or not all(type(r) is str for r in ranges) \
                or (replacement is not None and type(replacement) is not str) \
                or (sunset is not None and type(sunset) is not str):
            return None
        return cls(id=obj["id"], ranges=tuple(ranges), replacement=replacement, sunset=sunset)

    def line(self) -> str:
        """One line for a person (a peer's text made printable, cut short)."""
        text = f"{printable(self.id, 200)} is deprecated"
        if self.ranges:
            text += f" (deprecated ranges: {printable(', '.join(self.ranges), 200)})"
        if self.replacement is not None:
            text += f"; use {printable(self.replacement, 200)}"
        if self.sunset is not None:
            text += f"; sunset {printable(self.sunset, 40)}"
        return text


def notices_for(descriptors: Iterable[Descriptor]) -> dict[str, Notice]:
    """Every deprecated version among ``descriptors`` (a provider's catalog), by id."""
    items = list(descriptors)
    by_name: dict[str, list[Descriptor]] = {}
    for d in items:
        by_name.setdefault(d.name, []).append(d)
    out: dict[str, Notice] = {}
    for name, versions in by_name.items():
        ranges: list[Range] = [r for d in versions for r in (d.deprecated_ranges or ())]
        marked = {d.id for d in versions if d.stability is Stability.DEPRECATED}
        for d in versions:
            covering = tuple(dict.fromkeys(r.text for r in ranges if r.contains(d.version)))
            if d.id not in marked and not covering:
                continue
            replacement = d.deprecated_by
            if replacement is None:  # the newest version of the name that is not deprecated, if newer
                fine = [v for v in versions if v.id not in marked and not any(r.contains(v.version) for r in ranges)
                        and v.version > d.version]
                replacement = max(fine, key=lambda v: v.version).id if fine else None
            sunset = d.sunset_date.isoformat() if isinstance(d.sunset_date, datetime.date) else None
            out[d.id] = Notice(id=d.id, ranges=covering, replacement=replacement, sunset=sunset)
    return out


def _signing_input(sender: str, reply_to: bytes | None, notices: list[dict[str, Any]]) -> bytes:
    return dumps([_CONTEXT, sender, reply_to, notices])


def signed_entry(sign: Callable[[bytes], bytes], sender: str, reply_to: bytes | None,
                 notices: Iterable[Notice]) -> dict[str, Any]:
    """The ``ext`` map carrying ``notices``, signed by ``sign`` as ``sender``."""
    wire = [n.to_wire() for n in notices]
    return {EXT_KEY: {"notices": wire, "sig": sign(_signing_input(sender, reply_to, wire))}}


def read_entry(ext: Any, sender: str, reply_to: bytes | None, public_key: Callable[[str], bytes]) -> tuple[Notice, ...]:
    """The notices an envelope's ``ext`` carries, when its signature verifies
    under ``sender``'s key; () when absent, malformed or unverified (ext is
    untrusted input, RFC 001 §8.7: never an error)."""
    entry = ext.get(EXT_KEY) if type(ext) is dict else None
    if type(entry) is not dict:
        return ()
    raw, sig = entry.get("notices"), entry.get("sig")
    if type(raw) is not list or type(sig) is not bytes or not raw:
        return ()
    try:
        if not verify_signature(public_key(sender), _signing_input(sender, reply_to, raw), sig):
            return ()
    except Exception:  # an unresolvable sender, a value CBOR cannot encode: not ours to trust
        return ()
    notices = [Notice.from_wire(n) for n in raw[:_MAX_NOTICES]]
    return tuple(n for n in notices if n is not None)


class DeprecationNotices:
    """The provider's side: the deprecated versions of its catalog and the
    ``ext`` to attach for them, only for connections where ``announced(conn)``
    (the peer announced ``ampcap.deprecation`` in HELLO)."""

    __slots__ = ("by_id", "_sign", "_did", "_announced")

    def __init__(self, by_id: Mapping[str, Notice], *, sign: Callable[[bytes], bytes], did: str,
                 announced: Callable[[Hashable], bool]) -> None:
        self.by_id = dict(by_id)
        self._sign, self._did, self._announced = sign, did, announced

    def ext_for(self, ids: Iterable[str], conn: Hashable, reply_to: bytes | None) -> dict[str, Any] | None:
        """The ``ext`` for a reply on ``conn`` about ``ids``, or None."""
        found = [self.by_id[i] for i in ids if i in self.by_id]
        if not found or not self._announced(conn):
            return None
        return signed_entry(self._sign, self._did, reply_to, found)
