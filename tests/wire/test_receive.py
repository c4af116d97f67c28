"""The receive pipeline: every failure code, the order of checks, inspect()."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import cbor2
import pytest

from ampcap.errors import AmpError
from ampcap.wire.cbor import DecodeLimits, dumps, loads
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import Keyring, default_resolver
from ampcap.wire.receive import Finding, ReceivePipeline, SignatureVerdict, TimeVerdict
from ampcap.wire.replay import ReplayStatus

NOW = 1_795_343_646_134
ALICE = Identity.from_seed(bytes(range(32)))
BOB = Identity.from_seed(bytes(range(1, 33)))
WEB = Identity.from_seed(b"\x05" * 32, did="did:web:example.com:agent:carol")


def entropy():  # type: ignore[no-untyped-def]
    c = itertools.count(1)
    return lambda n: next(c).to_bytes(n, "big")


def message(**kw: Any) -> bytes:
    sender = kw.pop("sender", ALICE)
    args: dict[str, Any] = dict(typ=0x10, to=BOB.did, body={"text": "hi"}, now_ms=NOW, entropy=entropy(), ttl=60_000)
    args.update(kw)
    return seal(sender, **args)[1]


def resign(m: dict[str, Any], sender: Identity = ALICE) -> bytes:
    """Re-sign a hand-edited message map (to reach checks behind the signature)."""
    from ampcap.wire.signing import sig_input_from_fields

    signed = sig_input_from_fields(id=m["id"], typ=m["typ"], ts=m["ts"], ttl=m["ttl"], sender=m["from"],
                                   to=m["to"], reply_to=m.get("reply_to"), thread_id=m.get("thread_id"),
                                   body_bytes=dumps(m["body"]))
    m["sig"] = sender.sign(signed)
    return dumps(m)


def pipeline(**kw: Any) -> ReceivePipeline:
    kw.setdefault("decrypt_with", [BOB])
    return ReceivePipeline(default_resolver(Keyring.from_mapping({WEB.did: {"ed25519": WEB.public_key.hex()}})), **kw)


def code_of(pipe: ReceivePipeline, raw: bytes, now: int = NOW) -> int:
    with pytest.raises(AmpError) as info:
        pipe.check(raw, now)
    return info.value.code


def test_accepts_a_good_message() -> None:
    inbound = pipeline().check(message(), NOW)
    assert inbound.body == {"text": "hi"} and inbound.envelope.sender == ALICE.did
    assert inbound.replay is ReplayStatus.NEW and not inbound.duplicate and not inbound.decrypted


def test_keyring_sender() -> None:
    assert pipeline().check(message(sender=WEB), NOW).envelope.sender == WEB.did


def test_1001_undecodable_and_bad_shape() -> None:
    assert code_of(pipeline(), b"\xff\x00") == 1001
    assert code_of(pipeline(), dumps({"v": 1})) == 1001
    assert code_of(pipeline(limits=DecodeLimits(max_bytes=50)), message()) == 1001


def test_1004_unsupported_version_before_type_and_time() -> None:
    m = loads(message())
    m["v"] = 2
    m["typ"] = 0x7F
    assert code_of(pipeline(), resign(m), now=NOW + 10**9) == 1004
    assert pipeline(supported_versions={1, 2}).check(resign({**m, "typ": 0x10}), NOW).envelope.v == 2


def test_1005_unknown_type_before_time() -> None:
    m = loads(message())
    m["typ"] = 0x7F
    assert code_of(pipeline(), resign(m), now=NOW + 10**9) == 1005


def test_1003_time_rules() -> None:
    raw = message()
    pipeline().check(raw, NOW + 60_000)  # now == ts + ttl is still valid
    assert code_of(pipeline(), raw, NOW + 60_001) == 1003  # expired
    pipeline().check(raw, NOW - 30_000)  # exactly the skew
    assert code_of(pipeline(), raw, NOW - 30_001) == 1003  # from the future
    assert pipeline(max_skew_ms=60_000).check(raw, NOW - 50_000)
    # id timestamp must agree with ts within 1 s
    m = loads(raw)
    m["id"] = (NOW + 1000).to_bytes(8, "big") + m["id"][8:]
    pipeline().check(resign(m), NOW)
    m["id"] = (NOW + 1001).to_bytes(8, "big") + m["id"][8:]
    assert code_of(pipeline(), resign(m), NOW) == 1003


def test_ttl_zero_is_valid_only_at_ts() -> None:
    raw = message(ttl=0)
    pipeline().check(raw, NOW)
    assert code_of(pipeline(), raw, NOW + 1) == 1003


def test_3001_unknown_sender_before_signature() -> None:
    stranger = Identity.from_seed(b"\x07" * 32, did="did:web:stranger.example")
    assert code_of(pipeline(), message(sender=stranger)) == 3001


def test_3001_not_addressed_to_us_when_the_pipeline_knows_who_we_are() -> None:
    # ``to`` is signed so a message cannot be rerouted (RFC 001 §8.1): one
    # Alice signed for Carol must not be accepted by Bob, valid as it is.
    pipe = pipeline(recipient=BOB.did)
    assert code_of(pipe, message(to=WEB.did)) == 3001
    assert code_of(pipe, message(to=[WEB.did, ALICE.did])) == 3001
    assert code_of(pipe, message(to="did:web:unknown.invalid", sender=ALICE)) == 3001
    assert pipe.check(message(to=BOB.did), NOW).envelope.to == BOB.did
    assert pipe.check(message(to=[WEB.did, BOB.did], entropy=entropy()), NOW + 1)  # one of several
    assert pipe.check(message(to=f"{BOB.did}#key-1", now_ms=NOW + 2), NOW + 2)  # a DID URL names the DID
    # HELLO is the exception: before our HELLO_ACK a client cannot know our DID.
    hello = message(typ=0x70, to="did:web:unknown.invalid", body={"versions": ["1.0"]}, now_ms=NOW + 3)
    assert pipe.check(hello, NOW + 3).envelope.typ == 0x70
    assert pipeline().check(message(to=WEB.did, now_ms=NOW + 4), NOW + 4)  # no recipient given: not checked


def test_1002_bad_signature() -> None:
    m = loads(message())
    m["body"] = {"text": "tampered"}
    assert code_of(pipeline(), dumps(m)) == 1002
    m = loads(message())
    m["sig"] = m["sig"][:10]
    assert code_of(pipeline(), dumps(m)) == 1002
    # a sender claiming someone else's did:key
    assert code_of(pipeline(), resign(loads(message()), sender=BOB)) == 1002


def test_non_deterministic_body_bytes_are_re_encoded_before_verifying() -> None:
    m = loads(message(body={"b": 1, "a": 2}))
    # Same values, keys in non-deterministic order on the wire: still verifies (§8.2).
    m["body"] = {"b": 1, "a": 2}
    assert pipeline().check(cbor2.dumps(m), NOW).body == {"b": 1, "a": 2}


def test_3001_decrypt_failure_and_success() -> None:
    raw = message(encrypt_to=BOB.x25519_public, body={"msg": "secret"})
    assert pipeline().check(raw, NOW).body == {"msg": "secret"}
    assert code_of(pipeline(decrypt_with=[ALICE]), raw) == 3001
    assert code_of(pipeline(decrypt_with=[]), raw) == 3001


@dataclass
class FakeViolation:
    path: str
    expected: str
    found: str
    kind: str = "error"
    code: int = 1001


class FakeSchemas:
    def __init__(self, violations: list[FakeViolation]) -> None:
        self.violations = violations
        self.seen: list[tuple[int, Any]] = []

    def validate_body(self, typ: int, body: Any) -> list[FakeViolation]:
        self.seen.append((typ, body))
        return self.violations


def test_body_schema_violations_map_with_their_code() -> None:
    raw = message(encrypt_to=BOB.x25519_public, body={"msg": 1})
    schemas = FakeSchemas([FakeViolation("msg", "tstr", "uint")])
    with pytest.raises(AmpError) as info:
        pipeline(schemas=schemas).check(raw, NOW)
    assert info.value.code == 1001 and info.value.path == "body.msg"
    assert schemas.seen == [(0x10, {"msg": 1})]  # the decrypted body was validated
    schemas4001 = FakeSchemas([FakeViolation("id", "matching capability", "other", code=4001)])
    assert code_of(pipeline(schemas=schemas4001), message()) == 4001
    warn_only = FakeSchemas([FakeViolation("x", "-", "-", kind="extension-key")])
    assert pipeline(schemas=warn_only).check(message(), NOW)


def test_signature_is_checked_before_body_schema() -> None:
    m = loads(message())
    m["body"] = {"text": 5}
    assert code_of(pipeline(schemas=FakeSchemas([FakeViolation("text", "tstr", "uint")])), dumps(m)) == 1002


def test_replay_duplicates_and_conflicts() -> None:
    pipe = pipeline()
    raw = message()
    assert not pipe.check(raw, NOW).duplicate
    again = pipe.check(raw, NOW + 5)
    assert again.duplicate and again.replay is ReplayStatus.DUPLICATE
    m = loads(raw)
    m["body"] = {"text": "different"}
    other = pipe.check(resign(m), NOW + 6)
    assert other.duplicate and other.replay is ReplayStatus.CONFLICT
    # ext is not signed: changing it is still a retry of the same message
    m = loads(raw)
    m["ext"] = {"trace": 1}
    assert pipe.check(dumps(m), NOW).replay is ReplayStatus.DUPLICATE


def test_inspect_collects_every_finding() -> None:
    m = loads(message())
    m["v"] = 9
    m["typ"] = 0x7F
    m["body"] = {"text": "tampered"}
    report = pipeline().inspect(dumps(m), NOW + 10**8)
    codes = [f.code for f in report.findings]
    assert codes == [1004, 1005, 1003, 1002]
    assert report.envelope is not None and report.body == {"text": "tampered"} and report.body_known
    assert report.signature is SignatureVerdict.INVALID and report.time is TimeVerdict.EXPIRED
    assert not report.ok


def test_inspect_verdicts() -> None:
    good = pipeline().inspect(message(), NOW)
    assert good.ok and good.signature is SignatureVerdict.VALID and good.time is TimeVerdict.VALID
    stranger = Identity.from_seed(b"\x07" * 32, did="did:web:stranger.example")
    unknown = pipeline().inspect(message(sender=stranger), NOW)
    assert unknown.signature is SignatureVerdict.UNKNOWN_KEY and unknown.findings[0].code == 3001
    future = pipeline().inspect(message(), NOW - 60_000)
    assert future.time is TimeVerdict.FUTURE and [f.code for f in future.findings] == [1003]
    enc = pipeline(decrypt_with=[]).inspect(message(encrypt_to=BOB.x25519_public), NOW)
    assert enc.signature is SignatureVerdict.UNKNOWN_KEY and not enc.body_known
    junk = pipeline().inspect(b"\x00\x01", NOW)
    assert junk.findings == [Finding(1001, junk.findings[0].message, None)] and junk.envelope is None
    shape = pipeline().inspect(dumps({"v": 1, "body": None}), NOW)
    assert shape.decoded == {"v": 1, "body": None} and shape.findings[0].code == 1001


def test_inspect_does_not_touch_the_replay_cache() -> None:
    pipe = pipeline()
    raw = message()
    assert pipe.inspect(raw, NOW).replay is ReplayStatus.NEW
    assert not pipe.check(raw, NOW).duplicate
    report = pipe.inspect(raw, NOW)
    assert report.replay is ReplayStatus.DUPLICATE and report.ok
    m = loads(raw)
    m["body"] = {"text": "other"}
    assert pipe.inspect(resign(m), NOW).replay is ReplayStatus.CONFLICT
