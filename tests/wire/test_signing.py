"""Sig_Input construction (RFC 001 §8.1) and Ed25519 verification."""

from __future__ import annotations

import cbor2
import pytest

from ampcap.wire.cbor import dumps, loads
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.signing import Profile, sig_input, sig_input_from_fields, verify_signature

NOW = 1_707_055_200_000
ALICE = Identity.from_seed(bytes(range(32)), did="did:web:example.com:agent:alice")
FIELDS = dict(id=bytes(16), typ=0x10, ts=NOW, ttl=86_400_000, sender=ALICE.did,
              to="did:web:example.com:agent:bob", reply_to=None, thread_id=None)


def test_sig_input_structure_rfc_profile() -> None:
    raw = sig_input_from_fields(**FIELDS, body_bytes=b"\xf6")
    context, protected, headers, body = loads(raw)
    assert context == "AMP-v1" and protected == b""
    assert list(headers) == ["id", "to", "ts", "ttl", "typ", "from"]  # deterministic order
    assert body == b"\xf6"
    assert raw == cbor2.dumps(["AMP-v1", b"", {"id": bytes(16), "typ": 0x10, "ts": NOW, "ttl": 86_400_000,
                                               "from": ALICE.did, "to": FIELDS["to"]}, b"\xf6"], canonical=True)


def test_rust_example_profile_uses_integer_one() -> None:
    raw = sig_input_from_fields(**FIELDS, body_bytes=b"\xf6", profile=Profile.RUST_EXAMPLE)
    assert loads(raw)[1] == 1
    assert raw != sig_input_from_fields(**FIELDS, body_bytes=b"\xf6")


def test_optional_headers_only_when_present() -> None:
    both = loads(sig_input_from_fields(**{**FIELDS, "reply_to": b"r" * 16, "thread_id": b""}, body_bytes=b"\xf6"))
    assert list(both[2]) == ["id", "to", "ts", "ttl", "typ", "from", "reply_to", "thread_id"]
    assert both[2]["thread_id"] == b""  # empty but present is still signed
    absent = loads(sig_input_from_fields(**FIELDS, body_bytes=b"\xf6"))
    assert "reply_to" not in absent[2] and "thread_id" not in absent[2]


def test_multiple_recipients_and_large_integers() -> None:
    fields = {**FIELDS, "to": ("did:a", "did:b"), "ts": 2**40, "ttl": 2**33, "typ": 0xF0}
    raw = sig_input_from_fields(**fields, body_bytes=dumps({"k": [1, 2]}))
    decoded = loads(raw, require_deterministic=True)
    assert decoded[2]["to"] == ["did:a", "did:b"] and decoded[2]["ts"] == 2**40


def test_signature_covers_every_signed_field() -> None:
    env, _ = seal(ALICE, typ=0x10, to="did:web:example.com:agent:bob", body={"a": 1}, now_ms=NOW,
                  entropy=lambda n: b"\x01" * n, reply_to=b"r" * 16, thread_id=b"t")
    body_bytes = dumps(env.body)
    good = sig_input(env, body_bytes)
    assert verify_signature(ALICE.public_key, good, env.sig)
    import msgspec
    for change in ({"typ": 0x11}, {"ts": NOW + 1}, {"ttl": 1}, {"sender": "did:x"}, {"to": "did:y"},
                   {"reply_to": None}, {"thread_id": b"u"}, {"id": b"\x00" * 16}):
        other = msgspec.structs.replace(env, **change)
        assert not verify_signature(ALICE.public_key, sig_input(other, body_bytes), env.sig), change
    assert not verify_signature(ALICE.public_key, sig_input(env, dumps({"a": 2})), env.sig)
    # ext is not signed (§8.7)
    assert verify_signature(ALICE.public_key, sig_input(msgspec.structs.replace(env, ext={"x": 1}), body_bytes), env.sig)


@pytest.mark.parametrize("key, sig", [(b"\x00" * 31, b"\x00" * 64), (b"\x00" * 32, b"\x00" * 63), (b"\xff" * 32, b"\x00" * 64)])
def test_verify_signature_never_raises(key: bytes, sig: bytes) -> None:
    assert verify_signature(key, b"msg", sig) is False


# The byte-built writers (Sig_Input here, the envelope in envelope.py) must
# equal a generic deterministic encoder on every field shape, including the
# ones the fast paths skip: short or long ids, small and huge integers,
# recipient lists, empty optional fields, encryption and ext.

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ampcap.wire.envelope import EncryptedPayload, Envelope, encode_envelope  # noqa: E402

_uint = st.one_of(st.integers(0, 30), st.integers(0, 2**32 + 5), st.integers(2**32 - 2, 2**64 - 1))
_did = st.text(min_size=1, max_size=80)
_fields = st.fixed_dictionaries({
    "id": st.binary(max_size=40), "typ": _uint, "ts": _uint, "ttl": _uint, "sender": _did,
    "to": st.one_of(_did, st.lists(_did, min_size=1, max_size=4).map(tuple)),
    "reply_to": st.none() | st.binary(max_size=30), "thread_id": st.none() | st.binary(max_size=30)})
_WIRE_KEYS = {"sender": "from"}


def _as_map(fields: dict) -> dict:
    return {_WIRE_KEYS.get(k, k): (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()
            if v is not None}


@settings(max_examples=300, deadline=None)
@given(_fields, st.sampled_from(list(Profile)), st.binary(max_size=300))
def test_sig_input_equals_a_generic_deterministic_encoding(fields: dict, profile: Profile, body: bytes) -> None:
    expected = cbor2.dumps(["AMP-v1", profile.protected, _as_map(fields), body], canonical=True)
    assert sig_input_from_fields(**fields, body_bytes=body, profile=profile) == expected


@settings(max_examples=300, deadline=None)
@given(_fields, st.integers(0, 2**64 - 1), st.binary(max_size=70),
       st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
       st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=5), max_size=4)),
       st.booleans())
def test_envelope_encoding_equals_a_generic_deterministic_encoding(fields: dict, v: int, sig: bytes, body: object,
                                                                   ext: dict | None, encrypted: bool) -> None:
    enc = EncryptedPayload(nonce=b"n" * 24, ciphertext=b"c" * 5) if encrypted else None
    env = Envelope(v=v, sig=sig, body=None if encrypted else body, enc=enc, ext=ext, **fields)
    m = {**_as_map(fields), "v": v, "sig": sig}
    if encrypted:
        m["enc"] = enc.to_map()
    else:
        m["body"] = body
    if ext is not None:
        m["ext"] = ext
    assert encode_envelope(env) == cbor2.dumps(m, canonical=True)
