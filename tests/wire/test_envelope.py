"""Envelope encoding, shape-only decoding, message ids and sealing."""

from __future__ import annotations

import itertools

import cbor2
import pytest

from ampcap.errors import AmpError
from ampcap.wire.cbor import dumps, loads
from ampcap.wire.envelope import (
    EncryptedPayload, Envelope, decode_envelope, encode_envelope, envelope_from_map, id_timestamp,
    new_message_id, seal,
)
from ampcap.wire.identity import Identity

NOW = 1_795_343_646_134
ALICE = Identity.from_seed(bytes(range(32)))
BOB = Identity.from_seed(bytes(range(1, 33)))


def counter_entropy():  # type: ignore[no-untyped-def]
    c = itertools.count(1)
    return lambda n: next(c).to_bytes(n, "big")


def base_map() -> dict:
    return {"v": 1, "id": NOW.to_bytes(8, "big") + b"\x00" * 7 + b"\x01", "typ": 0x10, "ts": NOW, "ttl": 60_000,
            "from": ALICE.did, "to": BOB.did, "sig": b"\x00" * 64, "body": None}


def test_message_id_layout() -> None:
    mid = new_message_id(NOW, lambda n: b"\xab" * n)
    assert len(mid) == 16 and mid[:8] == NOW.to_bytes(8, "big") and mid[8:] == b"\xab" * 8
    assert id_timestamp(mid) == NOW
    with pytest.raises(AmpError):
        new_message_id(NOW, lambda n: b"\x00")  # short entropy is refused


def test_keys_in_any_order_are_accepted_r15() -> None:
    m = base_map()
    shuffled = dict(reversed(list(m.items())))
    raw = cbor2.dumps(shuffled)  # not deterministic order
    env = decode_envelope(raw)
    assert env.sender == ALICE.did and env.body is None
    assert encode_envelope(env) == dumps(m)  # re-encoding is deterministic


def test_encoding_is_deterministic_and_round_trips() -> None:
    env, wire = seal(ALICE, typ=0x22, to=[BOB.did, ALICE.did], body={"b": 1, "a": {3: "x", -1: "y"}},
                     now_ms=NOW, entropy=counter_entropy(), reply_to=b"r" * 16, thread_id=b"t" * 4,
                     ext={"trace_id": "abc"})
    assert wire == dumps(loads(wire))  # deterministic everywhere, including body and ext
    back = decode_envelope(wire)
    assert back == env
    assert back.to == (BOB.did, ALICE.did)
    assert back.recipients == (BOB.did, ALICE.did)
    assert encode_envelope(back) == wire


def test_null_body_is_present_on_the_wire() -> None:
    _, wire = seal(ALICE, typ=0x01, to=BOB.did, body=None, now_ms=NOW, entropy=counter_entropy())
    assert "body" in loads(wire) and loads(wire)["body"] is None


@pytest.mark.parametrize(
    "mutate, path",
    [
        (lambda m: m.pop("sig"), "sig"),
        (lambda m: m.pop("ttl"), "ttl"),
        (lambda m: m.pop("body"), "body"),
        (lambda m: m.update(id=b"short"), "id"),
        (lambda m: m.update(id="0" * 16), "id"),
        (lambda m: m.update(v=-1), "v"),
        (lambda m: m.update(v=True), "v"),
        (lambda m: m.update(typ="MESSAGE"), "typ"),
        (lambda m: m.update(ts=1.5), "ts"),
        (lambda m: m.update(to=[]), "to"),
        (lambda m: m.update(to=[ALICE.did, 7]), "to[1]"),
        (lambda m: m.update(to=b"bob"), "to"),
        (lambda m: m.update({"from": ""}), "from"),
        (lambda m: m.update({"from": 5}), "from"),
        (lambda m: m.update(reply_to=None), "reply_to"),
        (lambda m: m.update(reply_to="abc"), "reply_to"),
        (lambda m: m.update(thread_id=5), "thread_id"),
        (lambda m: m.update(ext={1: 2}), "ext"),
        (lambda m: m.update(ext=[1]), "ext"),
        (lambda m: m.update(surprise=1), "surprise"),
        (lambda m: m.update(enc={"alg": "X25519-XSalsa20-Poly1305", "mode": "authcrypt",
                                 "nonce": b"n" * 24, "ciphertext": b"c" * 20}), "enc"),
    ],
)
def test_shape_errors_are_1001_with_path(mutate, path) -> None:  # type: ignore[no-untyped-def]
    m = base_map()
    mutate(m)
    with pytest.raises(AmpError) as info:
        envelope_from_map(m)
    assert info.value.code == 1001
    assert info.value.path == path


def enc_map(**over) -> dict:  # type: ignore[no-untyped-def]
    enc = {"alg": "X25519-XSalsa20-Poly1305", "mode": "authcrypt", "nonce": b"n" * 24, "ciphertext": b"c" * 20}
    enc.update(over)
    m = base_map()
    del m["body"]
    m["enc"] = {k: v for k, v in enc.items() if v is not None}
    return m


@pytest.mark.parametrize(
    "over, path",
    [
        ({"alg": "A256GCM"}, "enc.alg"),
        ({"mode": "anoncrypt"}, "enc.mode"),
        ({"nonce": b"n" * 12}, "enc.nonce"),
        ({"nonce": None}, "enc.nonce"),
        ({"ciphertext": "text"}, "enc.ciphertext"),
        ({"extra": 1}, "enc"),
    ],
)
def test_encrypted_payload_parameters_are_1001(over, path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AmpError) as info:
        envelope_from_map(enc_map(**over))
    assert info.value.code == 1001 and info.value.path == path


def test_encrypted_shape_ok() -> None:
    env = envelope_from_map(enc_map())
    assert env.encrypted and env.body is None
    assert env.enc == EncryptedPayload(nonce=b"n" * 24, ciphertext=b"c" * 20)


def test_not_a_map() -> None:
    for raw in (dumps([1, 2]), dumps("x"), dumps(None)):
        with pytest.raises(AmpError) as info:
            decode_envelope(raw)
        assert info.value.code == 1001


def test_envelope_is_immutable() -> None:
    env = envelope_from_map(base_map())
    with pytest.raises(AttributeError):
        env.ts = 5  # type: ignore[misc]
    assert isinstance(env, Envelope)


def test_seal_with_encryption_omits_body() -> None:
    env, wire = seal(ALICE, typ=0x10, to=BOB.did, body={"msg": "hi"}, now_ms=NOW, entropy=counter_entropy(),
                     encrypt_to=BOB.x25519_public)
    m = loads(wire)
    assert "body" not in m and set(m["enc"]) == {"alg", "mode", "nonce", "ciphertext"}
    assert len(m["enc"]["nonce"]) == 24
    assert len(m["enc"]["ciphertext"]) == 16 + len(dumps({"msg": "hi"}))
    assert env.body is None and env.enc is not None
