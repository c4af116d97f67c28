"""Revocation state for the verifier (RFC 005 §6.3, §7; ruling R20).

Two sources, consulted in order for every link of a chain:

1. the verifier's own :class:`RevocationStore`: revocations it received by
   DELEG_REVOKE or published itself (kept in the SQLite state store by
   ``ampcap.store.delegation``; :class:`MemoryRevocations` when the daemon
   runs without a state directory);
2. when a revocation publisher is configured for the link's delegator (or
   as a default), the publisher's status, asked with DELEG_QUERY by the
   edge and kept here in a :class:`StatusCache` for as long as the answer's
   ``updated_at`` + ``max_age_s`` allow (§7.3, A.17).

With no publisher configured the store alone decides: the RFC's bounded
offline mode, and the audit record says so. With one configured, a stale
or missing status fails closed with 5002 in strict mode (the default,
A.10); the edge sees which keys it should refresh in :meth:`StatusCache.wanted`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol

import msgspec

from ..errors import AmpError
from .credential import Credential, Revocation, wire_fault

__all__ = ["RevocationStore", "MemoryRevocations", "QueryResult", "StatusCache", "RevocationChecker",
           "STATUSES", "query_result_from_wire"]

MALFORMED, DELEGATION_INVALID, UNAVAILABLE = 1001, 3004, 5002
STATUSES = ("active", "revoked", "expired", "unknown")
Key = tuple[str, str]  # (delegator, delegation_id)


class RevocationStore(Protocol):
    """The narrow protocol the state store implements (R19, R20)."""

    def revoked_at(self, delegator: str, delegation_id: str) -> int | None:
        """When (delegator, delegation_id) was revoked, or None."""
        ...

    def record_revocation(self, revocation: Revocation, received_at: int) -> bool:
        """Keep a verified revocation; idempotent (§7.1). True when new."""
        ...


class MemoryRevocations:
    """A :class:`RevocationStore` in memory (``serve --state-dir none``)."""

    def __init__(self) -> None:
        self._revoked: dict[Key, Revocation] = {}

    def revoked_at(self, delegator: str, delegation_id: str) -> int | None:
        rev = self._revoked.get((delegator, delegation_id))
        return rev.revoked_at if rev is not None else None

    def record_revocation(self, revocation: Revocation, received_at: int) -> bool:
        key = (revocation.delegator, revocation.delegation_id)
        old = self._revoked.get(key)
        # Idempotent; the earliest revocation time wins, so a later copy
        # cannot move a revocation into the future.
        if old is not None and old.revoked_at <= revocation.revoked_at:
            return False
        self._revoked[key] = revocation
        return old is None


_UInt = Annotated[int, msgspec.Meta(ge=0)]  # what convert accepts from the wire; no bool, no negative


class QueryResult(msgspec.Struct, frozen=True, kw_only=True):
    """A ``deleg-query-result`` (§5.4, §7.2)."""

    delegator: str
    delegation_id: str
    status: str
    updated_at: _UInt
    expires_at: _UInt | None = None
    revoked_at: _UInt | None = None
    max_age_s: _UInt | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"delegator": self.delegator, "delegation_id": self.delegation_id,
                               "status": self.status, "updated_at": self.updated_at}
        if self.expires_at is not None:
            out["expires_at"] = self.expires_at
        if self.revoked_at is not None:
            out["revoked_at"] = self.revoked_at
        if self.max_age_s is not None:
            out["max_age_s"] = self.max_age_s
        return out


def query_result_from_wire(raw: Any) -> QueryResult:
    if not isinstance(raw, dict):
        raise AmpError(MALFORMED, "a delegation status must be a map")
    try:
        result = msgspec.convert(raw, QueryResult)
    except msgspec.ValidationError as err:
        raise wire_fault(err, "delegation status") from None
    if result.status not in STATUSES:
        raise AmpError(MALFORMED, "status must be one of " + ", ".join(STATUSES), path="status")
    return result


class StatusCache:
    """Publisher answers by (delegator, delegation_id), fresh until
    ``updated_at + max_age_s`` (``default_max_age_s`` when the publisher
    gave none). Bounded: the least recently stored entry goes first."""

    def __init__(self, *, default_max_age_s: int = 60, max_entries: int = 10_000) -> None:
        self.default_max_age_s = default_max_age_s
        self.max_entries = max_entries
        self._entries: OrderedDict[Key, QueryResult] = OrderedDict()
        self._wanted: OrderedDict[Key, None] = OrderedDict()

    def put(self, result: QueryResult) -> None:
        key = (result.delegator, result.delegation_id)
        self._entries.pop(key, None)
        self._entries[key] = result
        self._wanted.pop(key, None)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def fresh_until(self, result: QueryResult) -> int:
        age = result.max_age_s if result.max_age_s is not None else self.default_max_age_s
        return result.updated_at + age * 1000

    def get(self, key: Key, now_ms: int) -> QueryResult | None:
        """The cached status while fresh; None (and the key is wanted) otherwise."""
        result = self._entries.get(key)
        if result is not None and now_ms < self.fresh_until(result):
            return result
        self._wanted[key] = None
        while len(self._wanted) > self.max_entries:
            self._wanted.popitem(last=False)
        return None

    def wanted(self) -> list[Key]:
        """Keys a verification needed but found stale or missing: the edge
        asks their publisher (DELEG_QUERY) and :meth:`put`\\ s the answers."""
        return list(self._wanted)


_OFFLINE = "store (bounded offline mode: no publisher configured)"


class RevocationChecker(msgspec.Struct, frozen=True, kw_only=True):
    """§6.3 for one link. ``publisher_for(delegator)`` names the configured
    publisher (a DID) or None; ``publisher_for=None``: no publisher at all.
    Returns the source that decided."""

    store: RevocationStore
    cache: StatusCache | None = None
    publisher_for: Callable[[str], str | None] | None = None
    strict: bool = True

    def check_chain(self, chain: Sequence[Credential], now_ms: int) -> tuple[str, ...]:
        """:meth:`check` for every link; the store may refresh itself once first
        (``refresh(now_ms)``: revocations another process recorded)."""
        refresh = getattr(self.store, "refresh", None)
        if refresh is not None:
            refresh(now_ms)
        if self.cache is None or self.publisher_for is None:
            # The store alone decides (R20's bounded offline mode): the common case, kept short.
            revoked_at = self.store.revoked_at
            for cred in chain:
                revoked = revoked_at(cred.delegator, cred.delegation_id)
                if revoked is not None and revoked <= now_ms:
                    raise AmpError(DELEGATION_INVALID, "a credential in the chain is revoked")
            return (_OFFLINE,) * len(chain)
        return tuple(self.check(cred, now_ms) for cred in chain)

    def check(self, cred: Credential, now_ms: int) -> str:
        return self.check_key((cred.delegator, cred.delegation_id), now_ms)

    def check_key(self, key: Key, now_ms: int) -> str:
        """:meth:`check` for one (delegator, delegation_id): what a session's
        cached delegation fingerprint names (RFC 006 §7.3, re-checked on resume)."""
        delegator, delegation_id = key
        revoked = self.store.revoked_at(delegator, delegation_id)
        if revoked is not None and revoked <= now_ms:
            raise AmpError(DELEGATION_INVALID, "a credential in the chain is revoked")
        if self.cache is None or self.publisher_for is None or self.publisher_for(delegator) is None:
            return _OFFLINE
        status = self.cache.get(key, now_ms)
        if status is None:
            if self.strict:
                raise AmpError(UNAVAILABLE, "revocation status is unavailable; retry later")
            return "store (publisher status stale: non-strict mode)"
        if status.status == "revoked" and (status.revoked_at is None or status.revoked_at <= now_ms):
            raise AmpError(DELEGATION_INVALID, "a credential in the chain is revoked")
        return "publisher"
