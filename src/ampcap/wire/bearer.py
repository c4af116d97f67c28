"""The HTTP and WebSocket bearer token (ruling R21), sans-I/O.

RFC 002 §6.1 names ``Authorization: Bearer <token>`` but no token format.
ampcap's is a compact JWS (RFC 7515) signed with the caller's Ed25519 key
(``alg`` ``EdDSA``, RFC 8037) whose claims are ``iss`` (the caller's DID),
``aud`` (the server's DID), ``iat``, ``exp`` (seconds; at most 5 minutes
after ``iat``) and ``jti``. The server resolves ``iss`` like any sender
(did:key, or the keyring), and the DID that passes is the transport
principal (§7.1).

Written here rather than taken from a JOSE library: the token has one fixed
shape, and the checks that matter (``alg`` pinned to EdDSA, no ``crit``,
bounded sizes, the key found by our own resolver) are a few lines over the
Ed25519 primitives ampcap already uses for every message. A library would
accept more than this shape and need its own key objects.

Time is an argument (Unix milliseconds, like the rest of the core);
entropy (the ``jti``) is injected.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import AmpError
from .didkey import is_did
from .identity import Identity, KeyResolver
from .signing import verify_signature

__all__ = ["mint", "verify", "verify_until", "MAX_LIFETIME_S", "MAX_TOKEN_CHARS", "DEFAULT_LIFETIME_S"]

MAX_LIFETIME_S = 300  # R21: exp at most 5 minutes after iat
DEFAULT_LIFETIME_S = 240  # what mint() gives: inside the limit with room for clock skew
MAX_TOKEN_CHARS = 4096  # a DID pair and five claims fit many times over
_HEADER = {"alg": "EdDSA", "typ": "JWT"}
_AUTH = 3001  # RFC 002 §8.1: auth failure
_B64URL = re.compile(r"[A-Za-z0-9_-]+")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    if _B64URL.fullmatch(text) is None:
        raise AmpError(_AUTH, f"bearer token: the {what} is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise AmpError(_AUTH, f"bearer token: the {what} is not base64url") from None


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise AmpError(_AUTH, f"bearer token: the {what} is not JSON") from None
    if type(value) is not dict:
        raise AmpError(_AUTH, f"bearer token: the {what} is not a JSON object")
    return value


def mint(identity: Identity, audience: str, *, now_ms: int, entropy: Callable[[int], bytes],
         lifetime_s: int = DEFAULT_LIFETIME_S) -> str:
    """A token naming ``identity`` as the principal, for the server ``audience``."""
    if not 0 < lifetime_s <= MAX_LIFETIME_S:
        raise ValueError(f"lifetime_s must be from 1 to {MAX_LIFETIME_S}")
    iat = now_ms // 1000
    claims = {"iss": identity.did, "aud": audience, "iat": iat, "exp": iat + lifetime_s,
              "jti": entropy(12).hex()}
    signing_input = (_b64(json.dumps(_HEADER, separators=(",", ":")).encode()) + "."
                     + _b64(json.dumps(claims, separators=(",", ":")).encode()))
    return signing_input + "." + _b64(identity.sign(signing_input.encode("ascii")))


def verify(token: str, *, resolver: KeyResolver, audience: str, now_ms: int, max_skew_ms: int = 30_000) -> str:
    """The principal DID ``token`` proves, or ``AmpError(3001)`` saying why not."""
    return verify_until(token, resolver=resolver, audience=audience, now_ms=now_ms, max_skew_ms=max_skew_ms)[0]


def verify_until(token: str, *, resolver: KeyResolver, audience: str, now_ms: int,
                 max_skew_ms: int = 30_000) -> tuple[str, int]:
    """Like :func:`verify`, with the instant (ms) after which the token no
    longer passes, so a server may remember a verified token until then."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise AmpError(_AUTH, "bearer token missing or too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise AmpError(_AUTH, "bearer token is not a compact JWS (three dot-separated parts)")
    header = _json_object(_unb64(parts[0], "header"), "header")
    if header.get("alg") != "EdDSA":
        raise AmpError(_AUTH, "bearer token: alg must be EdDSA (R21)")
    if "crit" in header:
        raise AmpError(_AUTH, "bearer token: critical header extensions are not supported")
    claims = _json_object(_unb64(parts[1], "claims"), "claims")
    signature = _unb64(parts[2], "signature")
    iss, aud, iat, exp = claims.get("iss"), claims.get("aud"), claims.get("iat"), claims.get("exp")
    if type(iss) is not str or not is_did(iss):
        raise AmpError(_AUTH, "bearer token: iss must be the caller's DID")
    audiences = aud if type(aud) is list else [aud]
    if audience not in audiences:
        raise AmpError(_AUTH, "bearer token: aud does not name this agent")
    if type(iat) is not int or type(exp) is not int:
        raise AmpError(_AUTH, "bearer token: iat and exp must be integers (seconds)")
    if not 0 < exp - iat <= MAX_LIFETIME_S:
        raise AmpError(_AUTH, f"bearer token: exp must be after iat and at most {MAX_LIFETIME_S} s after it")
    if now_ms > exp * 1000 + max_skew_ms:
        raise AmpError(_AUTH, "bearer token expired")
    if now_ms < iat * 1000 - max_skew_ms:
        raise AmpError(_AUTH, "bearer token issued in the future (check the clocks)")
    key = resolver.ed25519_for(iss)  # 3001 when it cannot be resolved (R2)
    if not verify_signature(key, (parts[0] + "." + parts[1]).encode("ascii"), signature):
        raise AmpError(_AUTH, "bearer token: the signature does not verify")
    return iss, exp * 1000 + max_skew_ms
