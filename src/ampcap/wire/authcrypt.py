"""authcrypt: NaCl box between static X25519 keys (RFC 001 §8.5–8.6).

The wire ``ciphertext`` is ``poly1305_tag(16) || encrypted body``. That is
exactly the layout of ``crypto_box_easy`` (libsodium puts the MAC first), so
PyNaCl's ``Box.encrypt`` output minus its 24-byte nonce prefix is the wire
value, and ``Box.decrypt(ciphertext, nonce)`` opens it. The RFC 001 A.6 vector
does not open under any standard construction (ruling R16); the messages
captured from the public Rust example do, and the tests prove it.

Computing a box (X25519 + HSalsa20) costs far more than the symmetric part,
so boxes are cached per key pair.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from nacl.exceptions import CryptoError
from nacl.public import Box, PrivateKey, PublicKey

from ..display import quoted
from ..errors import AmpError

__all__ = ["ALG", "MODE", "NONCE_SIZE", "TAG_SIZE", "check_params", "encrypt", "decrypt", "x25519_public_from_secret"]

ALG = "X25519-XSalsa20-Poly1305"
MODE = "authcrypt"
NONCE_SIZE = 24
TAG_SIZE = 16
# A Box costs an X25519 multiplication to build and the same (secret, peer)
# pairs repeat message after message, so the latest 256 are kept, process-
# wide (a pure cache: same inputs, same Box). It holds the secret keys the
# process already holds in its identities and keyrings, nothing more.
_BOX_CACHE_SIZE = 256
_boxes: OrderedDict[tuple[bytes, bytes], Box] = OrderedDict()


def _box(secret: bytes, peer_public: bytes) -> Box:
    key = (secret, peer_public)
    box = _boxes.get(key)
    if box is None:
        box = Box(PrivateKey(secret), PublicKey(peer_public))
        _boxes[key] = box
        if len(_boxes) > _BOX_CACHE_SIZE:
            _boxes.popitem(last=False)
    return box


def x25519_public_from_secret(secret: bytes) -> bytes:
    return bytes(PrivateKey(secret).public_key)


def check_params(alg: Any, mode: Any, nonce: Any, ciphertext: Any) -> None:
    """The byte-level parameters of §8.5.2; every violation is 1001."""
    if alg != ALG:
        raise AmpError(1001, f"unsupported enc.alg {quoted(alg)}", path="enc.alg")
    if mode != MODE:
        raise AmpError(1001, f"unsupported enc.mode {quoted(mode)}", path="enc.mode")
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_SIZE:
        raise AmpError(1001, "enc.nonce must be 24 bytes", path="enc.nonce")
    if not isinstance(ciphertext, bytes):
        raise AmpError(1001, "enc.ciphertext must be a byte string", path="enc.ciphertext")


def encrypt(plaintext: bytes, *, sender_secret: bytes, recipient_public: bytes, nonce: bytes) -> bytes:
    """``tag || ciphertext`` for ``plaintext`` (the deterministic body bytes)."""
    if len(nonce) != NONCE_SIZE:
        raise AmpError(1001, "authcrypt nonce must be 24 bytes")
    if len(sender_secret) != 32 or len(recipient_public) != 32:
        raise AmpError(1001, "X25519 keys are 32 bytes")
    sealed = _box(sender_secret, recipient_public).encrypt(plaintext, nonce)
    return sealed.ciphertext


def decrypt(ciphertext: bytes, nonce: bytes, *, recipient_secrets: Iterable[bytes], sender_public: bytes) -> bytes:
    """Open ``tag || ciphertext``, trying each local key agreement secret in
    turn (§8.9 asks receivers to try all of them, for key rotation). Any
    failure is 3001, with no detail about which key or why (§8.8 error oracles)."""
    if len(sender_public) != 32:
        raise AmpError(3001, "message could not be decrypted")
    if len(ciphertext) < TAG_SIZE:
        raise AmpError(3001, "message could not be decrypted")
    for secret in recipient_secrets:
        if len(secret) != 32:
            continue
        try:
            return _box(secret, sender_public).decrypt(ciphertext, nonce)
        except (CryptoError, ValueError, TypeError):
            continue
    raise AmpError(3001, "message could not be decrypted")
