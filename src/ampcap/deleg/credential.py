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
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from ..errors import AmpError
from ..wire.cbor import dumps, dumps_in_order, loads
from ..wire.identity import Identity
from .cose import PAYLOAD_LIMITS, Signed, decode_sign1, default_kid, did_url_ok, sign1
from .scope import Scope, scope_from_wire

__all__ = ["Credential", "Revocation", "issue", "revoke", "parse_credential", "parse_envelope",
           "parse_revocation", "credential_envelope", "wire_fault", "CRED_V", "REV_V", "FORMAT"]

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


def _payload(signed: Signed, version_key: str, version: int, what: str, value: Any = None) -> dict[str, Any]:
    # Deterministic CBOR is required (§2.2 issuer profile, §4.4): a payload
    # that re-encodes differently could mean two things to two verifiers.
    # Decoding strictly and re-encoding is the same test as walking the
    # bytes for shortest forms and key order, and several times faster.
    # (``value``: the payload already decoded.)
    if value is None:
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


# The credential payload's types (§4.1, cddl/rfc005.cddl), checked by msgspec
# in one pass in C: a first-seen chain reads three of these, and a field-by-
# field check in Python cost more than decoding them. What a type cannot say
# (DID syntax, exact selectors, expiry after start) is checked after it. A
# field that may be absent but not null is UNSET by default, so null is
# refused as the wrong type; cbor2 gives no integer of 2**64 or more without a
# bignum tag, which is no int here, so ``ge=0`` is the whole uint range.
_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]
_UInt = Annotated[int, msgspec.Meta(ge=0)]
_Selectors = Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1)]


# CBOR carries byte strings natively: without this, msgspec would accept a
# base64 text where the payload needs bytes (``nonce``).
_NATIVE = (bytes,)


class _ScopeWire(msgspec.Struct, frozen=True):
    capabilities: _Selectors | UnsetType = UNSET
    actions: _Selectors | UnsetType = UNSET
    resources: _Selectors | UnsetType = UNSET
    constraints: dict[str, Any] | None = None


class _ValidityWire(msgspec.Struct, frozen=True):
    issued_at: _UInt
    expires_at: _UInt
    not_before: _UInt | UnsetType = UNSET


class _CredentialWire(msgspec.Struct, frozen=True):
    delegation_id: _Text
    delegator: _Text
    delegate: _Text
    scope: _ScopeWire
    validity: _ValidityWire
    allow_subdelegation: bool = False
    max_chain_depth: _UInt | UnsetType = UNSET
    aud: Annotated[list[_Text], msgspec.Meta(min_length=1, max_length=MAX_AUD)] | UnsetType = UNSET
    nonce: bytes | None = None


class _RevocationWire(msgspec.Struct, frozen=True):
    delegation_id: _Text
    delegator: _Text
    revoked_at: _UInt
    reason: str | None = None


_MISSING = "Object missing required field `"


def wire_fault(err: msgspec.ValidationError, what: str) -> AmpError:
    """msgspec's account of a field of ``what`` (``Expected `str`, got `int` -
    at `$.scope.actions[0]```) as 1001 with the field's path."""
    text = str(err)
    message, sep, where = text.rpartition(" - at ")
    if not sep:
        message = text
    path = where.strip("`").removeprefix("$").lstrip(".") if sep and where.startswith("`$") else ""
    if message.startswith(_MISSING):  # the path is the map's; the field belongs on it
        missing = message[len(_MISSING):].rstrip("`")
        path = f"{path}.{missing}" if path else missing
    return AmpError(MALFORMED, f"{what}: {message}", path=path or None)


# Payload maps whose keys are known fields in deterministic order, by their
# key tuple. For a credential whose three maps have such layouts and whose
# fields have the types msgspec checked (no floats, no maps but scope and
# validity; constraints, whose values can be anything, excluded), the plain
# encoding is the deterministic one, so the determinism proof is one encode
# in C instead of :func:`dumps`'s walk. Issuers repeat a few layouts; bounded.
_TOP_FIELDS = frozenset(("cred_v", *_CredentialWire.__struct_fields__))
_SCOPE_FIELDS = frozenset(("capabilities", "actions", "resources"))
_VALIDITY_FIELDS = frozenset(_ValidityWire.__struct_fields__)
_LAYOUTS: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], bool] = {}
_LAYOUTS_SIZE = 256


def _in_order(layout: tuple[str, ...], fields: frozenset[str]) -> bool:
    # All ASCII, so RFC 8949's byte order of the encoded keys is: shorter first, then by text.
    return set(layout) <= fields and list(layout) == sorted(layout, key=lambda k: (len(k), k))


def _ordered_layouts(value: dict[str, Any]) -> bool:
    """Are the payload's, its scope's and its validity's keys known fields
    in deterministic order? (Remembered by the three key tuples.)"""
    key = (tuple(value), tuple(value["scope"]), tuple(value["validity"]))
    known = _LAYOUTS.get(key)
    if known is None:
        known = (_in_order(key[0], _TOP_FIELDS) and _in_order(key[1], _SCOPE_FIELDS)
                 and _in_order(key[2], _VALIDITY_FIELDS))
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.clear()
        _LAYOUTS[key] = known
    return known


def _typed_payload(signed: Signed) -> _CredentialWire:
    """The payload decoded, proved deterministic, its version checked, then
    typed; the faults in :func:`_payload`'s order (1001, 1004), then msgspec's."""
    payload = signed.payload
    value = loads(payload, PAYLOAD_LIMITS)
    wire: _CredentialWire | None = None
    fault: msgspec.ValidationError | None = None
    if type(value) is dict:
        try:
            wire = msgspec.convert(value, _CredentialWire, builtin_types=_NATIVE)
        except msgspec.ValidationError as err:
            fault = err
        else:
            version = value.get("cred_v")
            if (type(version) is int and version == CRED_V and wire.scope.constraints is None
                    and _ordered_layouts(value) and dumps_in_order(value) == payload):
                return wire
    _payload(signed, "cred_v", CRED_V, "credential", value)  # the general proof and the version: 1001, 1004
    if fault is not None:
        raise wire_fault(fault, "credential payload")
    assert wire is not None  # _payload refused anything but a map
    return wire


def parse_credential(raw: bytes) -> Credential:
    signed = decode_sign1(raw, "credential")
    wire = _typed_payload(signed)
    for key, item in (("delegator", wire.delegator), ("delegate", wire.delegate)):
        if "#" in item or not did_url_ok(item):
            raise AmpError(MALFORMED, f"{key} must be a DID", path=key)
    scope = scope_from_wire(wire.scope.capabilities or None, wire.scope.actions or None,
                            wire.scope.resources or None, wire.scope.constraints)
    validity = wire.validity
    start = validity.issued_at if validity.not_before is UNSET else validity.not_before
    if validity.expires_at <= start:
        raise AmpError(DELEGATION_INVALID, "credential expires before it becomes valid")
    depth = None if wire.max_chain_depth is UNSET else wire.max_chain_depth
    if depth is not None and depth < 1:
        raise AmpError(DELEGATION_INVALID, "max_chain_depth must be at least 1")
    aud: tuple[str, ...] | None = None
    if wire.aud is not UNSET:
        if not all("#" not in a and did_url_ok(a) for a in wire.aud):
            raise AmpError(MALFORMED, f"aud must be a non-empty array of at most {MAX_AUD} DIDs", path="aud")
        aud = tuple(wire.aud)
    return Credential(delegation_id=wire.delegation_id, delegator=wire.delegator, delegate=wire.delegate,
                      scope=scope, issued_at=validity.issued_at, not_before=start, expires_at=validity.expires_at,
                      allow_subdelegation=wire.allow_subdelegation, max_chain_depth=depth, aud=aud,
                      nonce=wire.nonce, signed=signed, raw=raw)


def parse_revocation(raw: Any) -> Revocation:
    signed = decode_sign1(raw, "revocation")
    value = _payload(signed, "rev_v", REV_V, "revocation")
    try:
        wire = msgspec.convert(value, _RevocationWire, builtin_types=_NATIVE)
    except msgspec.ValidationError as err:
        raise wire_fault(err, "revocation payload") from None
    if "#" in wire.delegator or not did_url_ok(wire.delegator):
        raise AmpError(MALFORMED, "delegator must be a DID", path="delegator")
    return Revocation(delegation_id=wire.delegation_id, delegator=wire.delegator, revoked_at=wire.revoked_at,
                      reason=wire.reason, signed=signed, raw=raw)
