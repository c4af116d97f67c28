"""The dump's word on the signed descriptors a CAP_DECLARE carries (RFC 004
§5.2): for each descriptor, whether it is signed and whether the signature
verifies under the declaring agent's own key (the ``from`` of the message:
the publisher ampcap's ``serve`` signs with). A dump has no client trust
profile, so this is a note, not a finding: a client requiring signatures
(``--trust``) decides with its own owner keys."""

from __future__ import annotations

from typing import Any

from ..caps.descriptor import Descriptor
from ..caps.descriptor_sig import TrustProfile, verify_descriptor
from ..display import shown
from ..errors import AmpError
from ..wire.didkey import ed25519_from_did_key

__all__ = ["descriptor_notes"]


def descriptor_notes(body: Any, sender: str | None) -> list[str]:
    caps = body.get("capabilities") if isinstance(body, dict) else None
    if not isinstance(caps, list):
        return []
    try:
        key = ed25519_from_did_key(sender) if sender else None
    except AmpError:
        key = None
    notes = []
    for raw in caps:
        try:
            descriptor = Descriptor.from_wire(raw)
        except AmpError:
            continue  # the CDDL verdict reports a malformed descriptor
        name = shown(str(descriptor.id))
        if descriptor.descriptor_sig is None:
            notes.append(f"descriptor {name}: unsigned")
            continue
        if key is None:
            notes.append(f"descriptor {name}: signed (the sender is not a did:key: not checked)")
            continue
        try:
            verify_descriptor(descriptor, lambda _name: [key], profile=TrustProfile.PUBLIC)
            notes.append(f"descriptor {name}: signed by the sender, verifies")
        except AmpError as exc:
            notes.append(f"descriptor {name}: signature does not verify under the sender's key "
                         f"({shown(exc.message)})")
    return notes
