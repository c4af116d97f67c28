"""RFC 001 Appendix A: every positive vector byte for byte, and N1–N5.

The vector data is transcribed in tests/vectors/rfc001/appendix_a.json.
A.6 is checked for structure, Sig_Input and signature only: its ciphertext
does not open under standard NaCl box (ruling R16).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.wire.cbor import dumps, loads
from ampcap.wire.envelope import decode_envelope, encode_envelope, seal
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import Keyring, default_resolver
from ampcap.wire.receive import ReceivePipeline, SignatureVerdict
from ampcap.wire.signing import sig_input, verify_signature

DATA = json.loads((Path(__file__).parents[1] / "vectors" / "rfc001" / "appendix_a.json").read_text())
COMMON = DATA["common"]
VECTORS: dict[str, dict[str, Any]] = DATA["vectors"]
ALICE, BOB = COMMON["from"], COMMON["to"]
SEED = bytes.fromhex(COMMON["ed25519_seed"])
PUBLIC = bytes.fromhex(COMMON["ed25519_public"])


def keyring() -> Keyring:
    # A.1: both DIDs resolve to the same signing key in the test DID documents.
    return Keyring.from_mapping({
        ALICE: {"ed25519": COMMON["ed25519_public"], "x25519": COMMON["x25519_sender_public"],
                "x25519_secret": COMMON["x25519_sender_secret"]},
        BOB: {"ed25519": COMMON["ed25519_public"], "x25519": COMMON["x25519_recipient_public"],
              "x25519_secret": COMMON["x25519_recipient_secret"]},
    })


def pipeline(**kwargs: Any) -> ReceivePipeline:
    ring = keyring()
    kwargs.setdefault("decrypt_with", ring.x25519_secrets())
    return ReceivePipeline(default_resolver(ring), **kwargs)


def scripted(*chunks: bytes):  # type: ignore[no-untyped-def]
    it: Iterator[bytes] = iter(chunks)

    def entropy(n: int) -> bytes:
        chunk = next(it)
        assert len(chunk) == n
        return chunk

    return entropy


def build(name: str) -> tuple[Any, bytes]:
    v = VECTORS[name]
    ident = Identity.from_seed(SEED, did=v["from"], x25519_secret=bytes.fromhex(COMMON["x25519_sender_secret"]))
    mid = bytes.fromhex(v["id"])
    encrypt = name == "A.6"
    return seal(
        ident, typ=v["typ"], to=v["to"], body=loads(bytes.fromhex(v["body_cbor"])), now_ms=v["ts"],
        entropy=scripted(mid[8:], bytes.fromhex(COMMON["nonce"])), ttl=COMMON["ttl"],
        reply_to=bytes.fromhex(v["reply_to"]) if "reply_to" in v else None,
        encrypt_to=bytes.fromhex(COMMON["x25519_recipient_public"]) if encrypt else None,
    )


PLAIN = [k for k in VECTORS if k != "A.6"]


def test_common_parameters() -> None:
    ident = Identity.from_seed(SEED)
    assert ident.public_key == PUBLIC
    sender = Identity.from_seed(SEED, x25519_secret=bytes.fromhex(COMMON["x25519_sender_secret"]))
    assert sender.x25519_public.hex() == COMMON["x25519_sender_public"]


@pytest.mark.parametrize("name", PLAIN)
def test_build_matches_vector_bytes(name: str) -> None:
    v = VECTORS[name]
    env, wire = build(name)
    assert env.id.hex() == v["id"]
    assert dumps(env.body).hex() == v["body_cbor"]
    assert sig_input(env, dumps(env.body)).hex() == v["sig_input"]
    assert env.sig.hex() == v["signature"]
    assert wire.hex() == v["message"]
    assert encode_envelope(env) == wire


@pytest.mark.parametrize("name", PLAIN)
def test_vector_decodes_and_verifies(name: str) -> None:
    v = VECTORS[name]
    raw = bytes.fromhex(v["message"])
    env = decode_envelope(raw)
    assert env.sender == v["from"] and env.to == v["to"] and env.typ == v["typ"]
    assert verify_signature(PUBLIC, bytes.fromhex(v["sig_input"]), env.sig)
    inbound = pipeline().check(raw, now_ms=v["ts"] + 1000)
    assert inbound.envelope == env
    assert not inbound.duplicate
    assert encode_envelope(env) == raw


def test_a6_structure_sig_input_and_signature() -> None:
    v = VECTORS["A.6"]
    raw = bytes.fromhex(v["message"])
    env = decode_envelope(raw)
    assert env.body is None and env.enc is not None
    assert env.enc.alg == "X25519-XSalsa20-Poly1305" and env.enc.mode == "authcrypt"
    assert env.enc.nonce.hex() == COMMON["nonce"]
    assert env.enc.ciphertext.hex() == v["ciphertext"]
    assert encode_envelope(env) == raw  # our deterministic encoding reproduces it
    body_bytes = bytes.fromhex(v["body_cbor"])
    assert sig_input(env, body_bytes).hex() == v["sig_input"]
    assert verify_signature(PUBLIC, bytes.fromhex(v["sig_input"]), env.sig)
    built, _ = build("A.6")
    assert built.sig.hex() == v["signature"]
    # Our (standard NaCl box) ciphertext has the same length: tag(16) + body.
    assert built.enc is not None and len(built.enc.ciphertext) == len(bytes.fromhex(v["ciphertext"]))


def test_a6_as_published_does_not_decrypt_r16() -> None:
    with pytest.raises(AmpError) as info:
        pipeline().check(bytes.fromhex(VECTORS["A.6"]["message"]), VECTORS["A.6"]["ts"])
    assert info.value.code == 3001


def test_a6_with_our_ciphertext_passes_the_pipeline() -> None:
    _, wire = build("A.6")
    inbound = pipeline().check(wire, VECTORS["A.6"]["ts"])
    assert inbound.body == {"msg": "secret"} and inbound.decrypted


# ------------------------------------------------------------ negative vectors


def test_n1_flipped_signature_bit_is_1002() -> None:
    raw = bytearray(bytes.fromhex(VECTORS["A.2"]["message"]))
    sig_at = raw.index(bytes.fromhex(VECTORS["A.2"]["signature"]))
    raw[sig_at + 5] ^= 0x01
    with pytest.raises(AmpError) as info:
        pipeline().check(bytes(raw), VECTORS["A.2"]["ts"])
    assert info.value.code == 1002


def test_n2_expired_is_1003() -> None:
    v = VECTORS["A.2"]
    raw = bytes.fromhex(v["message"])
    pipeline().check(raw, v["ts"] + COMMON["ttl"])  # the last valid instant
    with pytest.raises(AmpError) as info:
        pipeline().check(raw, v["ts"] + COMMON["ttl"] + 1)
    assert info.value.code == 1003


def test_n3_flipped_ciphertext_byte_is_3001() -> None:
    for source in (bytes.fromhex(VECTORS["A.6"]["message"]), build("A.6")[1]):
        env = decode_envelope(source)
        assert env.enc is not None
        raw = bytearray(source)
        at = raw.index(env.enc.ciphertext)
        raw[at + 3] ^= 0xFF
        with pytest.raises(AmpError) as info:
            pipeline().check(bytes(raw), env.ts)
        assert info.value.code == 3001


def test_n4_unassigned_type_is_1005() -> None:
    v = VECTORS["A.2"]
    env = decode_envelope(bytes.fromhex(v["message"]))
    ident = Identity.from_seed(SEED, did=ALICE)
    for typ in (0x0C, 0x7F, 0xEE):
        _, wire = seal(ident, typ=typ, to=BOB, body=None, now_ms=env.ts, entropy=scripted(env.id[8:]),
                       ttl=env.ttl)
        with pytest.raises(AmpError) as info:
            pipeline().check(wire, env.ts)
        assert info.value.code == 1005


def test_n5_relay_ack_from_untrusted_sender_is_1001() -> None:
    v = VECTORS["A.4"]
    body = loads(bytes.fromhex(v["body_cbor"]))
    body["ack_source"] = "relay"
    ident = Identity.from_seed(SEED, did=v["from"])
    mid = bytes.fromhex(v["id"])
    _, wire = seal(ident, typ=3, to=v["to"], body=body, now_ms=v["ts"], entropy=scripted(mid[8:]),
                   ttl=COMMON["ttl"], reply_to=bytes.fromhex(v["reply_to"]))
    with pytest.raises(AmpError) as info:
        pipeline().check(wire, v["ts"])
    assert info.value.code == 1001 and info.value.path == "body.ack_source"
    # the same ACK from a configured trusted relay passes
    assert pipeline(trusted_relays={v["from"]}).check(wire, v["ts"]).body["ack_source"] == "relay"


def test_inspect_reports_vectors_as_valid() -> None:
    for name in PLAIN:
        report = pipeline().inspect(bytes.fromhex(VECTORS[name]["message"]), VECTORS[name]["ts"])
        assert report.ok and report.signature is SignatureVerdict.VALID, name
