"""Signing a manifest's descriptors (RFC 004 §5.2) with a publisher key.

A manifest asks for it with ``descriptor_signer`` (docs/manifest.md):
``"identity"``, the daemon's own identity (``serve`` signs at start, since
only it holds that key), or ``{ key_file = "…" }``, a key file the edge
(:mod:`ampcap.files.manifest`) reads. Either way :func:`sign_manifest`
does the signing here, without I/O: the seed is handed in.

The COSE ``kid`` is the UTF-8 of the signer's DID (as for delegation
credentials, docs/delegation.md), so a verifier can tell which owner key
was meant; verification still goes by the namespace owner keys its trust
profile lists (``caps.descriptor_trust``), never by the ``kid`` alone.
"""

from __future__ import annotations

import dataclasses

from ..wire.identity import Identity
from .descriptor_sig import sign_descriptor
from .manifest_model import CapabilitySpec, Manifest

__all__ = ["sign_spec", "sign_manifest"]


def sign_spec(spec: CapabilitySpec, signer: Identity) -> CapabilitySpec:
    signed = sign_descriptor(spec.descriptor, signer.seed, kid=signer.did.encode())
    return dataclasses.replace(spec, descriptor=signed)


def sign_manifest(manifest: Manifest, signer: Identity) -> Manifest:
    """The manifest with every descriptor carrying ``signer``'s signature."""
    return dataclasses.replace(manifest, capabilities=tuple(sign_spec(s, signer) for s in manifest.capabilities),
                               signed_by=signer.did)
