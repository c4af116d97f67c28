"""Descriptor signatures: COSE_Sign1 over a descriptor (RFC 004 §5.2).

Form produced (RFC 9052 §4.2)::

    18([ h'A10127',        # protected: bstr of {1: -8}  (alg: EdDSA)
         {} / {4: kid},     # unprotected: optional key id
         nil,               # payload: DETACHED
         signature ])       # Ed25519 over Sig_structure

    Sig_structure = ["Signature1", h'A10127', h'', payload]
    payload       = deterministic CBOR of the descriptor map without
                    "descriptor_sig"

Why detached: the signature travels *inside* the descriptor it signs, so an
embedded payload would carry the whole descriptor twice in every
CAP_DECLARE. The verifier rebuilds the payload from the descriptor it holds.
For interoperability the verifier also accepts an embedded payload, provided
it is byte-identical to the rebuilt one (otherwise the signature would vouch
for something other than what is declared). Tag 18 is written and optional
on input.

Key policy: the signer must be the namespace owner; ``resolve_key(name)``
maps a capability name to the owner's Ed25519 public key(s) (from the
owner DID's ``assertionMethod``, resolved by the caller; nothing is fetched
here). Every failure — unresolvable key, missing signature under the public
profile, malformed COSE, wrong algorithm, bad signature — is 3001.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import cbor2
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from ..errors import AmpError
from .descriptor import Descriptor

__all__ = [
    "TrustProfile",
    "KeyResolver",
    "COSE_SIGN1_TAG",
    "signing_payload",
    "sign_descriptor",
    "verify_descriptor",
]

UNAUTHORIZED = 3001
COSE_SIGN1_TAG = 18
_ALG_EDDSA = -8
_PROTECTED = cbor2.dumps({1: _ALG_EDDSA})  # h'A10127', fixed for EdDSA
_MAX_SIG_BYTES = 4096

# RFC 8949 deterministic encoding (ruling R1) and the strict decoder, which
# refuses duplicate keys, indefinite lengths and trailing bytes.
from ..wire.cbor import dumps as _dumps
from ..wire.cbor import loads as _strict_loads

# A resolver gets the capability name and returns the namespace owner's
# public key (32 bytes) or several (key rotation); it may raise AmpError(3001)
# or return None when the owner is unknown.
KeyResolver = Callable[[str], "bytes | Iterable[bytes] | None"]


class TrustProfile(enum.Enum):
    PRIVATE = "private"  # default: signature optional, verified when present
    PUBLIC = "public"  # cross-organisation: signature required


def signing_payload(descriptor: Descriptor) -> bytes:
    """Deterministic CBOR of the descriptor with ``descriptor_sig`` omitted."""
    return _dumps(descriptor.to_wire(include_sig=False))


def _sig_structure(payload: bytes) -> bytes:
    return _dumps(["Signature1", _PROTECTED, b"", payload])


def sign_descriptor(descriptor: Descriptor, seed: bytes, *, kid: bytes | None = None) -> Descriptor:
    """Return a copy of ``descriptor`` carrying a detached COSE_Sign1 made
    with the Ed25519 key whose 32-byte seed is ``seed``."""
    if len(seed) != 32:
        raise ValueError("Ed25519 seed must be 32 bytes")
    signature = SigningKey(seed).sign(_sig_structure(signing_payload(descriptor))).signature
    unprotected: dict[int, Any] = {} if kid is None else {4: kid}
    cose = cbor2.CBORTag(COSE_SIGN1_TAG, [_PROTECTED, unprotected, None, signature])
    return descriptor.with_signature(_dumps(cose))


def _fail(message: str, path: str) -> AmpError:
    return AmpError(UNAUTHORIZED, message, path=f"{path}.descriptor_sig" if path else "descriptor_sig")


def _decode(sig: bytes, path: str) -> list[Any]:
    if len(sig) > _MAX_SIG_BYTES:
        raise _fail("descriptor_sig too large", path)
    try:
        obj = _strict_loads(sig)
    except Exception:
        raise _fail("descriptor_sig is not valid CBOR", path) from None
    if isinstance(obj, cbor2.CBORTag):
        if obj.tag != COSE_SIGN1_TAG:
            raise _fail(f"descriptor_sig has tag {obj.tag}, expected COSE_Sign1 (18)", path)
        obj = obj.value
    # Decoders may hand back tuples / read-only mappings: accept both forms.
    if not (isinstance(obj, (list, tuple)) and len(obj) == 4):
        raise _fail("descriptor_sig is not a COSE_Sign1 array", path)
    protected, unprotected, payload, signature = obj
    if not isinstance(protected, bytes) or not isinstance(unprotected, Mapping) \
            or not (payload is None or isinstance(payload, bytes)) or not isinstance(signature, bytes):
        raise _fail("descriptor_sig has malformed COSE_Sign1 fields", path)
    return list(obj)


def _keys(resolve_key: KeyResolver, name: str, path: str) -> list[bytes]:
    try:
        found = resolve_key(name)
    except AmpError as exc:
        raise _fail(f"namespace owner key unresolved: {exc.message}", path) from None
    except LookupError:
        found = None
    if found is None:
        raise _fail(f"no namespace owner key for {name!r}", path)
    keys = [found] if isinstance(found, bytes) else list(found)
    if not keys or any(not isinstance(k, bytes) or len(k) != 32 for k in keys):
        raise _fail(f"namespace owner key for {name!r} is not an Ed25519 public key", path)
    return keys


def verify_descriptor(
    descriptor: Descriptor,
    resolve_key: KeyResolver | None,
    *,
    profile: TrustProfile = TrustProfile.PRIVATE,
    path: str = "",
) -> bool:
    """Check ``descriptor.descriptor_sig``.

    Returns True when a signature verified, False when there is none and the
    profile allows that (private). Raises ``AmpError(3001)`` otherwise; a
    present signature must verify under every profile (§4.2).
    """
    sig = descriptor.descriptor_sig
    if sig is None:
        if profile is TrustProfile.PUBLIC:
            raise _fail("Public Registry Trust Profile requires descriptor_sig", path)
        return False
    protected, _unprotected, payload, signature = _decode(sig, path)
    try:
        header = cbor2.loads(protected) if protected else {}
    except Exception:
        raise _fail("descriptor_sig protected header is not valid CBOR", path) from None
    if not isinstance(header, Mapping) or header.get(1) != _ALG_EDDSA:
        raise _fail("descriptor_sig must use alg EdDSA (-8) in the protected header", path)
    expected = signing_payload(descriptor)
    if payload is not None and payload != expected:
        raise _fail("descriptor_sig embedded payload differs from the descriptor", path)
    if resolve_key is None:
        raise _fail("no key resolver configured for descriptor signatures", path)
    to_verify = _dumps(["Signature1", protected, b"", expected])
    for key in _keys(resolve_key, descriptor.name, path):
        try:
            VerifyKey(key).verify(to_verify, signature)
            return True
        except (BadSignatureError, CryptoError, ValueError):
            continue
    raise _fail("descriptor_sig does not verify under the namespace owner key", path)
