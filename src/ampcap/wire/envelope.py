"""The AMP message envelope (RFC 001 §4.1–4.2): value type, wire encoding,
shape-only decoding and sealing (sign, optionally authcrypt).

Encoding writes the envelope map directly in deterministic key order (the
envelope keys are fixed text keys, so the order is static) and splices in the
already-encoded deterministic body: the body is encoded exactly once, and the
same bytes feed Sig_Input, the message and (for authcrypt) the cipher.

Decoding accepts the keys in any order (ruling R15): signatures are computed
over re-encoded headers and body, never over the received byte layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from ..errors import AmpError
from . import authcrypt
from .cbor import DEFAULT_LIMITS, DecodeLimits, bytes_item, dumps, head, loads, uint_item
from .signing import Profile, SignedHeaders, sig_input, sig_input_of, signed_headers

__all__ = [
    "Envelope",
    "EncryptedPayload",
    "DEFAULT_TTL_MS",
    "BODY_MAX_DEPTH",
    "new_message_id",
    "id_timestamp",
    "encode_envelope",
    "decode_envelope",
    "envelope_from_map",
    "sig_input",
    "seal",
    "Profile",
]

DEFAULT_TTL_MS = 86_400_000  # RFC 001 §8.3: the suggested default, 24 h
_UINT64_MAX = (1 << 64) - 1
Entropy = Callable[[int], bytes]


_UInt = Annotated[int, msgspec.Meta(ge=0)]  # cbor2 yields at most 2**64-1 for major type 0
_MessageId = Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]
_Did = Annotated[str, msgspec.Meta(min_length=1)]
_Recipients = Annotated[tuple[_Did, ...], msgspec.Meta(min_length=1)]


# Envelope and EncryptedPayload hold decoded CBOR values and scalars only, which
# cannot refer back to them, so they never form reference cycles: gc=False
# keeps the garbage collector from tracking one more object per message.
class EncryptedPayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """The ``enc`` map of an authcrypt message (RFC 001 §4.1)."""

    nonce: bytes
    ciphertext: bytes
    alg: str = authcrypt.ALG
    mode: str = authcrypt.MODE

    def to_map(self) -> dict[str, Any]:
        # Deterministic key order: alg, mode, nonce, ciphertext (shorter first).
        return {"alg": self.alg, "mode": self.mode, "nonce": self.nonce, "ciphertext": self.ciphertext}


class Envelope(msgspec.Struct, frozen=True, kw_only=True, rename={"sender": "from"},
               forbid_unknown_fields=True, gc=False):
    """One AMP message. ``sender`` is the wire key ``from``.

    ``body`` and ``enc`` are exclusive; without ``enc`` the body is always
    present on the wire (``None`` is CBOR null). The field annotations double
    as the shape check: decoding converts the decoded map with msgspec, which
    checks types, sizes and unknown keys in C.
    """

    v: _UInt
    id: _MessageId
    typ: _UInt
    ts: _UInt
    ttl: _UInt
    sender: _Did
    to: _Did | _Recipients
    reply_to: bytes | None = None
    thread_id: bytes | None = None
    sig: bytes
    body: Any = None
    enc: EncryptedPayload | None = None
    ext: dict[str, Any] | None = None

    @property
    def recipients(self) -> tuple[str, ...]:
        return (self.to,) if isinstance(self.to, str) else self.to

    @property
    def encrypted(self) -> bool:
        return self.enc is not None


# --------------------------------------------------------------------------
# Message ids (§4.2)
# --------------------------------------------------------------------------


def new_message_id(ts_ms: int, entropy: Entropy) -> bytes:
    """8-byte big-endian ``ts`` followed by 8 bytes from the CSPRNG."""
    if not 0 <= ts_ms <= _UINT64_MAX:
        raise AmpError(1001, "message timestamp out of range")
    rand = entropy(8)
    if len(rand) != 8:
        raise AmpError(5001, "entropy source returned the wrong number of bytes")
    return ts_ms.to_bytes(8, "big") + rand


def id_timestamp(message_id: bytes) -> int:
    """The millisecond timestamp embedded in a message id."""
    return int.from_bytes(message_id[:8], "big")


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


_K_V, _K_SIG, _K_ENC, _K_EXT, _K_BODY = b"\x61v", b"\x63sig", b"\x63enc", b"\x63ext", b"\x64body"


def _encode(v: int, headers: SignedHeaders, sig: bytes, body_bytes: bytes | None,
            enc: EncryptedPayload | None = None, ext: dict[str, Any] | None = None) -> bytes:
    """Wire bytes of an envelope, written directly in deterministic key order
    (RFC 8949 §4.2.1: length first, then bytewise, for text keys):
    v | id to ts | enc ext sig ttl typ | body from | reply_to | thread_id.
    The signed headers come pre-encoded (the same bytes Sig_Input holds) and
    ``body_bytes`` is the deterministic body, spliced in unchanged."""
    own = [_K_V + uint_item(v), headers.id_to_ts]
    count = headers.entries + 3  # v, sig, and body or enc
    if enc is not None:
        own.append(_K_ENC + dumps(enc.to_map()))
    if ext is not None:
        count += 1
        own.append(_K_EXT + dumps(ext))
    own += (_K_SIG, bytes_item(sig), headers.ttl_typ)
    if enc is None:
        if body_bytes is None:
            raise AmpError(1001, "a plain message needs its body bytes")
        own += (_K_BODY, body_bytes)
    own.append(headers.from_on)
    return head(5, count) + b"".join(own)


def encode_envelope(env: Envelope) -> bytes:
    """Deterministic wire bytes of an envelope."""
    headers = signed_headers(env.id, env.typ, env.ts, env.ttl, env.sender, env.to, env.reply_to, env.thread_id)
    body_bytes = dumps(env.body) if env.enc is None else None
    return _encode(env.v, headers, env.sig, body_bytes, env.enc, env.ext)


# --------------------------------------------------------------------------
# Decoding (shape only)
# --------------------------------------------------------------------------

_REQUIRED = ("v", "id", "typ", "ts", "ttl", "from", "to", "sig")
_ENC_KEYS = ("alg", "mode", "nonce", "ciphertext")
_PATH = re.compile(r"at `\$\.?([^`]*)`")
_KEY_IN = re.compile(r"at `key` in `\$\.?([^`]*)`")


def _shape_error(exc: msgspec.ValidationError, m: dict[Any, Any]) -> AmpError:
    """Turn msgspec's message into a 1001 with a dotted path."""
    text = str(exc)
    path: str | None = None
    found = _KEY_IN.search(text) or _PATH.search(text)
    if found:
        path = found.group(1) or None
    elif text.startswith("Object missing required field"):
        path = text.rsplit("`", 2)[-2] if "`" in text else None
    elif text.startswith("Object contains unknown field"):
        path = text.rsplit("`", 2)[-2] if "`" in text else None
    message = text.split(" - at ")[0]
    if path == "from" or (path and path.startswith("to")) or path == "sender":
        message = f"{message} (a DID string)" if "str" in message else message
    return AmpError(1001, f"invalid envelope: {message}", path=path)


def envelope_from_map(m: Any) -> Envelope:
    """Check the envelope shape of a decoded map and build the Envelope.

    Raises ``AmpError(1001)`` with the path of the first offending field.
    """
    if type(m) is not dict:
        raise AmpError(1001, "message is not a CBOR map")
    # Presence rules msgspec cannot express: body XOR enc, and optional
    # fields that are absent rather than null (absent ≠ null in Sig_Input).
    has_body = "body" in m
    enc = m.get("enc")
    if enc is not None:
        if has_body:
            raise AmpError(1001, "body and enc are mutually exclusive", path="enc")
        if type(enc) is dict:
            for key in _ENC_KEYS:
                if key not in enc:
                    raise AmpError(1001, f"enc is missing {key!r}", path=f"enc.{key}")
            authcrypt.check_params(enc.get("alg"), enc.get("mode"), enc.get("nonce"), enc.get("ciphertext"))
    elif not has_body:
        if "enc" in m:
            raise AmpError(1001, "enc must be a map", path="enc")
        for key in _REQUIRED:
            if key not in m:
                raise AmpError(1001, f"missing required field {key!r}", path=key)
        raise AmpError(1001, "missing required field 'body' (use null for no payload)", path="body")
    for key in ("reply_to", "thread_id", "ext"):
        if key in m and m[key] is None:
            raise AmpError(1001, f"{key} must be omitted rather than null", path=key)
    try:
        return msgspec.convert(m, Envelope)
    except msgspec.ValidationError as exc:
        raise _shape_error(exc, m) from None


def decode_envelope(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Envelope:
    """Decode wire bytes into an Envelope, checking shape only (no time,
    type, key or signature checks: those are the receive pipeline's)."""
    return envelope_from_map(loads(data, limits))


# --------------------------------------------------------------------------
# Sealing
# --------------------------------------------------------------------------


BODY_MAX_DEPTH = DEFAULT_LIMITS.max_depth - 1  # the body sits inside the envelope's map


def seal(identity: Any, *, typ: int, to: str | tuple[str, ...] | list[str], body: Any, now_ms: int,
         entropy: Entropy, ttl: int = DEFAULT_TTL_MS, reply_to: bytes | None = None,
         thread_id: bytes | None = None, v: int = 1, encrypt_to: bytes | None = None,
         ext: dict[str, Any] | None = None, profile: Profile = Profile.RFC,
         message_id: bytes | None = None, body_bytes: bytes | None = None) -> tuple[Envelope, bytes]:
    """Build, sign and (with ``encrypt_to``, the recipient's X25519 public key)
    authcrypt a message from ``identity``; return it and its wire bytes.

    Sign-then-encrypt (§8.6): the signature covers the deterministic plaintext
    body, and exactly those bytes are encrypted. ``body_bytes``, when given,
    must be ``dumps(body)`` (a caller that already encoded it).
    """
    if isinstance(to, list):
        to = tuple(to)
    mid = message_id if message_id is not None else new_message_id(now_ms, entropy)
    if body_bytes is None:
        # Refused here (TooDeep, 1001) rather than by the receiver, whose
        # decoder counts the envelope's map as the first level: a body it
        # cannot decode could not even be answered.
        body_bytes = dumps(body, max_depth=BODY_MAX_DEPTH)
    headers = signed_headers(mid, typ, now_ms, ttl, identity.did, to, reply_to, thread_id)
    sig = identity.sign(sig_input_of(headers, body_bytes, profile))
    enc = None
    if encrypt_to is not None:
        nonce = entropy(authcrypt.NONCE_SIZE)
        ciphertext = authcrypt.encrypt(body_bytes, sender_secret=identity.x25519_secret,
                                       recipient_public=encrypt_to, nonce=nonce)
        enc = EncryptedPayload(nonce=nonce, ciphertext=ciphertext)
    env = Envelope(
        v=v, id=mid, typ=typ, ts=now_ms, ttl=ttl, sender=identity.did, to=to, reply_to=reply_to,
        thread_id=thread_id, sig=sig, body=None if enc is not None else body, enc=enc, ext=ext,
    )
    return env, _encode(v, headers, sig, body_bytes, enc, ext)
