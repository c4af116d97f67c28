"""Delegation credentials and revocations (RFC 005 §4.1, §4.3, §4.4, §7.1).

:func:`issue` builds the deterministic payload and signs it (the issuer
profile, §2.2: the signer is always the payload's ``delegator``);
:func:`parse_credential` decodes a ``delegation-credential-envelope`` into a
:class:`Credential` whose signature is *not yet* checked (that is step 4 of
the validation order, :mod:`.chain`), so each step keeps its own code.

Error classes (§8, §9): not a COSE_Sign1, or a payload of the wrong shape or
not in deterministic CBOR, is 1001; a ``cred_v``/``rev_v`` other than 1 is
1004, decided before any other field is looked at; a payload that is well
formed but inconsistent (expiry not after its start, ``max_chain_depth`` 0,
an empty scope, a selector pattern) is 3004.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.cbor import dumps, loads
from ..wire.identity import Identity
from .cose import PAYLOAD_LIMITS, Signed, decode_sign1, default_kid, did_url_ok, sign1
from .scope import Scope, parse_scope

__all__ = ["Credential", "Revocation", "issue", "revoke", "parse_credential", "parse_envelope",
           "parse_revocation", "credential_envelope", "CRED_V", "REV_V", "FORMAT"]

MALFORMED, UNSUPPORTED, DELEGATION_INVALID = 1001, 1004, 3004
CRED_V = 1
REV_V = 1
FORMAT = "cose_sign1"
MAX_AUD = 16
MAX_TEXT = 512  # ids and DIDs


class Credential(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded credential link. ``signed`` is what step 4 verifies."""

    delegation_id: str
    delegator: str
    delegate: str
    scope: Scope
    issued_at: int
    not_before: int
    """Effective: ``issued_at`` when the payload has none (§4.3)."""
    expires_at: int
    allow_subdelegation: bool = False
    max_chain_depth: int | None = None
    aud: tuple[str, ...] | None = None
    nonce: bytes | None = None
    signed: Signed
    raw: bytes
    """The COSE_Sign1 bytes as carried."""

    @property
    def key(self) -> tuple[str, str]:
        """The canonical identity (§4.1): (delegator, delegation_id)."""
        return (self.delegator, self.delegation_id)

    def envelope(self) -> dict[str, Any]:
        return credential_envelope(self.raw)


class Revocation(msgspec.Struct, frozen=True, kw_only=True):
    delegation_id: str
    delegator: str
    revoked_at: int
    reason: str | None
    signed: Signed
    raw: bytes


def credential_envelope(raw: bytes) -> dict[str, Any]:
    return {"format": FORMAT, "credential": raw}


# ------------------------------------------------------------------ issuing


def issue(identity: Identity, *, delegation_id: str, delegate: str, issued_at: int, expires_at: int,
          capabilities: Iterable[str] | None = None, actions: Iterable[str] | None = None,
          resources: Iterable[str] | None = None, constraints: dict[str, Any] | None = None,
          not_before: int | None = None, allow_subdelegation: bool = False, max_chain_depth: int | None = None,
          aud: Iterable[str] | None = None, nonce: bytes | None = None, kid: str | None = None) -> Credential:
    """Sign a credential from ``identity`` (the delegator) to ``delegate``.
    The result is parsed back, so what is issued is what a verifier reads."""
    scope: dict[str, Any] = {}
    for name, value in (("capabilities", capabilities), ("actions", actions), ("resources", resources)):
        if value is not None:
            scope[name] = sorted(set(value))
    if constraints is not None:
        scope["constraints"] = constraints
    validity: dict[str, Any] = {"issued_at": issued_at, "expires_at": expires_at}
    if not_before is not None:
        validity["not_before"] = not_before
    payload: dict[str, Any] = {"cred_v": CRED_V, "delegation_id": delegation_id, "delegator": identity.did,
                               "delegate": delegate, "scope": scope, "validity": validity}
    if allow_subdelegation:
        payload["allow_subdelegation"] = True
    if max_chain_depth is not None:
        payload["max_chain_depth"] = max_chain_depth
    if aud is not None:
        payload["aud"] = list(aud)
    if nonce is not None:
        payload["nonce"] = nonce
    raw = sign1(identity, dumps(payload), kid=kid or default_kid(identity.did))
    return parse_credential(raw)


def revoke(identity: Identity, *, delegation_id: str, revoked_at: int, reason: str | None = None) -> Revocation:
    payload: dict[str, Any] = {"rev_v": REV_V, "delegation_id": delegation_id, "delegator": identity.did,
                               "revoked_at": revoked_at}
    if reason is not None:
        payload["reason"] = reason
    return parse_revocation(sign1(identity, dumps(payload), kid=default_kid(identity.did)))


# ------------------------------------------------------------------ parsing


def _payload(signed: Signed, version_key: str, version: int, what: str) -> dict[str, Any]:
    # Deterministic CBOR is required (§2.2 issuer profile, §4.4): a payload
    # that re-encodes differently could mean two things to two verifiers.
    # Decoding strictly and re-encoding is the same test as walking the
    # bytes for shortest forms and key order, and several times faster.
    value = loads(signed.payload, PAYLOAD_LIMITS)
    if dumps(value) != signed.payload:
        raise AmpError(MALFORMED, f"{what} payload is not deterministic CBOR (RFC 8949 §4.2.1)")
    if not isinstance(value, dict):
        raise AmpError(MALFORMED, f"{what} payload must be a map")
    v = value.get(version_key)
    if v is None:
        raise AmpError(MALFORMED, f"{what} payload has no {version_key}", path=version_key)
    if v != version or isinstance(v, bool):
        raise AmpError(UNSUPPORTED, f"unsupported {version_key} {v!r:.20} (this verifier knows {version})")
    return value


def _text(value: dict[str, Any], key: str, *, did: bool = False) -> str:
    item = value.get(key)
    if not isinstance(item, str) or not item or len(item) > MAX_TEXT:
        raise AmpError(MALFORMED, f"{key} must be a non-empty string of at most {MAX_TEXT} characters", path=key)
    if did and ("#" in item or not did_url_ok(item)):
        raise AmpError(MALFORMED, f"{key} must be a DID", path=key)
    return item


def _uint(value: dict[str, Any], key: str, path: str, required: bool = True) -> int | None:
    if key not in value:
        if required:
            raise AmpError(MALFORMED, f"missing {path}", path=path)
        return None
    item = value[key]
    if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < 1 << 64:
        raise AmpError(MALFORMED, f"{path} must be an unsigned integer", path=path)
    return item


def parse_envelope(raw: Any, where: str = "credential") -> bytes:
    """A ``delegation-credential-envelope`` map → its COSE bytes (1001)."""
    if not isinstance(raw, dict):
        raise AmpError(MALFORMED, f"{where} must be a map with format and credential", path=where)
    if raw.get("format") != FORMAT:
        raise AmpError(MALFORMED, f"{where}.format must be \"{FORMAT}\"", path=f"{where}.format")
    cred = raw.get("credential")
    if not isinstance(cred, bytes):
        raise AmpError(MALFORMED, f"{where}.credential must be a byte string", path=f"{where}.credential")
    return cred


def parse_credential(raw: bytes) -> Credential:
    signed = decode_sign1(raw, "credential")
    value = _payload(signed, "cred_v", CRED_V, "credential")
    delegation_id = _text(value, "delegation_id")
    delegator = _text(value, "delegator", did=True)
    delegate = _text(value, "delegate", did=True)
    if "scope" not in value:
        raise AmpError(MALFORMED, "missing scope", path="scope")
    scope = parse_scope(value["scope"])
    validity = value.get("validity")
    if not isinstance(validity, dict):
        raise AmpError(MALFORMED, "validity must be a map", path="validity")
    issued_at = _uint(validity, "issued_at", "validity.issued_at")
    expires_at = _uint(validity, "expires_at", "validity.expires_at")
    not_before = _uint(validity, "not_before", "validity.not_before", required=False)
    assert issued_at is not None and expires_at is not None
    start = issued_at if not_before is None else not_before
    if expires_at <= start:
        raise AmpError(DELEGATION_INVALID, "credential expires before it becomes valid")
    allow = value.get("allow_subdelegation", False)
    if not isinstance(allow, bool):
        raise AmpError(MALFORMED, "allow_subdelegation must be a boolean", path="allow_subdelegation")
    depth = _uint(value, "max_chain_depth", "max_chain_depth", required=False)
    if depth is not None and depth < 1:
        raise AmpError(DELEGATION_INVALID, "max_chain_depth must be at least 1")
    aud: tuple[str, ...] | None = None
    if "aud" in value:
        raw_aud = value["aud"]
        if (not isinstance(raw_aud, list) or not raw_aud or len(raw_aud) > MAX_AUD
                or not all(isinstance(a, str) and "#" not in a and did_url_ok(a) for a in raw_aud)):
            raise AmpError(MALFORMED, f"aud must be a non-empty array of at most {MAX_AUD} DIDs", path="aud")
        aud = tuple(raw_aud)
    nonce = value.get("nonce")
    if nonce is not None and not isinstance(nonce, bytes):
        raise AmpError(MALFORMED, "nonce must be a byte string", path="nonce")
    return Credential(delegation_id=delegation_id, delegator=delegator, delegate=delegate, scope=scope,
                      issued_at=issued_at, not_before=start, expires_at=expires_at, allow_subdelegation=allow,
                      max_chain_depth=depth, aud=aud, nonce=nonce, signed=signed, raw=raw)


def parse_revocation(raw: Any) -> Revocation:
    signed = decode_sign1(raw, "revocation")
    value = _payload(signed, "rev_v", REV_V, "revocation")
    delegation_id = _text(value, "delegation_id")
    delegator = _text(value, "delegator", did=True)
    revoked_at = _uint(value, "revoked_at", "revoked_at")
    assert revoked_at is not None
    reason = value.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise AmpError(MALFORMED, "reason must be a string", path="reason")
    return Revocation(delegation_id=delegation_id, delegator=delegator, revoked_at=revoked_at, reason=reason,
                      signed=signed, raw=raw)
