"""DELEG_GRANT, DELEG_REVOKE and DELEG_QUERY bodies (RFC 005 §5.4): parsed
requests and built replies. Shape faults are 1001; the revoke body's
``delegation_id`` must equal the signed one (4001, §5.2, A.13)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.didkey import is_did
from .credential import Credential, Revocation, parse_credential, parse_envelope, parse_revocation

__all__ = ["GrantRequest", "RevokeRequest", "QueryRequest", "parse_grant_body", "parse_revoke_body",
           "parse_query_body", "grant_body", "revoke_body", "query_body"]

MALFORMED, BAD_REQUEST = 1001, 4001
MAX_ID = 512


class GrantRequest(msgspec.Struct, frozen=True, kw_only=True):
    credential: Credential


class RevokeRequest(msgspec.Struct, frozen=True, kw_only=True):
    revocation: Revocation


class QueryRequest(msgspec.Struct, frozen=True, kw_only=True):
    delegation_id: str
    delegator: str | None
    as_of: int | None


def _map(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise AmpError(MALFORMED, f"{what} body must be a map", path="body")
    return body


def _id(body: dict[str, Any]) -> str:
    value = body.get("delegation_id")
    if not isinstance(value, str) or not value or len(value) > MAX_ID:
        raise AmpError(MALFORMED if not isinstance(value, str) else BAD_REQUEST,
                       "delegation_id must be a non-empty string", path="body.delegation_id")
    return value


def parse_grant_body(body: Any) -> GrantRequest:
    """§5.1: exactly one credential envelope (legacy ``scope``/``expires`` ignored)."""
    raw = parse_envelope(_map(body, "DELEG_GRANT").get("credential"), "body.credential")
    return GrantRequest(credential=parse_credential(raw))


def parse_revoke_body(body: Any) -> RevokeRequest:
    body = _map(body, "DELEG_REVOKE")
    delegation_id = _id(body)
    if not isinstance(body.get("revocation"), bytes):
        raise AmpError(MALFORMED, "revocation must be a byte string (COSE_Sign1)", path="body.revocation")
    revocation = parse_revocation(body["revocation"])
    if revocation.delegation_id != delegation_id:
        raise AmpError(BAD_REQUEST, "delegation_id differs from the signed revocation's", path="body.delegation_id")
    return RevokeRequest(revocation=revocation)


def parse_query_body(body: Any) -> QueryRequest:
    body = _map(body, "DELEG_QUERY")
    delegation_id = _id(body)
    delegator = body.get("delegator")
    if delegator is not None and (not isinstance(delegator, str) or not is_did(delegator)):
        raise AmpError(MALFORMED, "delegator must be a DID", path="body.delegator")
    as_of = body.get("as_of")
    if as_of is not None and (not isinstance(as_of, int) or isinstance(as_of, bool) or as_of < 0):
        raise AmpError(MALFORMED, "as_of must be an unsigned integer", path="body.as_of")
    return QueryRequest(delegation_id=delegation_id, delegator=delegator, as_of=as_of)


def grant_body(credential: Credential) -> dict[str, Any]:
    return {"credential": credential.envelope()}


def revoke_body(revocation: Revocation) -> dict[str, Any]:
    return {"delegation_id": revocation.delegation_id, "revocation": revocation.raw}


def query_body(delegation_id: str, delegator: str | None = None, as_of: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"delegation_id": delegation_id}
    if delegator is not None:
        out["delegator"] = delegator
    if as_of is not None:
        out["as_of"] = as_of
    return out
