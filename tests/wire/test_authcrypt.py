"""authcrypt (RFC 001 §8.5–8.6): NaCl box round trips, failure codes, and the
messages captured from the public Rust example (ruling R16: they, not A.6,
prove interoperable decryption)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nacl.public import Box, PrivateKey, PublicKey

from ampcap.errors import AmpError
from ampcap.wire import authcrypt
from ampcap.wire.cbor import dumps
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import Keyring, default_resolver
from ampcap.wire.receive import ReceivePipeline, SignatureVerdict
from ampcap.wire.signing import Profile

CAPTURES = Path("/work/shared/captures/rust-example")
NOW = 1_795_343_646_134
ALICE = Identity.from_seed(bytes(range(32)))
BOB = Identity.from_seed(bytes(range(1, 33)))


def test_layout_is_tag_then_ciphertext() -> None:
    nonce = bytes(range(24))
    ct = authcrypt.encrypt(b"hello", sender_secret=ALICE.x25519_secret, recipient_public=BOB.x25519_public, nonce=nonce)
    assert len(ct) == authcrypt.TAG_SIZE + 5
    # Independent check with PyNaCl's combined output (nonce || tag || ct).
    combined = Box(PrivateKey(ALICE.x25519_secret), PublicKey(BOB.x25519_public)).encrypt(b"hello", nonce)
    assert bytes(combined) == nonce + ct
    assert authcrypt.decrypt(ct, nonce, recipient_secrets=[BOB.x25519_secret], sender_public=ALICE.x25519_public) == b"hello"


def test_decrypt_tries_every_local_key() -> None:
    nonce = b"\x07" * 24
    ct = authcrypt.encrypt(b"x", sender_secret=ALICE.x25519_secret, recipient_public=BOB.x25519_public, nonce=nonce)
    other = Identity.from_seed(b"\x09" * 32)
    assert authcrypt.decrypt(ct, nonce, recipient_secrets=[other.x25519_secret, BOB.x25519_secret],
                             sender_public=ALICE.x25519_public) == b"x"


@pytest.mark.parametrize("tamper", ["flip", "truncate", "wrong-key", "wrong-sender", "empty"])
def test_decrypt_failures_are_3001(tamper: str) -> None:
    nonce = b"\x01" * 24
    ct = authcrypt.encrypt(b"secret", sender_secret=ALICE.x25519_secret, recipient_public=BOB.x25519_public, nonce=nonce)
    secrets, sender = [BOB.x25519_secret], ALICE.x25519_public
    if tamper == "flip":
        ct = ct[:3] + bytes([ct[3] ^ 1]) + ct[4:]
    elif tamper == "truncate":
        ct = ct[:10]
    elif tamper == "wrong-key":
        secrets = [ALICE.x25519_secret]
    elif tamper == "wrong-sender":
        sender = BOB.x25519_public
    else:
        secrets = []
    with pytest.raises(AmpError) as info:
        authcrypt.decrypt(ct, nonce, recipient_secrets=secrets, sender_public=sender)
    assert info.value.code == 3001


def test_sign_then_encrypt_round_trip_through_the_pipeline() -> None:
    body = {"msg": "hello", "n": [1, 2, 3], "nested": {7: "int key"}}
    env, wire = seal(ALICE, typ=0x10, to=BOB.did, body=body, now_ms=NOW, entropy=lambda n: b"\x05" * n,
                     encrypt_to=BOB.x25519_public)
    pipe = ReceivePipeline(default_resolver(), decrypt_with=[BOB])
    inbound = pipe.check(wire, NOW)
    assert inbound.body == body and inbound.decrypted
    # The ciphertext encrypts exactly the deterministic body bytes that were signed.
    assert env.enc is not None
    plain = authcrypt.decrypt(env.enc.ciphertext, env.enc.nonce, recipient_secrets=[BOB.x25519_secret],
                              sender_public=ALICE.x25519_public)
    assert plain == dumps(body)


def test_a_carrier_passes_an_encrypted_message_on_and_still_checks_its_header() -> None:
    # A relay has no secret for messages it carries: it cannot check their
    # signature (it covers the plaintext), so it passes them on unread; the
    # header checks (version, time) and the replay cache still apply.
    body = {"capability": "x", "params": {}}
    _, wire = seal(ALICE, typ=0x22, to=BOB.did, body=body, now_ms=NOW, entropy=lambda n: b"\x06" * n,
                   encrypt_to=BOB.x25519_public, ttl=60_000)
    with pytest.raises(AmpError) as info:  # not a carrier: 3001, as before
        ReceivePipeline(default_resolver()).check(wire, NOW)
    assert info.value.code == 3001
    carrier = ReceivePipeline(default_resolver(), carry_encrypted=True)
    inbound = carrier.check(wire, NOW)
    assert inbound.raw == wire and inbound.body is None and not inbound.decrypted and not inbound.duplicate
    assert carrier.check(wire, NOW).duplicate  # the same message again
    with pytest.raises(AmpError) as info:
        carrier.check(wire, NOW + 10 * 60_000)  # expired: refused before anything is carried
    assert info.value.code == 1003
    # The recipient reads and verifies what was carried.
    assert ReceivePipeline(default_resolver(), decrypt_with=[BOB]).check(inbound.raw, NOW).body == body


def test_encrypted_not_cbor_is_1001_and_wrong_plaintext_is_1002() -> None:
    from ampcap.wire.signing import sig_input_from_fields
    mid = NOW.to_bytes(8, "big") + b"\x00" * 8

    def message(plaintext: bytes, signed_body: bytes) -> bytes:
        sig = ALICE.sign(sig_input_from_fields(id=mid, typ=0x10, ts=NOW, ttl=60_000, sender=ALICE.did,
                                               to=BOB.did, reply_to=None, thread_id=None, body_bytes=signed_body))
        nonce = b"\x02" * 24
        ct = authcrypt.encrypt(plaintext, sender_secret=ALICE.x25519_secret, recipient_public=BOB.x25519_public,
                               nonce=nonce)
        return dumps({"v": 1, "id": mid, "typ": 0x10, "ts": NOW, "ttl": 60_000, "from": ALICE.did, "to": BOB.did,
                      "sig": sig, "enc": {"alg": authcrypt.ALG, "mode": authcrypt.MODE, "nonce": nonce,
                                          "ciphertext": ct}})

    pipe = ReceivePipeline(default_resolver(), decrypt_with=[BOB])
    with pytest.raises(AmpError) as info:  # signed and encrypted bytes that are not CBOR
        pipe.check(message(b"\xff\xff", b"\xff\xff"), NOW)
    assert info.value.code == 1001
    with pytest.raises(AmpError) as info:  # decrypts, but not what was signed
        pipe.check(message(dumps({"a": 1}), dumps({"a": 2})), NOW)
    assert info.value.code == 1002
    with pytest.raises(AmpError) as info:  # no local key agreement key at all
        ReceivePipeline(default_resolver()).check(message(b"\xf6", b"\xf6"), NOW)
    assert info.value.code == 3001


# ------------------------------------------------------- Rust example captures


def demo_keyring() -> Keyring:
    keys = json.loads((CAPTURES / "demo-keys.json").read_text())
    return Keyring.from_mapping({
        did: {"ed25519": k["ed25519"], "x25519": k["x25519"], "ed25519_secret": k["ed25519_seed_byte"] * 32,
              "x25519_secret": k["x25519_secret_byte"] * 32}
        for did, k in keys.items()
    })


def captured_messages() -> list[bytes]:
    out = []
    for path in sorted(CAPTURES.glob("conn*.hex")):
        data = bytes.fromhex(path.read_text().strip())
        pos = 0
        while pos < len(data):  # the example's own framing: 4-byte BE length, then CBOR
            size = int.from_bytes(data[pos:pos + 4], "big")
            out.append(data[pos + 4:pos + 4 + size])
            pos += 4 + size
        assert pos == len(data)
    return out


needs_captures = pytest.mark.skipif(not CAPTURES.exists(), reason="Rust example captures not available")


@needs_captures
def test_demo_keyring_matches_published_public_keys() -> None:
    ring = demo_keyring()
    assert len(ring.identities()) == 3  # every secret matches its published public key


@needs_captures
def test_rust_authcrypt_messages_decrypt_and_verify_under_rust_profile() -> None:
    ring = demo_keyring()
    rust = ReceivePipeline(default_resolver(ring), decrypt_with=ring.x25519_secrets(), profile=Profile.RUST_EXAMPLE)
    encrypted = 0
    for raw in captured_messages():
        env = decode_envelope(raw)
        inbound = rust.check(raw, env.ts)  # evaluate at the capture's own time
        if env.enc is not None:
            encrypted += 1
            assert inbound.decrypted and set(inbound.body) == {"msg"}
            assert inbound.body["msg"].startswith("hello-from-")
    assert encrypted >= 2


@needs_captures
def test_rust_messages_fail_under_rfc_profile_and_dump_names_the_profile() -> None:
    ring = demo_keyring()
    rfc = ReceivePipeline(default_resolver(ring), decrypt_with=ring.x25519_secrets())
    for raw in captured_messages():
        env = decode_envelope(raw)
        with pytest.raises(AmpError) as info:
            rfc.check(raw, env.ts)
        assert info.value.code == 1002
        report = rfc.inspect(raw, env.ts)
        assert report.signature is SignatureVerdict.INVALID
        assert report.signature_profile is Profile.RUST_EXAMPLE
        assert report.body_known  # decrypted even though the signature failed


@needs_captures
def test_we_can_write_messages_the_rust_profile_accepts() -> None:
    ring = demo_keyring()
    alice = next(i for i in ring.identities() if i.did.endswith("alice"))
    bob = next(i for i in ring.identities() if i.did.endswith("bob"))
    _, wire = seal(alice, typ=0x10, to=bob.did, body={"msg": "hi"}, now_ms=NOW, entropy=lambda n: b"\x03" * n,
                   encrypt_to=bob.x25519_public, profile=Profile.RUST_EXAMPLE, ttl=60_000)
    rust = ReceivePipeline(default_resolver(ring), decrypt_with=[bob], profile=Profile.RUST_EXAMPLE)
    assert rust.check(wire, NOW).body == {"msg": "hi"}
