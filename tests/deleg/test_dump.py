"""``ampcap dump`` shows a delegation chain and its verdict (RFC 005)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from deleg_helpers import IDS, NOW, did, evidence  # noqa: E402

from ampcap.deleg.credential import credential_envelope  # noqa: E402
from ampcap.dump.records import Inspector, load_schemas  # noqa: E402
from ampcap.dump.render import record_to_json, render_text  # noqa: E402
from ampcap.wire.envelope import seal  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

CAP = "org.ampcap.demo.echo"
LINKS = [{"from": "A", "to": "B", "scope": {"capabilities": [CAP]}, "allow_subdelegation": True},
         {"from": "B", "to": "C", "scope": {"capabilities": [f"{CAP}:1.0.0"]}}]


def _invoke(sender: str, capability_id: str) -> bytes:
    body = {"id": capability_id, "params": {"message": "x"}, "delegation": evidence(LINKS)}
    _, raw = seal(IDS[sender], typ=int(MessageType.CAP_INVOKE), to=did("D"), body=body, now_ms=NOW,
                  entropy=os.urandom)
    return raw


def test_dump_shows_chain_and_verdict() -> None:
    inspector = Inspector(DidKeyResolver(), schemas=load_schemas(), now_ms=NOW)
    ok = inspector.message(_invoke("C", f"{CAP}:1.0.0"))
    text = render_text(ok)
    assert "delegation: " + " -> ".join(did(x) for x in "ABC") in text
    assert "verdict: ALLOW" in text
    doc = record_to_json(ok)
    assert doc["delegation"]["verdict"]["decision"] == "allow"
    assert [link["delegation_id"] for link in doc["delegation"]["links"]] == ["delegation:0", "delegation:1"]
    json.dumps(doc)
    wrong_version = inspector.message(_invoke("C", f"{CAP}:2.0.0"))
    assert record_to_json(wrong_version)["delegation"]["verdict"]["reason_code"] == 3004
    not_theirs = inspector.message(_invoke("B", f"{CAP}:1.0.0"))
    assert "verdict: DENY 3001" in render_text(not_theirs)
    # A DELEG_GRANT's credential is shown too.
    grant = {"credential": credential_envelope(evidence(LINKS[:1])["chain"][0]["credential"])}
    _, raw = seal(IDS["A"], typ=int(MessageType.DELEG_GRANT), to=did("B"), body=grant, now_ms=NOW,
                  entropy=os.urandom)
    assert record_to_json(inspector.message(raw))["delegation"]["verdict"]["decision"] == "allow"


def test_dump_cli_json(tmp_path: Path) -> None:
    hex_file = tmp_path / "msg.bin"
    from ampcap.wire.frames import FrameType, encode_frame

    hex_file.write_bytes(encode_frame(FrameType.AMP_MESSAGE, _invoke("C", f"{CAP}:1.0.0")))
    out = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "dump", "--json", "--now", str(NOW),
                          str(hex_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.splitlines()[0])
    assert doc["delegation"]["verdict"]["decision"] == "allow"
