"""The dump says, for each descriptor of a CAP_DECLARE, whether it is signed
and whether the signature verifies under the sender's key (dump/descriptors.py)."""

from __future__ import annotations

import itertools

import msgspec

from ampcap.caps.demo import demo_manifest
from ampcap.caps.descriptor_signing import sign_manifest
from ampcap.dump.records import Inspector
from ampcap.dump.render import record_to_json
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import default_resolver
from ampcap.wire.registry import MessageType

PUBLISHER = Identity.from_seed(b"\x51" * 32)
OTHER = Identity.from_seed(b"\x52" * 32)
T0 = 1_795_000_000_000


def declare(sender: Identity, descriptors: list[dict]) -> bytes:
    c = itertools.count(1)
    return seal(sender, typ=int(MessageType.CAP_DECLARE), to=OTHER.did, body={"capabilities": descriptors},
                now_ms=T0, entropy=lambda n: next(c).to_bytes(n, "big"), reply_to=bytes(16))[1]


def test_signed_unsigned_and_altered_descriptors_are_told_apart() -> None:
    manifest = demo_manifest()
    signed = sign_manifest(manifest, PUBLISHER).capabilities[0].descriptor
    unsigned = manifest.capabilities[1].descriptor
    altered = msgspec.structs.replace(signed, notes="altered after signing")
    inspector = Inspector(default_resolver(), now_ms=T0)
    rec = inspector.message(declare(PUBLISHER, [signed.to_wire(), unsigned.to_wire(), altered.to_wire()]))
    assert rec.notes[0] == f"descriptor {signed.id}: signed by the sender, verifies"
    assert rec.notes[1] == f"descriptor {unsigned.id}: unsigned"
    assert rec.notes[2].startswith(f"descriptor {altered.id}: signature does not verify")
    assert record_to_json(rec)["notes"] == rec.notes
    # Declared by someone else than the signer: it does not verify under the sender's key.
    relayed = inspector.message(declare(OTHER, [signed.to_wire()]))
    assert "does not verify" in relayed.notes[0]
