"""Sig_Input and Ed25519 signatures (RFC 001 §8.1–8.2).

Sig_Input is the array ``["AMP-v1", h'', signed-headers, bstr(body_bytes)]``.
It is written here byte by byte: the signed headers are text keys of known
length, so their deterministic order is static and no generic encoder is
needed on the hot path.

``Profile.RUST_EXAMPLE`` swaps the second element for the integer 1, which is
what the public Rust example signs (ruling R15); it exists only so the compat
profile can talk to that implementation.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError, CryptoError

__all__ = ["Profile", "SIG_CONTEXT", "sig_input", "sig_input_from_fields", "verify_signature", "Signer"]

SIG_CONTEXT = "AMP-v1"


class Profile(enum.Enum):
    """Which Sig_Input variant to sign and verify with."""

    RFC = "rfc"
    RUST_EXAMPLE = "rust-example"

    @property
    def protected(self) -> bytes | int:
        """The second Sig_Input element for this profile."""
        return b"" if self is Profile.RFC else 1


class Signer(Protocol):
    """Anything that can produce an Ed25519 signature (an Identity)."""

    def sign(self, message: bytes) -> bytes: ...


def _head(major: int, n: int) -> bytes:
    """A CBOR head in its shortest form."""
    if n < 24:
        return _SMALL_HEADS[major][n]
    if n < 0x100:
        return bytes(((major << 5) | 24, n))
    if n < 0x10000:
        return bytes(((major << 5) | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes(((major << 5) | 26,)) + n.to_bytes(4, "big")
    return bytes(((major << 5) | 27,)) + n.to_bytes(8, "big")


_SMALL_HEADS = [[bytes(((major << 5) | n,)) for n in range(24)] for major in range(8)]


_DID_CACHE: dict[str, bytes] = {}
_DID_CACHE_SIZE = 1024


def _text(value: str) -> bytes:
    # DIDs repeat from message to message: remember their encodings (bounded).
    encoded = _DID_CACHE.get(value)
    if encoded is None:
        raw = value.encode("utf-8")
        encoded = _head(3, len(raw)) + raw
        if len(_DID_CACHE) >= _DID_CACHE_SIZE:
            _DID_CACHE.clear()
        _DID_CACHE[value] = encoded
    return encoded


def _bstr(value: bytes) -> bytes:
    return _head(2, len(value)) + value


_PREFIX = {
    Profile.RFC: b"\x84\x66AMP-v1\x40",  # ["AMP-v1", h'', …
    Profile.RUST_EXAMPLE: b"\x84\x66AMP-v1\x01",  # ["AMP-v1", 1, …
}
_K_ID, _K_TO, _K_TS, _K_TTL, _K_TYP, _K_FROM = b"\x62id", b"\x62to", b"\x62ts", b"\x63ttl", b"\x63typ", b"\x64from"
_K_REPLY_TO, _K_THREAD_ID = b"\x68reply_to", b"\x69thread_id"


def sig_input_from_fields(*, id: bytes, typ: int, ts: int, ttl: int, sender: str,
                          to: str | tuple[str, ...] | list[str], reply_to: bytes | None,
                          thread_id: bytes | None, body_bytes: bytes,
                          profile: Profile = Profile.RFC) -> bytes:
    """The CBOR bytes of Sig_Input. ``body_bytes`` is the deterministic body
    encoding (or, for encrypted messages, the decrypted bytes as received).
    Absent ``reply_to``/``thread_id`` are left out, never written as null.

    Written byte by byte: every header key is text of fixed length, so the
    deterministic order is static (id, to, ts, ttl, typ, from, reply_to,
    thread_id) and this is several times cheaper than a generic encoder call.
    """
    if type(to) is str:
        to_bytes = _text(to)
    else:
        to_bytes = _head(4, len(to)) + b"".join([_text(t) for t in to])
    count = 6
    tail = b""
    if reply_to is not None:
        count += 1
        tail = _K_REPLY_TO + _bstr(reply_to)
    if thread_id is not None:
        count += 1
        tail += _K_THREAD_ID + _bstr(thread_id)
    if typ < 0 or ts < 0 or ttl < 0:
        raise ValueError("Sig_Input integers are unsigned")
    return b"".join((
        _PREFIX[profile], _SMALL_HEADS[5][count],
        _K_ID, _bstr(id), _K_TO, to_bytes, _K_TS, _head(0, ts), _K_TTL, _head(0, ttl),
        _K_TYP, _head(0, typ), _K_FROM, _text(sender), tail,
        _head(2, len(body_bytes)), body_bytes,
    ))


def sig_input(env: Any, body_bytes: bytes, *, profile: Profile = Profile.RFC) -> bytes:
    """Sig_Input for an :class:`~ampcap.wire.envelope.Envelope`."""
    return sig_input_from_fields(
        id=env.id, typ=env.typ, ts=env.ts, ttl=env.ttl, sender=env.sender, to=env.to,
        reply_to=env.reply_to, thread_id=env.thread_id, body_bytes=body_bytes, profile=profile,
    )


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Ed25519 verification without building a VerifyKey object (PyNaCl's
    binding wants ``sig || msg``)."""
    if len(signature) != 64 or len(public_key) != 32:
        return False
    try:
        crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True
