"""``did:key`` for Ed25519 keys (ruling R2): multicodec ``0xed01`` prefix,
base58btc multibase (``z…``). Self-certifying, so it resolves with no setup.

The X25519 key agreement key of a did:key is the birationally equivalent
Curve25519 key of its Ed25519 key (as the did:key method specifies).
The base58 codec is small enough to keep here rather than add a dependency.
"""

from __future__ import annotations

import re

from nacl.bindings import crypto_sign_ed25519_pk_to_curve25519
from nacl.exceptions import CryptoError

from ..errors import AmpError

__all__ = ["b58encode", "b58decode", "did_key_from_ed25519", "ed25519_from_did_key", "x25519_from_did_key", "split_did_url",
           "is_did"]

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_ED25519_PUB = b"\xed\x01"
_X25519_PUB = b"\xec\x01"
_PREFIX = "did:key:z"
# A did:key for a 32-byte key is 48 base58 characters; anything much longer is not ours.
_MAX_KEY_CHARS = 128


def b58encode(data: bytes) -> str:
    zeros = len(data) - len(data.lstrip(b"\0"))
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, rem = divmod(n, 58)
        out.append(_ALPHABET[rem])
    return "1" * zeros + "".join(reversed(out))


def b58decode(text: str) -> bytes:
    n = 0
    for ch in text:
        digit = _INDEX.get(ch)
        if digit is None:
            raise ValueError(f"invalid base58 character {ch!r}")
        n = n * 58 + digit
    zeros = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


# W3C DID Core §3.1: "did:" method-name ":" method-specific-id, where the id is
# colon-separated runs of ALPHA / DIGIT / "." / "-" / "_" / %XX, the last one
# non-empty. RFC 001 §4.1 allows a DID URL naming a key (R2, §8.9): an
# optional "#fragment" of RFC 3986 characters. Neither leaves room for
# spaces, controls or bidi characters. Only the shape: whether a DID
# resolves is another question.
_ID_CHAR = r"(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})"
_DID = rf"did:[a-z0-9]+:(?:{_ID_CHAR}*:)*{_ID_CHAR}+"
_DID_RE = re.compile(_DID)
_DID_URL_RE = re.compile(_DID + r"(?:#(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?")


def is_did(text: str, *, fragment: bool = False) -> bool:
    """Is ``text`` a well-formed DID (with ``fragment``, also a DID URL
    naming a key, ``did:…#frag``)?"""
    return (_DID_URL_RE if fragment else _DID_RE).fullmatch(text) is not None


def split_did_url(did_url: str) -> tuple[str, str | None]:
    """``did:…#frag`` → (``did:…``, ``frag``); no fragment → (did, None)."""
    did, sep, fragment = did_url.partition("#")
    return did, (fragment if sep else None)


def did_key_from_ed25519(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return _PREFIX + b58encode(_ED25519_PUB + public_key)


def ed25519_from_did_key(did_url: str, *, _check_fragment: bool = True) -> bytes:
    """The Ed25519 key of a did:key (DID URL fragments, which for did:key
    repeat the key, must name that same key); ``AmpError(3001)`` otherwise."""
    did, fragment = split_did_url(did_url)
    if not _check_fragment:
        fragment = None
    if not did.startswith(_PREFIX) or len(did) > len(_PREFIX) + _MAX_KEY_CHARS:
        raise AmpError(3001, f"not an Ed25519 did:key: {did_url[:80]!r}")
    encoded = did[len(_PREFIX):]
    if fragment is not None and fragment != "z" + encoded:
        raise AmpError(3001, "did:key fragment does not name the DID's own key")
    try:
        raw = b58decode(encoded)
    except ValueError as exc:
        raise AmpError(3001, f"malformed did:key: {exc}") from exc
    if len(raw) != 34 or raw[:2] != _ED25519_PUB:
        raise AmpError(3001, "did:key is not an Ed25519 (0xed01) key")
    return raw[2:]


def x25519_from_did_key(did_url: str) -> bytes:
    """The key agreement key of a did:key. A fragment may name either the
    Ed25519 key or the derived X25519 key (multicodec 0xec01)."""
    did, fragment = split_did_url(did_url)
    ed = ed25519_from_did_key(did, _check_fragment=False)
    try:
        x = crypto_sign_ed25519_pk_to_curve25519(ed)
    except (CryptoError, ValueError) as exc:
        raise AmpError(3001, "did:key Ed25519 key has no X25519 equivalent") from exc
    if fragment is not None and fragment not in (did[len("did:key:"):], "z" + b58encode(_X25519_PUB + x)):
        raise AmpError(3001, "did:key fragment does not name one of the DID's keys")
    return x
