"""The dump's Inspector: CDDL verdicts through the schema-layer contract,
partial envelopes, and garbage that must never escape as anything but a record."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import cbor2
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.dump.records import Inspector
from ampcap.dump.render import Style, dumps_json, record_to_json, render_text
from ampcap.wire.envelope import seal
from ampcap.wire.frames import Frame, FrameType
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import default_resolver
from ampcap.wire.registry import MessageType

ALICE = Identity.from_seed(b"\x41" * 32)
T0 = 1_795_000_000_000


@dataclass
class Violation:  # the shape ampcap.schema reports (docs/architecture.md)
    path: str
    expected: str
    found: str
    kind: str
    code: int


class FakeSchemas:
    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        self.calls: list[tuple[int, Any]] = []

    def validate_body(self, typ: int, body: Any) -> list[Violation]:
        self.calls.append((typ, body))
        return self.violations


def invoke_bytes(body: Any) -> bytes:
    c = itertools.count(1)
    return seal(ALICE, typ=int(MessageType.CAP_INVOKE), to=ALICE.did, body=body, now_ms=T0,
                entropy=lambda n: next(c).to_bytes(n, "big"))[1]


def test_cddl_verdict_failing_path_and_extension_keys() -> None:
    schemas = FakeSchemas([
        Violation("params.a", "number", "text", "error", 1001),
        Violation("x-trace", "no such key", "x-trace", "extension-key", 1001),
        Violation("id", "id without negotiate", "both", "error", 4001),
    ])
    insp = Inspector(default_resolver(), schemas=schemas, now_ms=T0)
    rec = insp.message(invoke_bytes({"capability": "c", "params": {"a": "1"}, "x-trace": 1}))
    assert schemas.calls and schemas.calls[0][0] == int(MessageType.CAP_INVOKE)
    assert rec.cddl.status == "invalid"
    assert rec.cddl.failing_paths == ("body.params.a", "body.id")
    assert rec.cddl.extension_keys == ("body.x-trace",)
    assert [(e.code, e.path) for e in rec.errors] == [(1001, "body.params.a"), (4001, "body.id")]
    out = record_to_json(rec)
    assert out["cddl"] == {"status": "invalid", "failing_paths": ["body.params.a", "body.id"]}
    assert out["extension_keys"] == ["body.x-trace"]
    text = render_text(rec, Style())
    assert "cddl=invalid at body.params.a, body.id" in text and "extension keys: body.x-trace" in text


def test_cddl_valid_and_unavailable() -> None:
    rec = Inspector(default_resolver(), schemas=FakeSchemas([]), now_ms=T0).message(invoke_bytes({}))
    assert rec.cddl.status == "valid" and rec.errors == []
    rec = Inspector(default_resolver(), now_ms=T0).message(invoke_bytes({}))
    assert rec.cddl.status == "unavailable"


def test_partial_envelope_keeps_what_it_can() -> None:
    m = {"v": 1, "id": b"\x01" * 16, "typ": 0x22, "ts": T0, "ttl": 5, "from": ALICE.did, "to": ALICE.did}
    rec = Inspector(default_resolver(), now_ms=T0).message(cbor2.dumps(m))  # no sig, no body
    assert rec.typ == 0x22 and rec.id == b"\x01" * 16 and rec.sender == ALICE.did
    assert rec.errors and rec.errors[0].code == 1001


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([[1, 2], [b"\x01"], [ALICE.did, None], [[ALICE.did]], {"a": 1}, 7, b"did"]))
def test_any_value_in_to_is_a_finding_not_a_crash(to: Any) -> None:
    # A list of non-text recipients once reached the text renderer's join
    # and the JSON encoder: one such message ended the live tap.
    m = {"v": 1, "id": b"\x01" * 16, "typ": 0x22, "ts": T0, "ttl": 5, "from": ALICE.did, "to": to,
         "sig": b"\x00" * 64, "body": {}}
    rec = Inspector(default_resolver(), now_ms=T0).message(cbor2.dumps(m))
    assert rec.to is None and rec.sender == ALICE.did
    assert any(e.code == 1001 for e in rec.errors)
    json.loads(dumps_json(rec))
    assert f"from={ALICE.did} to=None" in render_text(rec)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(list(FrameType)))
def test_garbage_frames_become_records(data: bytes, frame_type: FrameType) -> None:
    insp = Inspector(default_resolver(), now_ms=T0)
    rec = insp.frame(Frame(frame_type, data))
    json.dumps(record_to_json(rec), allow_nan=False)
    render_text(rec)
    if frame_type in (FrameType.AMP_MESSAGE, FrameType.HANDSHAKE, FrameType.GOAWAY, FrameType.ERROR):
        assert rec.errors or rec.control is not None or rec.signature is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4))
def test_mutated_messages_become_records(flips: list[tuple[int, int]]) -> None:
    raw = bytearray(invoke_bytes({"capability": "c", "params": {"a": [1, 2.5, b"\x00"]}}))
    for pos, mask in flips:
        raw[pos % len(raw)] ^= mask
    rec = Inspector(default_resolver(), schemas=FakeSchemas([]), now_ms=T0).message(bytes(raw))
    json.dumps(record_to_json(rec), allow_nan=False)
    render_text(rec)
    assert rec.errors or rec.signature == "valid"


def test_a_peers_text_cannot_drive_the_terminal() -> None:
    # Sender, extension keys, findings and body all carry the peer's text:
    # escape sequences, a C1 CSI, a bidi override and forged lines.
    hostile = "x\x1b]0;owned\x07\x9b2J\u202e\n#9999 forged"
    m = {"v": 1, "id": b"\x01" * 16, "typ": 0x22, "ts": T0, "ttl": 5, "from": hostile, "to": hostile,
         "sig": b"\x00" * 64, "body": {"capability": hostile, hostile: 1}}
    schemas = FakeSchemas([Violation(hostile, "no such key", hostile, "extension-key", 1001),
                           Violation("capability", "a name", hostile, "error", 1001)])
    rec = Inspector(default_resolver(), schemas=schemas, now_ms=T0).message(cbor2.dumps(m))
    assert rec.sender == hostile and rec.errors
    text = render_text(rec, Style())
    lines = text.split("\n")
    assert lines[0].startswith("#") and all(line.startswith("      ") for line in lines[1:])
    assert not any(c in text for c in "\x1b\x07\x9b\u202e")
    assert "x\\x1b]0;owned\\x07\\x9b2J\\u202e\\n#9999 forged" in lines[1]  # from=…, escaped
    line = dumps_json(rec)  # what `ampcap dump --json` prints
    assert not any(c in line for c in "\x1b\x07\x9b\u202e\n")
    assert json.loads(line)["from"] == hostile
