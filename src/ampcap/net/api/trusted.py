"""A caller that requires signed descriptors (RFC 004 §5.2, A.17a/A.17b).

:class:`TrustedCaller` applies a client trust profile
(:class:`~ampcap.caps.descriptor_trust.DescriptorTrust`) to the descriptors
a peer declares, in the RFC 004 §7.2 order: the signature first (missing
where the profile requires one, malformed, by a key the namespace owner
does not hold, or not verifying: 3001), then, for a descriptor the profile
requires, its schema artifacts (not in a local bundle and not served by the
peer, or failing their hash: 5002). :meth:`TrustedCaller.invoke` checks
the descriptor of the exact version it is about to invoke (one CAP_QUERY
per capability id and connection, then cached with the verdict), so an
invoke never reaches a capability whose descriptor the caller refuses.

The checker caches verdicts by the descriptor's exact bytes, so a repeat
costs a dictionary lookup (docs/payments.md has the figure).
"""

from __future__ import annotations

from typing import Any

from ...caps.artifacts import ArtifactFetcher
from ...caps.descriptor_trust import DescriptorChecker, DescriptorTrust, Verdict
from ...errors import AmpError

__all__ = ["TrustedCaller"]


class TrustedCaller:
    """Query and invoke through ``remote`` under one trust profile."""

    def __init__(self, remote: Any, trust: DescriptorTrust | DescriptorChecker) -> None:
        self.remote = remote
        self.checker = trust if isinstance(trust, DescriptorChecker) else DescriptorChecker(trust)
        self._fetcher = ArtifactFetcher(lambda cid, params: remote.invoke(cid, params=params))
        self._checked: dict[str, Verdict] = {}  # capability id -> verdict, for this connection

    @property
    def did(self) -> str:
        return str(self.remote.did)

    async def check(self, descriptor: Any) -> Verdict:
        """The verdict for one descriptor of this peer, or AmpError 3001 / 5002."""
        verdict = self.checker.check(descriptor)
        if verdict.required:
            for ref in (descriptor.input_schema, descriptor.output_schema):
                try:
                    await self._fetcher.schema(ref)
                except AmpError as exc:
                    raise AmpError(5002, f"{descriptor.id}: schema artifact unavailable ({exc.message})") from None
        return verdict

    async def query(self, name: str, **options: Any) -> list[tuple[Any, Verdict]]:
        """CAP_QUERY, every descriptor checked: (descriptor, verdict) pairs;
        the first refused one raises."""
        found = await self.remote.query(name, **options)
        return [(d, await self.check(d)) for d in found]

    async def descriptor_verdict(self, capability_id: str) -> Verdict:
        known = self._checked.get(capability_id)
        if known is not None:
            return known
        name, _, version = capability_id.partition(":")
        found = [d for d in await self.remote.query(name, range=f"={version}") if str(d.id) == capability_id]
        if not found:
            raise AmpError(4002, f"{capability_id} is not declared by this peer")
        verdict = self._checked[capability_id] = await self.check(found[0])
        return verdict

    async def invoke(self, capability_id: str, **options: Any) -> Any:
        """CAP_INVOKE of an exact ``name:version`` whose descriptor passed the profile."""
        await self.descriptor_verdict(capability_id)
        return await self.remote.invoke(capability_id, **options)
