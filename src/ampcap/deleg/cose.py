"""COSE_Sign1 (RFC 9052 §4.2) for delegation artifacts, RFC 005 §4.5.

Credentials and revocations are signed the same way:

* the protected header is the deterministic CBOR map ``{1: -8, 4: kid}``:
  ``alg`` -8 (EdDSA over Ed25519, the only algorithm of the MTI profile) and
  ``kid``, the UTF-8 bytes of the signer's DID URL (``did:key:z…#z…``);
* the unprotected header is an empty map (anything in it is ignored: it is
  not signed, so it may not decide anything);
* the payload is the deterministic CBOR of the credential (or revocation)
  payload map, carried attached;
* the signature is Ed25519 over ``Sig_structure = ["Signature1", protected,
  h'', payload]`` (no external AAD).

The array is written with tag 18 (COSE_Sign1_Tagged); untagged arrays are
accepted too, since RFC 005 §4.4 names the format in the envelope.
``docs/delegation.md`` says how ``kid`` is resolved.

Everything here is bounded: an artifact is decoded with small
:class:`~ampcap.wire.cbor.DecodeLimits` before anything else looks at it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.cbor import CBORTag, DecodeLimits, bytes_item, dumps, loads
from ..wire.didkey import is_did, split_did_url
from ..wire.identity import Identity, KeyResolver
from ..wire.signing import verify_signature

__all__ = ["ALG_EDDSA", "COSE_SIGN1_TAG", "MAX_ARTIFACT_BYTES", "Signed", "decode_sign1", "sign1", "verify_sign1"]

MALFORMED, UNSUPPORTED, DELEGATION_INVALID = 1001, 1004, 3004
ALG_EDDSA = -8
COSE_SIGN1_TAG = 18
_ALG, _CRIT, _KID = 1, 2, 4

MAX_ARTIFACT_BYTES = 8 * 1024
"""One credential or revocation, encoded; a chain is a few of them."""

# A COSE_Sign1 is a 4-array holding two small maps: nothing nests deeper.
# (max_items = max_bytes: an item takes at least a byte, so the byte bound
# already bounds the items, and loads skips its slower item count.)
_OUTER_LIMITS = DecodeLimits(max_depth=4, max_items=MAX_ARTIFACT_BYTES, max_bytes=MAX_ARTIFACT_BYTES)
_HEADER_LIMITS = DecodeLimits(max_depth=2, max_items=512, max_bytes=512)
PAYLOAD_LIMITS = DecodeLimits(max_depth=5, max_items=MAX_ARTIFACT_BYTES, max_bytes=MAX_ARTIFACT_BYTES)


class Signed(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded COSE_Sign1, not yet verified."""

    protected: bytes
    """The protected header as sent (it is what the signature covers)."""
    kid: str
    """The signer's DID URL, from the protected ``kid``."""
    payload: bytes
    signature: bytes

    @property
    def signer_did(self) -> str:
        return split_did_url(self.kid)[0]

    def to_be_signed(self) -> bytes:
        return _sig_structure(self.protected, self.payload)


# array(4), text(10) "Signature1": the fixed start of every Sig_structure.
_SIG1_PREFIX = b"\x84\x6aSignature1"


def _sig_structure(protected: bytes, payload: bytes) -> bytes:
    # ["Signature1", protected, h'', payload] written directly: the same bytes
    # as dumps() of that array (a test checks), without its generic walk.
    return b"".join((_SIG1_PREFIX, bytes_item(protected), b"\x40", bytes_item(payload)))


def protected_header(kid: str) -> bytes:
    return dumps({_ALG: ALG_EDDSA, _KID: kid.encode("utf-8")})


def sign1(identity: Identity, payload: bytes, *, kid: str | None = None) -> bytes:
    """COSE_Sign1_Tagged over ``payload``, signed by ``identity``; ``kid``
    defaults to the identity's did:key URL (``did#z…``, the key itself)."""
    if kid is None:
        kid = default_kid(identity.did)
    protected = protected_header(kid)
    signature = identity.sign(_sig_structure(protected, payload))
    return dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, payload, signature]))


def default_kid(did: str) -> str:
    """The DID URL of a DID's signing key: for did:key the fragment repeats
    the key (``did:key:zX#zX``); other DIDs name their ``#ed25519`` method,
    which the keyring resolves to the DID's one Ed25519 key."""
    if did.startswith("did:key:"):
        return f"{did}#{did[len('did:key:'):]}"
    return f"{did}#ed25519"


_DID_MEMO: dict[str, bool] = {}
_DID_MEMO_SIZE = 4096


def did_url_ok(text: str) -> bool:
    """:func:`~ampcap.wire.didkey.is_did` (DID URLs allowed), remembered: the
    grammar's regular expression costs more than the rest of a credential's
    parse, and chains repeat the same few DIDs. Bounded (cleared when full)."""
    known = _DID_MEMO.get(text)
    if known is None:
        known = is_did(text, fragment=True)
        if len(_DID_MEMO) >= _DID_MEMO_SIZE:
            _DID_MEMO.clear()
        _DID_MEMO[text] = known
    return known


def _resolve(resolver: KeyResolver, kid: str) -> bytes:
    # did:key: the fragment must name the DID's own key (the resolver checks).
    # Other DIDs: the keyring's entry for the exact DID URL when it has one,
    # else its one Ed25519 key for the DID (a keyring lists one key per DID).
    if kid.startswith("did:key:"):
        return resolver.ed25519_for(kid)
    try:
        return resolver.ed25519_for(kid)
    except AmpError:
        return resolver.ed25519_for(split_did_url(kid)[0])


def decode_sign1(data: Any, what: str = "credential") -> Signed:
    """Shape of a COSE_Sign1 and its protected header. 1001 for what is no
    COSE_Sign1; 3004 for a missing or unsupported algorithm (§4.5, A.16), a
    critical header we do not understand, or a ``kid`` that is no DID URL."""
    if not isinstance(data, bytes):
        raise AmpError(MALFORMED, f"{what} must be a byte string (COSE_Sign1)")
    if len(data) > MAX_ARTIFACT_BYTES:
        raise AmpError(MALFORMED, f"{what} is {len(data)} bytes; at most {MAX_ARTIFACT_BYTES} are accepted")
    parts = _usual_sign1(data)
    if parts is not None:
        protected, payload, signature = parts
    else:
        protected, payload, signature = _decoded_sign1(data, what)
    kid_text = _HEADERS.get(protected)
    if kid_text is None:
        kid_text = _protected_kid(protected, what)
        if len(_HEADERS) >= _HEADERS_SIZE:
            _HEADERS.clear()
        _HEADERS[protected] = kid_text
    return Signed(protected=protected, kid=kid_text, payload=payload, signature=signature)


def _decoded_sign1(data: bytes, what: str) -> tuple[bytes, bytes, bytes]:
    """A COSE_Sign1 through the CBOR decoder: every shape, every fault named."""
    item = loads(data, _OUTER_LIMITS)
    if isinstance(item, CBORTag):
        if item.tag != COSE_SIGN1_TAG:
            raise AmpError(MALFORMED, f"{what} has CBOR tag {item.tag}; COSE_Sign1 is tag 18")
        item = item.value  # decoded immutable: a tuple holding a frozendict
    if not isinstance(item, (list, tuple)) or len(item) != 4:
        raise AmpError(MALFORMED, f"{what} is not a COSE_Sign1 array of four items")
    protected, unprotected, payload, signature = item
    if not isinstance(protected, bytes) or not hasattr(unprotected, "items"):  # a map (cbor2's frozendict in a tag)
        raise AmpError(MALFORMED, f"{what}: COSE headers must be a byte string and a map")
    if not isinstance(payload, bytes):
        raise AmpError(MALFORMED, f"{what}: the payload must be attached (a byte string)")
    if not isinstance(signature, bytes):
        raise AmpError(MALFORMED, f"{what}: the signature must be a byte string")
    return protected, payload, signature


def _byte_string(data: bytes, pos: int) -> tuple[bytes, int]:
    """The definite-length byte string whose head is at ``pos``, and where
    the next item starts. IndexError/ValueError when there is none."""
    first = data[pos]
    if first >> 5 != 2:
        raise ValueError
    n = first & 31
    pos += 1
    if n >= 24:
        if n > 27:  # 28-30 reserved, 31 indefinite: the decoder says what is wrong
            raise ValueError
        width = 1 << (n - 24)
        if pos + width > len(data):
            raise IndexError
        n = int.from_bytes(data[pos:pos + width], "big")
        pos += width
    end = pos + n
    if end > len(data):
        raise IndexError
    return data[pos:end], end


def _usual_sign1(data: bytes) -> tuple[bytes, bytes, bytes] | None:
    """What every issuer writes (and :func:`sign1` does): tag 18, an array
    of four, byte strings around an empty unprotected map, nothing after.
    Read directly, it yields what the decoder would (its byte strings, and
    it takes the same lengths in any head width); anything else is None
    and goes through :func:`_decoded_sign1`. A first-seen chain reads three
    of these; the decoder's generality costs more than all the slicing."""
    if data[:2] != b"\xd2\x84":
        return None
    try:
        protected, pos = _byte_string(data, 2)
        if data[pos:pos + 1] != b"\xa0":
            return None
        payload, pos = _byte_string(data, pos + 1)
        signature, pos = _byte_string(data, pos)
    except (IndexError, ValueError):
        return None
    if pos != len(data):
        return None
    return protected, payload, signature


# Protected headers that passed :func:`_protected_kid` → their kid. A
# signer's header is the same bytes in every credential it issues, so a chain
# of known delegators skips the header's decoding and checks (only the
# accepted ones are kept; bounded, cleared when full).
_HEADERS: dict[bytes, str] = {}
_HEADERS_SIZE = 4096


def _protected_kid(protected: bytes, what: str) -> str:
    """The protected header's checks (§4.5); its kid as text."""
    header = loads(protected, _HEADER_LIMITS) if protected else {}
    if not isinstance(header, dict):
        raise AmpError(MALFORMED, f"{what}: the protected header is not a map")
    alg = header.get(_ALG)
    if alg is None:
        raise AmpError(DELEGATION_INVALID, f"{what}: the protected header names no algorithm")
    if alg != ALG_EDDSA or isinstance(alg, bool):
        raise AmpError(DELEGATION_INVALID, f"{what}: signature algorithm {alg!r:.40} is not supported (only EdDSA, -8)")
    if _CRIT in header:
        raise AmpError(DELEGATION_INVALID, f"{what}: critical header parameters are not supported")
    kid = header.get(_KID)
    if not isinstance(kid, bytes):
        raise AmpError(DELEGATION_INVALID, f"{what}: the protected header has no kid (the signer's DID URL)")
    try:
        kid_text = kid.decode("utf-8")
    except UnicodeDecodeError:
        raise AmpError(DELEGATION_INVALID, f"{what}: kid is not UTF-8") from None
    if not did_url_ok(kid_text):
        raise AmpError(DELEGATION_INVALID, f"{what}: kid is not a DID URL")
    return kid_text


def verify_sign1(signed: Signed, resolver: KeyResolver, *, signer: str, what: str = "credential") -> None:
    """Signer binding and signature (RFC 005 §4.4, §6.1 step 4): the kid's
    DID must be ``signer`` (the payload's delegator) and resolve to a key
    that verifies. Every failure is 3004."""
    if signed.signer_did != signer:
        raise AmpError(DELEGATION_INVALID, f"{what} is signed by another DID than its delegator")
    try:
        key = _resolve(resolver, signed.kid)
    except AmpError:
        raise AmpError(DELEGATION_INVALID, f"{what}: the signer's key cannot be resolved") from None
    if not verify_signature(key, signed.to_be_signed(), signed.signature):
        raise AmpError(DELEGATION_INVALID, f"{what}: signature does not verify")
