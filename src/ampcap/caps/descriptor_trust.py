"""A client's trust profile for capability descriptors (RFC 004 §5.2, §7.2;
RFC 007 §5.10, A.17a/A.17b).

:class:`DescriptorTrust` says which descriptors must be signed: all of them
(the Public Registry Trust Profile) or those of named capabilities (by name
or id: a deployment can require signatures for the payment workflow and
nothing else), and who may sign a namespace (owner keys by name prefix,
``org.agentries.payment`` covering ``org.agentries.payment.workflow``).

:class:`DescriptorChecker` applies it in the §8 / §7.2 order: the
signature first (missing where required, malformed, wrong key, bad: 3001),
then the schema artifacts (missing, unreadable, hash mismatch or the
integrity source unreachable: 5002). A present signature must verify under
every profile (§4.2), required or not.

Cheap when repeated: verdicts are cached by the descriptor's id and the
hash of its exact wire map (signature included), as §5.2 suggests (a
descriptor is immutable while its hash is unchanged). Signature failures are
cached too (the same bytes fail the same way under the same keys); an
unreachable artifact (5002) is not, because it is retryable. Bounded.
"""

from __future__ import annotations

import enum
import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import AmpError
from ..wire.cbor import dumps
from ..wire.didkey import ed25519_from_did_key
from .descriptor import Descriptor
from .descriptor_sig import TrustProfile, verify_descriptor

if TYPE_CHECKING:
    from .bundle import SchemaStore

__all__ = ["SignatureStatus", "Verdict", "DescriptorTrust", "DescriptorChecker", "trust_from_mapping"]

UNAUTHORIZED, UNAVAILABLE = 3001, 5002


class SignatureStatus(enum.Enum):
    SIGNED = "signed"  # a signature verified under the namespace owner's key
    UNSIGNED = "unsigned"  # none, and this trust profile allows that


class Verdict(msgspec.Struct, frozen=True, gc=False):
    """What the checker found: shown by ``caps show`` and the dump."""

    status: SignatureStatus
    required: bool

    def describe(self) -> str:
        if self.status is SignatureStatus.SIGNED:
            return "signed, verified under the namespace owner's key"
        return "unsigned (allowed by the trust profile)"


def _owner_key(entry: str | bytes) -> bytes:
    if isinstance(entry, bytes):
        if len(entry) != 32:
            raise AmpError(UNAUTHORIZED, "a namespace owner key is 32 bytes")
        return entry
    return ed25519_from_did_key(entry)  # 3001 when not a did:key


class DescriptorTrust(msgspec.Struct, frozen=True, kw_only=True):
    """Which descriptors need a signature, and whose.

    ``owners`` maps a namespace (a capability name, or a prefix of names up
    to a dot) to its owner's Ed25519 keys (32 bytes) or did:key DIDs."""

    require_all: bool = False
    require: frozenset[str] = frozenset()
    owners: Mapping[str, tuple[str | bytes, ...]] = msgspec.field(default_factory=dict)

    def requires(self, descriptor: Descriptor) -> bool:
        return self.require_all or descriptor.name in self.require or descriptor.id in self.require

    def resolve_key(self, name: str) -> list[bytes] | None:
        """The keys of the longest namespace in ``owners`` that covers ``name``."""
        best: str | None = None
        for namespace in self.owners:
            if (name == namespace or name.startswith(namespace + ".")) and (best is None or len(namespace) > len(best)):
                best = namespace
        if best is None:
            return None
        return [_owner_key(k) for k in self.owners[best]]


def trust_from_mapping(data: Mapping[str, Any]) -> DescriptorTrust:
    """A trust profile from configuration (TOML/JSON)::

        require_signatures = "all"                       # or a list of names / ids
        [owners]
        "org.agentries.payment" = ["did:key:z6Mk…"]

    A wrong shape is ``AmpError(4001)`` naming the key."""
    extra = sorted(set(data) - {"require_signatures", "owners"})
    if extra:
        raise AmpError(4001, f"unknown trust profile key {extra[0]!r} (expected require_signatures, owners)")
    raw = data.get("require_signatures", [])
    require_all = raw == "all"
    if not require_all and not (isinstance(raw, list) and all(isinstance(x, str) for x in raw)):
        raise AmpError(4001, "require_signatures must be \"all\" or a list of capability names or ids")
    owners = data.get("owners", {})
    if not isinstance(owners, Mapping) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v) for k, v in owners.items()):
        raise AmpError(4001, "owners must map a namespace to a list of did:key DIDs")
    for keys in owners.values():
        for did in keys:
            try:
                ed25519_from_did_key(did)
            except AmpError as exc:
                raise AmpError(4001, f"owners: {exc.message}") from None
    return DescriptorTrust(require_all=require_all, require=frozenset(() if require_all else raw),
                           owners={k: tuple(v) for k, v in owners.items()})


class DescriptorChecker:
    """Checks descriptors against one :class:`DescriptorTrust`, with a cache."""

    def __init__(self, trust: DescriptorTrust, *, artifacts: SchemaStore | None = None,
                 max_cached: int = 4096) -> None:
        self.trust = trust
        self.artifacts = artifacts
        self._max = max_cached
        self._cache: OrderedDict[tuple[str, bytes], Verdict | AmpError] = OrderedDict()
        # In front of it, by object: a client checks the Descriptor its
        # registry holds, the same object every invoke, so a repeat skips
        # even the encoding and hashing. The entry keeps the object alive,
        # so its id cannot be reused by another while the entry exists.
        self._by_object: dict[int, tuple[Descriptor, Verdict]] = {}

    def check(self, descriptor: Descriptor, *, path: str = "") -> Verdict:
        """The verdict for ``descriptor``, or ``AmpError`` 3001 / 5002."""
        known = self._by_object.get(id(descriptor))
        if known is not None and known[0] is descriptor:
            return known[1]
        verdict = self._check(descriptor, path)
        if len(self._by_object) >= self._max:
            self._by_object.clear()
        self._by_object[id(descriptor)] = (descriptor, verdict)
        return verdict

    def _check(self, descriptor: Descriptor, path: str) -> Verdict:
        key = (descriptor.id, hashlib.sha256(dumps(descriptor.to_wire())).digest())
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            if isinstance(hit, AmpError):
                raise AmpError(hit.code, hit.message, path=path and hit.path)
            return hit
        required = self.trust.requires(descriptor)
        profile = TrustProfile.PUBLIC if required else TrustProfile.PRIVATE
        try:
            signed = verify_descriptor(descriptor, self.trust.resolve_key, profile=profile, path=path)
        except AmpError as exc:
            self._remember(key, exc)
            raise
        if self.artifacts is not None:
            # 5002 escapes uncached: the artifact may be reachable on the next try.
            self.artifacts.load_json(descriptor.input_schema)
            self.artifacts.load_json(descriptor.output_schema)
        verdict = Verdict(SignatureStatus.SIGNED if signed else SignatureStatus.UNSIGNED, required)
        self._remember(key, verdict)
        return verdict

    def check_all(self, descriptors: Iterable[Descriptor]) -> list[Verdict]:
        return [self.check(d, path=f"capabilities[{i}]") for i, d in enumerate(descriptors)]

    def _remember(self, key: tuple[str, bytes], value: Verdict | AmpError) -> None:
        self._cache[key] = value
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
