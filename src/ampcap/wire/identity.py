"""Local identities and key resolution (ruling R2, RFC 001 §8.9).

An :class:`Identity` is an Ed25519 signing key plus an X25519 key agreement
key. By default the X25519 key is derived from the Ed25519 seed (so a did:key
identity needs nothing else); identities loaded from a keyring may carry an
independent X25519 secret and a non-did:key DID (``did:web:…``).

An identity's key file is JSON with hex secrets (:meth:`Identity.to_json`,
:meth:`Identity.from_json`); reading and writing the file itself, with its
mode rules, is :mod:`ampcap.files.identity`'s job.

:class:`KeyResolver` is what the receive pipeline asks for public keys;
``did:key`` resolves with no setup (:class:`DidKeyResolver`) and
:class:`ChainResolver` tries several resolvers in turn (did:key, then a keyring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nacl.bindings import crypto_sign, crypto_sign_ed25519_sk_to_curve25519
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from ..display import printable
from ..errors import AmpError
from .didkey import did_key_from_ed25519, ed25519_from_did_key, is_did, split_did_url, x25519_from_did_key

__all__ = [
    "Identity",
    "KeyResolver",
    "DidKeyResolver",
    "ChainResolver",
    "IDENTITY_FILE_KIND",
]

IDENTITY_FILE_KIND = "ampcap-identity"
IDENTITY_FILE_VERSION = 1  # the key file format :meth:`Identity.to_json` writes
Entropy = Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class Identity:
    """An Ed25519 identity with its X25519 key agreement key."""

    seed: bytes = field(repr=False)
    did: str
    public_key: bytes
    x25519_secret: bytes = field(repr=False)
    x25519_public: bytes
    _secret_key: bytes = field(repr=False, compare=False)  # libsodium's form: seed || public key

    @classmethod
    def from_seed(cls, seed: bytes, *, did: str | None = None, x25519_secret: bytes | None = None) -> Identity:
        if len(seed) != 32:
            raise AmpError(1001, "an Ed25519 seed is 32 bytes")
        signing_key = SigningKey(seed)
        public = bytes(signing_key.verify_key)
        if x25519_secret is None:
            # The standard Ed25519 → X25519 secret conversion (hash of the seed, clamped).
            x25519_secret = crypto_sign_ed25519_sk_to_curve25519(seed + public)
        if len(x25519_secret) != 32:
            raise AmpError(1001, "an X25519 secret is 32 bytes")
        x_public = bytes(PrivateKey(x25519_secret).public_key)
        return cls(
            seed=seed, did=did or did_key_from_ed25519(public), public_key=public,
            x25519_secret=x25519_secret, x25519_public=x_public, _secret_key=seed + public,
        )

    @classmethod
    def generate(cls, entropy: Entropy) -> Identity:
        seed = entropy(32)
        if len(seed) != 32:
            raise AmpError(5001, "entropy source returned the wrong number of bytes")
        return cls.from_seed(seed)

    def sign(self, message: bytes) -> bytes:
        """Detached Ed25519 signature (64 bytes). libsodium's combined form is
        ``signature || message``; calling the binding directly skips the
        SignedMessage object SigningKey.sign builds around it (hot path)."""
        return crypto_sign(message, self._secret_key)[:64]

    # ------------------------------------------------------- key file contents

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": IDENTITY_FILE_KIND,
            "version": IDENTITY_FILE_VERSION,
            "did": self.did,
            "ed25519_seed": self.seed.hex(),
            "ed25519": self.public_key.hex(),
            "x25519": self.x25519_public.hex(),
        }
        derived = crypto_sign_ed25519_sk_to_curve25519(self.seed + self.public_key)
        if self.x25519_secret != derived:
            data["x25519_secret"] = self.x25519_secret.hex()
        return data

    @classmethod
    def from_json(cls, data: Any, *, origin: str = "identity") -> Identity:
        """The identity a key file holds, checked as far as it can be: a
        did:key must be the one its key gives (anything else would announce a
        DID that every peer refuses, and blame the peer for it), another DID
        must at least be one, and public keys written beside the secrets must
        be theirs. ``origin`` names the file in every message."""
        if not isinstance(data, dict):
            raise AmpError(1001, f"{origin}: identity file must hold a JSON object")
        _check_format(data, origin)
        seed = _hex_field(data, "ed25519_seed", origin)
        if seed is None:
            raise AmpError(1001, f"{origin}: missing 'ed25519_seed'")
        x_secret = _hex_field(data, "x25519_secret", origin)
        did = data.get("did")
        if did is not None and not isinstance(did, str):
            raise AmpError(1001, f"{origin}: 'did' must be a string")
        ident = cls.from_seed(seed, did=did, x25519_secret=x_secret)
        expected = data.get("ed25519")
        if expected is not None and expected != ident.public_key.hex():
            raise AmpError(1001, f"{origin}: 'ed25519' does not match the seed")
        x_public = data.get("x25519")
        if x_public is not None and x_public != ident.x25519_public.hex():
            raise AmpError(1001, f"{origin}: 'x25519' does not match the X25519 secret")
        _check_did(ident, origin)
        return ident


def _check_format(data: Mapping[str, Any], origin: str) -> None:
    """``kind`` and ``version``, when present, must be the ones this code
    writes: a file of another kind, or a later format, read as if it were
    ours could yield a different key than its author meant. (Absent, the file
    is taken as hand-written in today's format.)"""
    kind = data.get("kind", IDENTITY_FILE_KIND)
    if kind != IDENTITY_FILE_KIND:
        raise AmpError(1001, f"{origin}: 'kind' is {_shown(kind)}, not an identity file "
                             f"(expected {IDENTITY_FILE_KIND!r})")
    version = data.get("version", IDENTITY_FILE_VERSION)
    if type(version) is not int or version != IDENTITY_FILE_VERSION:
        raise AmpError(1001, f"{origin}: unsupported identity file version {_shown(version)} "
                             f"(this ampcap reads version {IDENTITY_FILE_VERSION})")


_DID_KEY = "did:key:"


def _check_did(ident: Identity, origin: str) -> None:
    did = ident.did
    if not is_did(did, fragment=True):  # RFC 001 lets a DID URL name the key
        raise AmpError(1001, f"{origin}: 'did' is not a DID: {_shown(did)} "
                             "(expected did:METHOD:ID, e.g. did:web:example.com:agent:bob)")
    if did.startswith(_DID_KEY):
        # Self-certifying: the DID is the key, so there is exactly one right answer.
        expected = did_key_from_ed25519(ident.public_key)
        base, fragment = split_did_url(did)
        if base != expected or fragment not in (None, expected[len(_DID_KEY):]):
            raise AmpError(1001, f"{origin}: did does not match its key (expected {expected})")
        derived = crypto_sign_ed25519_sk_to_curve25519(ident.seed + ident.public_key)
        if ident.x25519_secret != derived:
            # Peers derive a did:key's X25519 key from its Ed25519 key: a
            # message encrypted to it could not be opened with this secret.
            raise AmpError(1001, f"{origin}: 'x25519_secret' does not belong to a did:key identity "
                                 "(its X25519 key is derived from the Ed25519 key; remove 'x25519_secret')")


def _shown(value: object) -> str:
    """A value from the file, quoted for a one-line message (escaped, cut short)."""
    return printable(repr(value), 60)


def _hex_field(data: Mapping[str, Any], key: str, origin: str) -> bytes | None:
    value = data.get(key)
    if value is None:
        return None
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else None
    except ValueError:
        raw = None
    if raw is None or len(raw) != 32:
        raise AmpError(1001, f"{origin}: {key!r} must be 64 hex digits")
    return raw


# --------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------


@runtime_checkable
class KeyResolver(Protocol):
    """Public keys for a DID or DID URL; ``AmpError(3001)`` when unresolvable."""

    def ed25519_for(self, did: str) -> bytes: ...

    def x25519_for(self, did: str) -> bytes: ...


class DidKeyResolver:
    """Resolves ``did:key`` (Ed25519) DIDs from the DID itself.

    Decoding base58 is a big-integer loop, so results are memoised (bounded:
    the cache is simply cleared when full; only successes are cached)."""

    def __init__(self, cache_size: int = 4096) -> None:
        self._cache_size = cache_size
        self._ed: dict[str, bytes] = {}
        self._x: dict[str, bytes] = {}

    def ed25519_for(self, did: str) -> bytes:
        return self._memo(self._ed, did, ed25519_from_did_key)

    def x25519_for(self, did: str) -> bytes:
        return self._memo(self._x, did, x25519_from_did_key)

    def _memo(self, cache: dict[str, bytes], did: str, derive: Callable[[str], bytes]) -> bytes:
        key = cache.get(did)
        if key is None:
            key = derive(did)  # raises AmpError(3001): failures are not cached
            if len(cache) >= self._cache_size:
                cache.clear()
            cache[did] = key
        return key


class ChainResolver:
    """Asks each resolver in turn; the first that resolves wins."""

    def __init__(self, *resolvers: KeyResolver) -> None:
        self._resolvers = resolvers

    def _first(self, method: str, did: str) -> bytes:
        last: AmpError | None = None
        for resolver in self._resolvers:
            try:
                return getattr(resolver, method)(did)
            except AmpError as exc:
                if exc.code != 3001:
                    raise
                last = exc
        raise last or AmpError(3001, f"no key known for {did[:120]}")

    def ed25519_for(self, did: str) -> bytes:
        return self._first("ed25519_for", did)

    def x25519_for(self, did: str) -> bytes:
        return self._first("x25519_for", did)
