"""The schemas at work: the receive pipeline rejects bad bodies with the
right code and path, and ``ampcap dump`` shows the verdict."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ampcap.cli import dump as dump_cli
from ampcap.cli.main import build_parser
from ampcap.errors import AmpError
from ampcap.schema import load_schemas
from ampcap.wire.envelope import seal
from ampcap.wire.frames import FrameType, encode_frame
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.registry import MessageType

NOW = 1_763_800_000_000
ALICE = Identity.from_seed(bytes(range(32)))
BOB = Identity.from_seed(bytes(range(1, 33)))
INVOKE, RESULT = int(MessageType.CAP_INVOKE), int(MessageType.CAP_RESULT)


def wire(typ: int, body: Any) -> bytes:
    _, data = seal(ALICE, typ=typ, to=BOB.did, body=body, now_ms=NOW, entropy=os.urandom)
    return data


def pipeline() -> ReceivePipeline:
    return ReceivePipeline(DidKeyResolver(), schemas=load_schemas())


@pytest.mark.parametrize(
    ("body", "code", "path"),
    [
        ({"id": "org.x.y:1.0.0"}, 1001, "body.params"),
        ({"id": "org.x.y:1.0.0", "params": 1, "timeout_ms": -5}, 1001, "body.timeout_ms"),
        ({"id": "org.x.y:1.0.0", "negotiate": {"range": ">=1.0.0"}, "params": 1}, 4001, "body.negotiate"),
        ({"id": "org.x.y:1.0.0", "capability": "org.x.z", "params": 1}, 4001, "body.capability"),
    ],
)
def test_pipeline_rejects_bad_invoke_bodies(body: dict[str, Any], code: int, path: str) -> None:
    with pytest.raises(AmpError) as info:
        pipeline().check(wire(INVOKE, body), NOW)
    assert (info.value.code, info.value.path) == (code, path)
    assert "expected" in info.value.message and "found" in info.value.message


def test_pipeline_accepts_extension_keys_and_valid_bodies() -> None:
    checker = pipeline()
    inbound = checker.check(wire(INVOKE, {"id": "org.x.y:1.0.0", "params": {"a": 1}, "priority": 3}), NOW)
    assert inbound.body["priority"] == 3
    assert checker.check(wire(RESULT, {"result": 1, "status": "success"}), NOW).body["result"] == 1


def test_pipeline_rejects_a_result_without_its_status() -> None:
    with pytest.raises(AmpError) as info:
        pipeline().check(wire(RESULT, {"result": 1}), NOW)
    assert (info.value.code, info.value.path) == (1001, "body.status")


def run_dump(argv: list[str]) -> tuple[int, str]:
    args = build_parser().parse_args(["dump", *argv])
    out = io.StringIO()
    code = dump_cli.run(args, stdin=io.BytesIO(b""), stdout=out)
    return code, out.getvalue()


def test_dump_shows_cddl_verdicts_with_paths_and_extension_keys(tmp_path: Path) -> None:
    frames = b"".join(encode_frame(FrameType.AMP_MESSAGE, data) for data in (
        wire(INVOKE, {"id": "org.x.y:1.0.0", "params": 1, "priority": 3}),
        wire(RESULT, {"status": "error", "error": {"code": "bad"}}),
    ))
    capture = tmp_path / "frames.hex"
    capture.write_text(frames.hex())
    now = ["--now", str(NOW)]
    code, out = run_dump(["--hex", "--json", *now, str(capture)])
    records = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    records = [r for r in records if "cddl" in r]
    assert [r["cddl"]["status"] for r in records] == ["valid", "invalid"]
    assert records[0]["extension_keys"] == ["body.priority"]
    assert records[1]["cddl"]["failing_paths"] == ["body.error.code"]
    code, text = run_dump(["--hex", *now, str(capture)])
    assert "cddl=invalid at body.error.code" in text
    assert "extension keys: body.priority" in text
