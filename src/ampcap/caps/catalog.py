"""The capabilities one daemon serves: lookup, §6.3 negotiation, §6.5 pages.

A :class:`Catalog` is built from :class:`~ampcap.caps.manifest.CapabilitySpec`
records (a manifest, the demo set, or functions registered through the
Python API) and plays the two collaborator roles the executor names:
:class:`~ampcap.peer.executor.CapabilityResolver` (steps 4 and 6 of the
RFC 004 §7.2 validation order) and
:class:`~ampcap.peer.executor.CapabilityDirectory` (CAP_QUERY answers).

Selection (RFC 004 §6.3, §8): a pinned version (the ``id`` form or
``version``) must exist exactly: every policy serves a pinned request only
with that very version, since no bridge adapts one version to another here.
``negotiate`` hints pick, in order, the preferred version, the first
acceptable one, then the highest version inside the range; the outcome is
always a concrete id the provider declares. Otherwise 4003.

Cursors (ruling R7, RFC 004 §6.5): ``next_cursor`` is opaque to the client
and tamper-evident: an offset bound to a digest of the filter, the order and
the catalog snapshot, with an expiry, MACed with a per-catalog key. A cursor
that was altered, expired, minted by another catalog, or presented with a
different filter or order is 4001. The catalog is immutable, so one snapshot
spans all its pages and page boundaries can neither skip nor repeat.

Sans-I/O: time comes in as ``now_ms`` and the MAC key is injected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import AmpError
from ..peer.executor import QueryPage, Resolved
from ..peer.progress import InvokeRequest, QueryRequest
from ..wire.cbor import dumps, loads
from .manifest import CapabilitySpec
from .semver import Version

__all__ = ["Catalog", "CURSOR_TTL_MS", "DEFAULT_PAGE_LIMIT"]

BAD_REQUEST, NOT_FOUND, VERSION_MISMATCH = 4001, 4002, 4003
CURSOR_TTL_MS = 10 * 60_000
DEFAULT_PAGE_LIMIT = 100  # a query without ``limit`` still gets bounded pages
_MAC_BYTES = 16


class Catalog:
    """Served capabilities, indexed by canonical name (immutable once built)."""

    def __init__(self, specs: Iterable[CapabilitySpec], *, cursor_key: bytes) -> None:
        if len(cursor_key) < 16:
            raise ValueError("cursor_key must be at least 16 bytes")
        self.specs: tuple[CapabilitySpec, ...] = tuple(specs)
        self._by_name: dict[str, list[CapabilitySpec]] = {}
        self._by_id: dict[str, CapabilitySpec] = {}
        self._aliases: dict[str, str] = {}
        for spec in self.specs:
            if spec.id in self._by_id:
                raise ValueError(f"capability {spec.id} declared twice")
            self._by_id[spec.id] = spec
            self._by_name.setdefault(spec.name, []).append(spec)
            for alias in spec.aliases:
                self._aliases.setdefault(alias, spec.name)
        for versions in self._by_name.values():
            versions.sort(key=lambda s: s.version)  # ascending SemVer precedence
        self._key = cursor_key
        # Different catalogs (a restarted daemon) never accept each other's cursors.
        self._snapshot = hashlib.sha256(b"".join(s.id.encode() + b"\0" for s in self.specs) + cursor_key).digest()[:8]

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, capability_id: str) -> CapabilitySpec | None:
        return self._by_id.get(capability_id)

    # --------------------------------------------------- CapabilityResolver

    def canonical_name(self, name: str) -> str:
        return name if name in self._by_name else self._aliases.get(name, name)

    def resolve_identity(self, request: InvokeRequest) -> list[CapabilitySpec]:
        found = self._by_name.get(self.canonical_name(request.name))
        if not found:
            raise AmpError(NOT_FOUND, f"capability {request.name!r} not found")
        return found

    def check_version(self, target: list[CapabilitySpec], request: InvokeRequest) -> Resolved:
        chosen = select_version(target, request)
        if chosen is None:
            raise AmpError(VERSION_MISMATCH, f"no compatible version of {target[0].name}")
        return Resolved(descriptor=chosen.descriptor, params=request.params, binding=chosen.binding)

    # -------------------------------------------------- CapabilityDirectory

    def query(self, request: QueryRequest, now_ms: int) -> QueryPage:
        name = self.canonical_name(request.name)
        found = self._by_name.get(name)
        if not found:
            raise AmpError(NOT_FOUND, f"no capability named {request.name!r}")
        rng = request.version_range
        matching = [s for s in found if rng is None or rng.contains(s.version)]
        if not matching:
            raise AmpError(VERSION_MISMATCH, f"no version of {name} satisfies {rng}")
        # §6.5 sort key (name ASC, version by precedence); one name per query here.
        if request.order == "newest-first":
            matching.reverse()
        context = self._context(request)
        offset = 0 if request.cursor is None else self._open_cursor(request.cursor, context, now_ms)
        if offset >= len(matching):
            raise AmpError(BAD_REQUEST, "cursor is past the end of the result set", path="body.cursor")
        limit = request.limit if request.limit else DEFAULT_PAGE_LIMIT
        page = matching[offset:offset + limit]
        end = offset + len(page)
        cursor = self._mint_cursor(end, context, now_ms) if end < len(matching) else None
        return QueryPage(descriptors=tuple(s.descriptor for s in page), next_cursor=cursor)

    # ------------------------------------------------------------- cursors

    def _context(self, request: QueryRequest) -> bytes:
        # Bound to the filter exactly as sent and the effective order (§6.1:
        # both must stay unchanged across pages; ``limit`` may change).
        return hashlib.sha256(dumps([_plain(request.filter), request.order]) + self._snapshot).digest()[:16]

    def _mint_cursor(self, offset: int, context: bytes, now_ms: int) -> str:
        payload = dumps([offset, now_ms + CURSOR_TTL_MS, context])
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode("ascii")

    def _open_cursor(self, cursor: str, context: bytes, now_ms: int) -> int:
        bad = AmpError(BAD_REQUEST, "invalid or expired cursor", path="body.cursor")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (ValueError, TypeError):
            raise bad from None
        if len(raw) <= _MAC_BYTES or len(raw) > 256:
            raise bad
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]):
            raise bad
        try:
            offset, expires, bound = loads(payload)
        except (AmpError, ValueError, TypeError):
            raise bad from None
        if bound != context:
            raise AmpError(BAD_REQUEST, "cursor does not match this filter and order", path="body.cursor")
        if type(expires) is not int or now_ms > expires or type(offset) is not int or offset < 0:
            raise bad
        return offset


def select_version(specs: list[CapabilitySpec], request: InvokeRequest) -> CapabilitySpec | None:
    """RFC 004 §6.3 over one capability's versions (ascending), or ``None``."""
    by_version: dict[Version, CapabilitySpec] = {s.version: s for s in specs}
    if request.version is not None:
        return by_version.get(request.version)
    hints = request.negotiate
    if hints is None:
        return None
    if hints.preferred is not None and hints.preferred in by_version:
        return by_version[hints.preferred]
    for wanted in hints.acceptable:
        if wanted in by_version:
            return by_version[wanted]
    if hints.range is not None:
        fits = [s for s in specs if hints.range.contains(s.version)]
        if fits:
            return fits[-1]  # highest precedence
    return None


def _plain(value: Any) -> Any:
    # Filters come from CBOR, so they are already plain; copy maps to dicts.
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
