"""The daemon's DELEG_* roles (RFC 005 §2.2), sans-I/O.

:class:`DelegationService` answers DELEG_GRANT (consumer: verify, then keep
the grant by (delegator, delegation_id), §5.1), DELEG_REVOKE (verify the
revocation, mark the credential revoked, §5.2) and DELEG_QUERY (revocation
publisher: a ``deleg-query-result`` with freshness metadata, §5.3, §7.2).
It is handed a :class:`DelegationState` (``ampcap.store.delegation`` keeps
it in SQLite; :class:`MemoryState` otherwise) and returns the reply type
and body, or raises :class:`~ampcap.errors.AmpError`.

Query privacy (§5.3, §11, A.8, A.19): an id nobody issued is ``unknown``
with nothing else; without ``delegator``, an id two issuers use is refused
4001 with one fixed message, the same whichever issuers they are.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import AmpError
from ..wire.identity import KeyResolver
from ..wire.registry import MessageType
from .cose import verify_sign1
from .credential import Credential, Revocation
from .bodies import parse_grant_body, parse_query_body, parse_revoke_body
from .revocation import MemoryRevocations, QueryResult, RevocationStore

__all__ = ["DelegationState", "MemoryState", "DelegationService", "AMBIGUOUS"]

BAD_REQUEST, DELEGATION_INVALID = 4001, 3004
AMBIGUOUS = "delegation_id is ambiguous; name the delegator"
MAX_PER_ID = 8  # issuers remembered for one delegation_id (bounds A.19's lookup)


class DelegationState(RevocationStore, Protocol):
    """Credentials and revocations, the narrow protocol the store implements."""

    def record_credential(self, credential: Credential, received_at: int) -> bool:
        """Keep a verified credential by (delegator, delegation_id); True when new."""
        ...

    def credentials_with_id(self, delegation_id: str, limit: int) -> list[Credential]:
        """Known credentials with this id, from any issuer (at most ``limit``)."""
        ...


class MemoryState(MemoryRevocations):
    """:class:`DelegationState` in memory."""

    def __init__(self) -> None:
        super().__init__()
        self._creds: dict[tuple[str, str], Credential] = {}
        self._by_id: dict[str, list[tuple[str, str]]] = {}

    def record_credential(self, credential: Credential, received_at: int) -> bool:
        if credential.key in self._creds:
            return False
        self._creds[credential.key] = credential
        self._by_id.setdefault(credential.delegation_id, []).append(credential.key)
        return True

    def credentials_with_id(self, delegation_id: str, limit: int) -> list[Credential]:
        return [self._creds[k] for k in self._by_id.get(delegation_id, [])[:limit]]


class DelegationService:
    def __init__(self, state: DelegationState, resolver: KeyResolver, *, own_did: str,
                 max_age_s: int = 60) -> None:
        self.state = state
        self.resolver = resolver
        self.own_did = own_did
        self.max_age_s = max_age_s

    def handle(self, typ: int, body: Any, sender: str, now_ms: int) -> tuple[int, dict[str, Any]]:
        if typ == MessageType.DELEG_GRANT:
            self.accept_grant(parse_grant_body(body).credential, now_ms)
            return int(MessageType.PROC_OK), {}
        if typ == MessageType.DELEG_REVOKE:
            self.accept_revocation(parse_revoke_body(body).revocation, now_ms)
            return int(MessageType.PROC_OK), {}
        if typ == MessageType.DELEG_QUERY:
            request = parse_query_body(body)
            at = request.as_of if request.as_of is not None else now_ms
            return int(MessageType.RESPONSE), self.status(request.delegation_id, request.delegator, at,
                                                          now_ms).to_wire()
        raise AmpError(BAD_REQUEST, "not a delegation message")

    def accept_grant(self, cred: Credential, now_ms: int) -> bool:
        """§5.1: signature and consistency first; an expired grant is refused (A.2)."""
        verify_sign1(cred.signed, self.resolver, signer=cred.delegator)
        if now_ms >= cred.expires_at:
            raise AmpError(DELEGATION_INVALID, "the credential has expired")
        return self.state.record_credential(cred, now_ms)

    def accept_revocation(self, rev: Revocation, now_ms: int) -> bool:
        """§5.2, §7.1: signed by the delegator; not before the credential."""
        verify_sign1(rev.signed, self.resolver, signer=rev.delegator, what="revocation")
        for cred in self.state.credentials_with_id(rev.delegation_id, MAX_PER_ID):
            if cred.delegator == rev.delegator and rev.revoked_at < cred.issued_at:
                raise AmpError(DELEGATION_INVALID, "revoked_at is before the credential was issued")
        self.state.record_revocation(rev, now_ms)
        return True

    def status(self, delegation_id: str, delegator: str | None, at: int, now_ms: int) -> QueryResult:
        known = self.state.credentials_with_id(delegation_id, MAX_PER_ID)
        if delegator is None:
            issuers = {c.delegator for c in known}
            if len(issuers) > 1:
                raise AmpError(BAD_REQUEST, AMBIGUOUS, path="body.delegator")
            delegator = issuers.pop() if issuers else None
        cred = next((c for c in known if c.delegator == delegator), None)
        revoked = self.state.revoked_at(delegator, delegation_id) if delegator is not None else None
        who = delegator if delegator is not None else self.own_did
        if cred is None and revoked is None:
            return QueryResult(delegator=who, delegation_id=delegation_id, status="unknown", updated_at=now_ms,
                               max_age_s=self.max_age_s)
        if revoked is not None and revoked <= at:
            status = "revoked"
        elif cred is not None and at >= cred.expires_at:
            status = "expired"
        elif cred is not None:
            status = "active"
        else:
            status = "unknown"  # revoked later than as_of, credential never seen
        return QueryResult(delegator=who, delegation_id=delegation_id, status=status, updated_at=now_ms,
                           expires_at=cred.expires_at if cred is not None else None,
                           revoked_at=revoked if status == "revoked" else None, max_age_s=self.max_age_s)
