"""Keyrings: public (and optionally secret) keys for DIDs that are not
self-certifying, e.g. ``did:web`` (ruling R2; nothing is fetched from the
network). Format (spec map, "Contracts"; files are read by
:mod:`ampcap.files.keyring`), JSON or TOML of the same shape::

    {"did:web:example.com:agent:bob": {"ed25519": "<hex32>", "x25519": "<hex32>",
                                       "ed25519_secret": "<hex32>", "x25519_secret": "<hex32>"}}

Only ``ed25519`` is required per entry. DID URLs select a method by fragment
(RFC 001 §8.9); a keyring entry holds one method per key type, so a fragment
must name the entry itself: either an entry keyed by the full DID URL, or a
fragment equal to the DID. Anything else is unresolvable (3001).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AmpError
from .didkey import split_did_url
from .identity import ChainResolver, DidKeyResolver, Identity

__all__ = ["KeyringEntry", "Keyring", "default_resolver"]

_KNOWN_FIELDS = frozenset(("ed25519", "x25519", "ed25519_secret", "x25519_secret"))


@dataclass(frozen=True, slots=True)
class KeyringEntry:
    did: str
    ed25519: bytes
    x25519: bytes | None = None
    ed25519_secret: bytes | None = None
    x25519_secret: bytes | None = None

    def identity(self) -> Identity | None:
        """The local identity this entry describes, when it has its signing secret."""
        if self.ed25519_secret is None:
            return None
        return Identity.from_seed(self.ed25519_secret, did=self.did, x25519_secret=self.x25519_secret)


class Keyring:
    """A read-only map of DID → keys, implementing :class:`KeyResolver`."""

    def __init__(self, entries: Mapping[str, KeyringEntry] | None = None) -> None:
        self._entries: dict[str, KeyringEntry] = dict(entries or {})

    # ------------------------------------------------------------ building

    @classmethod
    def from_mapping(cls, data: Any, *, origin: str = "keyring") -> Keyring:
        if not isinstance(data, dict):
            raise AmpError(1001, f"{origin}: a keyring must map DIDs to key objects")
        entries: dict[str, KeyringEntry] = {}
        for did, spec in data.items():
            where = f"{origin}: entry {did!r}"
            if not isinstance(did, str) or not did.startswith("did:"):
                raise AmpError(1001, f"{where}: keys of a keyring must be DIDs")
            if not isinstance(spec, dict):
                raise AmpError(1001, f"{where}: must be an object with 'ed25519' (and optionally 'x25519')")
            unknown = sorted(set(spec) - _KNOWN_FIELDS)
            if unknown:
                raise AmpError(1001, f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
            ed = _key(spec, "ed25519", where)
            if ed is None:
                raise AmpError(1001, f"{where}: missing 'ed25519' public key")
            entry = KeyringEntry(
                did=did, ed25519=ed, x25519=_key(spec, "x25519", where),
                ed25519_secret=_key(spec, "ed25519_secret", where),
                x25519_secret=_key(spec, "x25519_secret", where),
            )
            if entry.ed25519_secret is not None:
                ident = entry.identity()
                assert ident is not None
                if ident.public_key != ed:
                    raise AmpError(1001, f"{where}: 'ed25519_secret' does not match 'ed25519'")
                if entry.x25519 is not None and entry.x25519_secret is not None and ident.x25519_public != entry.x25519:
                    raise AmpError(1001, f"{where}: 'x25519_secret' does not match 'x25519'")
            entries[did] = entry
        return cls(entries)

    # ----------------------------------------------------------- resolving

    def entry_for(self, did_url: str) -> KeyringEntry:
        entry = self._entries.get(did_url)
        if entry is not None:
            return entry
        did, fragment = split_did_url(did_url)
        entry = self._entries.get(did)
        if entry is None:
            raise AmpError(3001, f"no key known for {did_url[:120]}")
        if fragment is not None and fragment != did:
            raise AmpError(3001, f"keyring has no verification method #{fragment[:60]} for {did[:120]}")
        return entry

    def ed25519_for(self, did: str) -> bytes:
        return self.entry_for(did).ed25519

    def x25519_for(self, did: str) -> bytes:
        key = self.entry_for(did).x25519
        if key is None:
            raise AmpError(3001, f"no key agreement key known for {did[:120]}")
        return key

    def x25519_secrets(self) -> list[bytes]:
        """Every local key agreement secret, for decrypting (§8.9 rotation)."""
        return [e.x25519_secret for e in self._entries.values() if e.x25519_secret is not None]

    def identities(self) -> list[Identity]:
        return [ident for e in self._entries.values() if (ident := e.identity()) is not None]

    def __contains__(self, did: object) -> bool:
        return did in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _key(spec: Mapping[str, Any], name: str, where: str) -> bytes | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AmpError(1001, f"{where}: {name!r} must be a hex string")
    try:
        raw = bytes.fromhex(value)
    except ValueError as exc:
        raise AmpError(1001, f"{where}: {name!r} is not valid hex") from exc
    if len(raw) != 32:
        raise AmpError(1001, f"{where}: {name!r} must be 32 bytes (64 hex digits), got {len(raw)}")
    return raw


def default_resolver(keyring: Keyring | None = None) -> ChainResolver:
    """did:key first (no setup), then the keyring, if any."""
    return ChainResolver(DidKeyResolver(), keyring) if keyring is not None else ChainResolver(DidKeyResolver())
