"""Sig_Input and Ed25519 signatures (RFC 001 §8.1–8.2).

Sig_Input is the array ``["AMP-v1", h'', signed-headers, bstr(body_bytes)]``.
It is written here byte by byte (:class:`SignedHeaders`): the signed headers
are text keys of known length, so their deterministic order is static and no
generic encoder is needed on the hot path.

``Profile.RUST_EXAMPLE`` swaps the second element for the integer 1, which is
what the public Rust example signs (ruling R15); it exists only so the compat
profile can talk to that implementation.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError, CryptoError

from .cbor import bytes_item, head, text_item, uint_item

__all__ = ["Profile", "SIG_CONTEXT", "SignedHeaders", "signed_headers", "sig_input", "sig_input_of",
           "sig_input_from_fields", "verify_signature"]

SIG_CONTEXT = "AMP-v1"


class Profile(enum.Enum):
    """Which Sig_Input variant to sign and verify with."""

    RFC = "rfc"
    RUST_EXAMPLE = "rust-example"

    @property
    def protected(self) -> bytes | int:
        """The second Sig_Input element for this profile."""
        return b"" if self is Profile.RFC else 1


_PREFIX_RFC = b"\x84\x66AMP-v1\x40"  # ["AMP-v1", h'', …
_PREFIX_RUST_EXAMPLE = b"\x84\x66AMP-v1\x01"  # ["AMP-v1", 1, …
_K_ID, _K_TO, _K_TS, _K_TTL, _K_TYP, _K_FROM = b"\x62id", b"\x62to", b"\x62ts", b"\x63ttl", b"\x63typ", b"\x64from"
_K_REPLY_TO, _K_THREAD_ID = b"\x68reply_to", b"\x69thread_id"


class SignedHeaders(NamedTuple):
    """The signed header fields, encoded once (RFC 001 §8.1), in three runs
    of map entries. Every key is text of fixed length, so the deterministic
    order is static: id, to, ts | ttl, typ | from, reply_to, thread_id. The
    envelope uses the same key order and writes its own entries (v, sig,
    enc, ext, body) between these runs, so sealing encodes each header once
    for both Sig_Input and the message."""

    entries: int  # map entries in the three runs
    id_to_ts: bytes
    ttl_typ: bytes
    from_on: bytes  # from, then reply_to and thread_id when present (never null)


def signed_headers(id: bytes, typ: int, ts: int, ttl: int, sender: str, to: str | tuple[str, ...] | list[str],
                   reply_to: bytes | None, thread_id: bytes | None) -> SignedHeaders:
    """Encode the signed headers (integers outside 0..2**64-1 raise 1001),
    with the item writers of :mod:`.cbor`; a 16-byte id (the usual case)
    skips even those."""
    to_item = text_item(to) if type(to) is str else head(4, len(to)) + b"".join([text_item(t) for t in to])
    count = 6
    last = _K_FROM + text_item(sender)
    if reply_to is not None:
        count += 1
        last += _K_REPLY_TO + bytes_item(reply_to)
    if thread_id is not None:
        count += 1
        last += _K_THREAD_ID + bytes_item(thread_id)
    id_item = b"\x50" + id if len(id) == 16 else bytes_item(id)
    # tuple.__new__ skips NamedTuple's keyword-handling constructor (hot path).
    return tuple.__new__(SignedHeaders, (count, _K_ID + id_item + _K_TO + to_item + _K_TS + uint_item(ts),
                                         _K_TTL + uint_item(ttl) + _K_TYP + uint_item(typ), last))


def sig_input_of(headers: SignedHeaders, body_bytes: bytes, profile: Profile = Profile.RFC) -> bytes:
    """Sig_Input over encoded ``headers`` and the deterministic body bytes."""
    n = len(body_bytes)
    prefix = _PREFIX_RFC if profile is Profile.RFC else _PREFIX_RUST_EXAMPLE  # (no Enum hashing)
    return b"".join((prefix, head(5, headers.entries), headers.id_to_ts, headers.ttl_typ,
                     headers.from_on, head(2, n), body_bytes))


def sig_input_from_fields(*, id: bytes, typ: int, ts: int, ttl: int, sender: str,
                          to: str | tuple[str, ...] | list[str], reply_to: bytes | None,
                          thread_id: bytes | None, body_bytes: bytes,
                          profile: Profile = Profile.RFC) -> bytes:
    """The CBOR bytes of Sig_Input. ``body_bytes`` is the deterministic body
    encoding (or, for encrypted messages, the decrypted bytes as received).
    Absent ``reply_to``/``thread_id`` are left out, never written as null."""
    return sig_input_of(signed_headers(id, typ, ts, ttl, sender, to, reply_to, thread_id), body_bytes, profile)


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
