"""``ampcap dump`` end to end (issue 2): RFC 001 vectors, JSON records,
undecodable and truncated input, control frames, the Rust example captures."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ampcap.cli.errors import CommandError
from ampcap.wire.frames import FrameType, encode_frame
from ampcap.wire.transport import GoAway, HandshakeRequest, TransportError

# The spec map's binding contract for one --json record.
RECORD_SCHEMA = {
    "type": "object",
    "required": ["frame_type", "typ", "typ_name", "id", "from", "to", "ts", "ttl", "reply_to",
                 "signature", "body", "errors"],
    "properties": {
        "frame_type": {"type": ["string", "null"]},
        "typ": {"type": ["integer", "null"]},
        "typ_name": {"type": ["string", "null"]},
        "id": {"type": ["string", "null"], "pattern": "^[0-9a-f]{32}$"},
        "from": {"type": ["string", "null"]},
        "to": {"type": ["string", "array", "null"]},
        "ts": {"type": ["integer", "null"]},
        "ttl": {"type": ["integer", "null"]},
        "reply_to": {"type": ["string", "null"], "pattern": "^[0-9a-f]{32}$"},
        "signature": {"enum": ["valid", "invalid", "unknown-key", None]},
        "errors": {"type": "array", "items": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"},
                           "path": {"type": "string"}}}},
    },
}
VECTOR_NAMES = {"A.2": "MESSAGE", "A.3": "HELLO", "A.4": "ACK", "A.5/STREAM_START": "STREAM_START",
                "A.5/STREAM_DATA": "STREAM_DATA", "A.5/STREAM_END": "STREAM_END",
                "A.8": "CRED_PRESENT", "A.9": "DELEG_GRANT"}
T0 = 1707055200000  # RFC 001 Appendix A.2 ts


def _messages(rfc001: dict[str, Any]) -> list[tuple[str, bytes]]:
    # A.6 is left out: its ciphertext does not open (ruling R16).
    return [(k, bytes.fromhex(v["message"])) for k, v in rfc001["vectors"].items() if k in VECTOR_NAMES]


def test_rfc001_vectors_framed(tmp_path: Path, dump, rfc001_ring, rfc001, jrecords) -> None:
    msgs = _messages(rfc001)
    f = tmp_path / "a.bin"
    f.write_bytes(b"".join(encode_frame(FrameType.AMP_MESSAGE, m) for _, m in msgs))
    code, out = dump(["--json", "--keyring", str(rfc001_ring), "--now", str(T0 + 10_000), str(f)])
    assert code == 0
    recs = jrecords(out)
    assert [r["typ_name"] for r in recs] == [VECTOR_NAMES[k] for k, _ in msgs]
    for (key, _), rec in zip(msgs, recs):
        jsonschema.validate(rec, RECORD_SCHEMA)
        vec = rfc001["vectors"][key]
        assert rec["frame_type"] == "AMP_MESSAGE"
        assert rec["id"] == vec["id"] and rec["typ"] == vec["typ"] and rec["ts"] == vec["ts"]
        assert rec["signature"] == "valid" and rec["signature_profile"] == "rfc"
        assert rec["expiry"] == "valid"
        assert rec["errors"] == [], (key, rec["errors"])
    ack = recs[2]
    assert ack["reply_to"] == rfc001["vectors"]["A.4"]["reply_to"]
    assert ack["answers"] == {"id": rfc001["vectors"]["A.2"]["id"], "typ_name": "MESSAGE"}
    assert ack["latency_ms"] == 2000.0
    stream_data = recs[4]["body"]
    assert stream_data["data"] == {"$bytes": b"hello".hex()}


@pytest.mark.parametrize("key", ["A.2", "A.4", "A.8"])
def test_rfc001_bare_and_hex(tmp_path: Path, dump, rfc001_ring, rfc001, jrecords, key: str) -> None:
    hex_text = rfc001["vectors"][key]["message"]
    spaced = " ".join(hex_text[i:i + 8] for i in range(0, len(hex_text), 8)) + "\n"
    code, out = dump(["--json", "--hex", "--framing", "none", "--keyring", str(rfc001_ring),
                      "--now", str(T0 + 10_000), "-"], stdin=spaced.encode())
    assert code == 0
    [rec] = jrecords(out)
    assert rec["typ_name"] == VECTOR_NAMES[key] and rec["signature"] == "valid" and rec["errors"] == []


def test_text_output_shows_everything(tmp_path: Path, dump, rfc001_ring, rfc001) -> None:
    f = tmp_path / "a2.bin"
    f.write_bytes(encode_frame(1, bytes.fromhex(rfc001["vectors"]["A.5/STREAM_END"]["message"])))
    code, out = dump(["--keyring", str(rfc001_ring), "--now", str(T0 + 10_000), "--color", "never", str(f)])
    assert code == 0
    assert "STREAM_END" in out and "sig=valid(rfc)" in out and "time=valid" in out
    assert "(32 bytes)" in out  # long byte strings shortened with their length
    assert "-- summary: 1 frames" in out and "problems found: none" in out and "error replies" not in out
    assert "\x1b[" not in out
    _, coloured = dump(["--keyring", str(rfc001_ring), "--now", str(T0), "--color", "always", str(f)])
    assert "\x1b[32m" in coloured


def test_expired_and_unknown_key(tmp_path: Path, dump, rfc001, jrecords) -> None:
    msg = rfc001["vectors"]["A.2"]["message"]
    code, out = dump(["--json", "--hex", "--framing", "none", "--now", str(T0 + 86_400_001), "-"],
                     stdin=msg.encode())
    [rec] = jrecords(out)
    assert code == 0
    assert rec["expiry"] == "expired" and rec["signature"] == "unknown-key"
    assert {e["code"] for e in rec["errors"]} == {1003, 3001}
    code, _ = dump(["--strict", "--hex", "--framing", "none", "--now", str(T0), "-"], stdin=msg.encode())
    assert code == 1


def test_undecodable_input_still_yields_a_record(dump, jrecords) -> None:
    code, out = dump(["--json", "--framing", "none", "--now", "0", "-"], stdin=b"\xff\x00garbage")
    assert code == 0
    [rec] = jrecords(out)
    jsonschema.validate(rec, RECORD_SCHEMA)
    assert rec["errors"][0]["code"] == 1001 and rec["typ"] is None and rec["body"] is None
    # Framed garbage: a bad CBOR payload inside a good frame.
    code, out = dump(["--json", "--now", "0", "-"], stdin=encode_frame(1, b"\xa1\x61\x78"))
    [rec] = jrecords(out)
    assert rec["frame_type"] == "AMP_MESSAGE" and rec["errors"][0]["code"] == 1001


def test_truncated_stream_is_reported(rfc001, dump, jrecords) -> None:
    whole = encode_frame(1, bytes.fromhex(rfc001["vectors"]["A.2"]["message"]))
    code, out = dump(["--json", "--now", str(T0), "-"], stdin=whole + whole[:-3])
    assert code == 0
    recs = jrecords(out)
    assert recs[0]["typ_name"] == "MESSAGE"
    assert recs[1]["frame_type"] is None and recs[1]["errors"][0]["code"] == 1001
    assert "stream ended inside a frame" in recs[1]["errors"][0]["message"]
    code, _ = dump(["--strict", "--now", str(T0), "-"], stdin=whole + whole[:-3])
    assert code == 1


def test_rfc002_a2_on_the_wire(dump, jrecords) -> None:
    code, out = dump(["--json", "--now", "0", "-"], stdin=bytes.fromhex("0000000401a1617801"))
    recs = jrecords(out)
    assert [r["errors"][0]["code"] for r in recs] == [1001, 1001]
    assert "header" in recs[1]["errors"][0]["message"]


def test_control_frames_are_decoded(dump, jrecords) -> None:
    stream = b"".join([
        encode_frame(FrameType.HANDSHAKE, HandshakeRequest(max_msg_size=1 << 20, did="did:key:z6Mk").to_payload()),
        encode_frame(FrameType.PING, b"\x01\x02"),
        encode_frame(FrameType.PONG, b"\x01\x02"),
        encode_frame(FrameType.GOAWAY, GoAway(reason=2, message="bye").to_payload()),
        encode_frame(FrameType.ERROR, TransportError(code=1001, message="bad").to_payload()),
        encode_frame(FrameType.GOAWAY, b"\xff"),
    ])
    code, out = dump(["--json", "-"], stdin=stream)
    recs = jrecords(out)
    assert [r["frame_type"] for r in recs] == ["HANDSHAKE", "PING", "PONG", "GOAWAY", "ERROR", "GOAWAY"]
    assert recs[0]["control"] == {"version": 1, "max_msg_size": 1 << 20, "did": "did:key:z6Mk"}
    assert recs[1]["control"] == {"$bytes": "0102"}
    assert recs[3]["control"] == {"reason": 2, "message": "bye"}
    assert recs[4]["control"] == {"code": 1001, "message": "bad"}
    assert recs[5]["errors"][0]["code"] == 1001
    _, text = dump(["--color", "never", "-"], stdin=stream)
    assert "GoAway(reason=2" in text and "HandshakeRequest(" in text


def test_usage_and_file_errors(tmp_path: Path, dump) -> None:
    assert dump(["--listen", "127.0.0.1:0"])[0] == 2
    with pytest.raises(OSError):
        dump([str(tmp_path / "missing.bin")])
    with pytest.raises(CommandError, match="--hex input is not hex text"):  # one line, exit 1, from main
        dump(["--hex", "-"], stdin=b"zz")
    with pytest.raises(CommandError, match="keyring file not found"):  # a local file: no AMP code
        dump(["--keyring", str(tmp_path / "nope.json"), "-"])
    assert dump(["--listen", "nohost", "--upstream", "127.0.0.1:1"])[0] == 2
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError):  # port in use: one line from the CLI, no exception group
            dump(["--listen", f"127.0.0.1:{port}", "--upstream", "127.0.0.1:1"])


# ------------------------------------------------------------ Rust example


def _capture_files(captures: Path) -> list[Path]:
    files = sorted(captures.glob("conn*-*.hex"))
    assert len(files) == 4
    return files


def _first_ts(captures: Path) -> int:
    from ampcap.wire.cbor import loads

    data = bytes.fromhex("".join((captures / "conn1-c2s.hex").read_text().split()))
    return int(loads(data[4:4 + int.from_bytes(data[:4], "big")])["ts"])


def test_rust_capture_compat_profile(dump, demo_ring, captures, jrecords) -> None:
    now = _first_ts(captures) + 5_000
    seen_plain = []
    total = 0
    for f in _capture_files(captures):
        code, out = dump(["--json", "--hex", "--compat", "rust-example", "--keyring", str(demo_ring),
                          "--now", str(now), str(f)])
        assert code == 0
        for rec in jrecords(out):
            total += 1
            jsonschema.validate(rec, RECORD_SCHEMA)
            assert rec["signature"] == "valid" and rec["signature_profile"] == "rust-example", rec
            assert rec["errors"] == [] and rec["expiry"] == "valid"
            if rec["encrypted"]:
                assert rec["decrypted"] and rec["body"]["msg"].startswith("hello-from-")
                seen_plain.append(rec["body"]["msg"])
    assert total == 10
    assert sorted(set(seen_plain)) == ["hello-from-alice", "hello-from-bob"]


def test_rust_capture_under_rfc_profile_is_invalid(dump, demo_ring, captures, jrecords) -> None:
    now = _first_ts(captures) + 5_000
    for f in _capture_files(captures):
        code, out = dump(["--json", "--hex", "--framing", "raw", "--keyring", str(demo_ring),
                          "--now", str(now), str(f)])
        for rec in jrecords(out):
            assert rec["signature"] == "invalid"
            # …but the dump names the profile under which it does verify (R15).
            assert rec["signature_profile"] == "rust-example"
            assert [e["code"] for e in rec["errors"]] == [1002]
    _, text = dump(["--hex", "--framing", "raw", "--keyring", str(demo_ring), "--now", str(now), "--color", "never",
                    str(captures / "conn1-c2s.hex")])
    assert "sig=invalid (verifies under rust-example)" in text
    assert "problems found: 1002 INVALID_SIGNATURE ×3" in text


def test_rust_capture_without_secrets_stays_sealed(tmp_path: Path, dump, captures, jrecords) -> None:
    demo = json.loads((captures / "demo-keys.json").read_text())
    ring = tmp_path / "public.json"
    ring.write_text(json.dumps({d: {"ed25519": e["ed25519"], "x25519": e["x25519"]} for d, e in demo.items()}))
    now = _first_ts(captures) + 5_000
    _, out = dump(["--json", "--hex", "--compat", "rust-example", "--keyring", str(ring), "--now", str(now),
                   str(captures / "conn1-s2c.hex")])
    sealed = [r for r in jrecords(out) if r["encrypted"]]
    assert sealed and all(not r["decrypted"] and r["body"] is None for r in sealed)
    # The sender's key is known: the dump says why the signature is unchecked.
    assert all(r["signature"] == "unknown-key" and "recipient's X25519 secret" in r["signature_note"]
               for r in sealed)
    assert all(any("recipient's X25519 secret" in e["message"] for e in r["errors"]) for r in sealed)
    _, text = dump(["--hex", "--compat", "rust-example", "--keyring", str(ring), "--now", str(now), "--color", "never",
                    str(captures / "conn1-s2c.hex")])
    assert "sig=unknown-key (needs the recipient's secret)" in text


def test_non_seekable_stdin(rfc001, jrecords) -> None:
    import argparse
    import io
    import os

    from ampcap.cli import dump as dump_cli

    data = b"".join(encode_frame(1, m) for _, m in _messages(rfc001))
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    parser = argparse.ArgumentParser()
    dump_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dump", "--json", "--now", str(T0)])
    out = io.StringIO()
    with os.fdopen(r, "rb") as pipe:
        assert not pipe.seekable()
        assert dump_cli.run(args, stdin=pipe, stdout=out) == 0
    assert len(jrecords(out.getvalue())) == len(_messages(rfc001))


class _Endless(io.RawIOBase):
    """An input with no end (like /dev/zero or a pipe nobody closes)."""

    def __init__(self, fill: bytes) -> None:
        self.fill, self.served = fill, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = len(buffer)
        buffer[:n] = (self.fill * (n // len(self.fill) + 1))[:n]
        self.served += n
        if self.served > 64 << 20:
            raise AssertionError("the dump kept reading an input it could no longer decode")
        return n


@pytest.mark.parametrize(("argv", "fill"), [
    ([], b"\x00"),                              # a zero frame length: the framing is broken at once
    (["--framing", "raw"], b"\xff"),            # a length over the maximum
    (["--framing", "none"], b"\xa1"),           # one bare message that never ends
])
def test_an_endless_input_that_cannot_be_decoded_is_not_read_forever(argv: list[str], fill: bytes, jrecords) -> None:
    import argparse

    from ampcap.cli import dump as dump_cli

    parser = argparse.ArgumentParser()
    dump_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dump", "--json", *argv])
    endless = _Endless(fill)
    out = io.StringIO()
    assert dump_cli.run(args, stdin=io.BufferedReader(endless), stdout=out) == 1  # not one frame decoded
    (record,) = jrecords(out.getvalue())
    assert record["errors"][0]["code"] == 1001, record
    assert endless.served <= (16 << 20) + (1 << 20)  # at most one maximum-size message, then it stopped


# ------------------------------------------------------------ usage


def _main_failure(argv: list[str]) -> tuple[int, str]:
    """Run ``ampcap dump ARGV`` in its own process (a tap that wrongly
    starts must not hang the test): the exit status and the last line it
    printed."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ampcap", "dump", *argv], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(" ")]
    return proc.returncode, lines[-1] if lines else ""


@pytest.mark.parametrize("argv,needles", [
    # Type codes a message's typ (a CBOR uint) cannot hold; --type FOO was already refused.
    (["--type", "-1"], ["--type '-1'", "0xffffffffffffffff"]),
    (["--type", "99999999999999999999"], ["--type '99999999999999999999'"]),
    (["--type", str(1 << 64)], ["no message or frame type"]),
    (["--port", "0"], ["--port", "between 1 and 65535"]),
    # Things the tap can only ignore, or that cannot work.
    (["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:0"], ["--upstream 127.0.0.1:0", "port 0"]),
    (["{input}", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"], ["INPUT", "--listen"]),
    (["-", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"], ["INPUT", "--listen"]),
    (["--hex", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"], ["--hex", "--listen"]),
    (["--port", "7400", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"], ["--port", "--listen"]),
    # --port filters captures: on raw frames it could only be ignored.
    (["--port", "7400", "{input}"], ["--port", "is not one"]),
])
def test_nonsense_and_contradictions_are_usage_errors(tmp_path: Path, argv: list[str], needles: list[str]) -> None:
    frames = tmp_path / "frames.bin"
    frames.write_bytes(encode_frame(FrameType.PING, b"\x01"))
    argv = [str(frames) if a == "{input}" else a for a in argv]
    code, line = _main_failure(argv)
    assert code == 2, line
    assert line.startswith("ampcap dump")
    for needle in needles:
        assert needle in line, line


def test_the_largest_type_code_and_names_are_still_filters(dump) -> None:
    stream = encode_frame(FrameType.PING, b"\x01")
    for wanted in ("0xFFFFFFFFFFFFFFFF", "0", "PING", "cap_invoke"):
        assert dump(["--json", "--type", wanted, "-"], stdin=stream)[0] == 0


def test_help_says_where_input_comes_from_and_what_excludes_what(capsys: pytest.CaptureFixture[str]) -> None:
    from ampcap.cli.main import main

    with pytest.raises(SystemExit):
        main(["dump", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "left out or '-': read stdin" in text
    assert "[INPUT | -] [--hex] [--port N]" in text and "--listen HOST:PORT --upstream HOST:PORT" in text
    assert "port 0: any free port, printed on stderr" in text
    assert "Exit status: 0" in text and "2 for a usage error" in text
    assert "cut short" in text


def test_input_left_out_reads_stdin(rfc001, dump, jrecords) -> None:
    whole = encode_frame(1, bytes.fromhex(rfc001["vectors"]["A.2"]["message"]))
    code, out = dump(["--json", "--now", str(T0)], stdin=whole)
    assert code == 0 and [r["typ_name"] for r in jrecords(out)] == ["MESSAGE"]


# ------------------------------------------------------------ --write-pcap


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_capture_file_that_cannot_be_written_is_named() -> None:
    # It said only "ampcap dump: No space left on device", and only once a
    # client came: the file header is now written when the tap starts.
    code, line = _main_failure(["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--write-pcap", "/dev/full"])
    assert (code, line) == (1, "ampcap dump: --write-pcap /dev/full: cannot write it: No space left on device")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_capture_file_that_fills_up_while_tapping_is_named(tmp_path: Path) -> None:
    import os

    from ampcap.cli.dump import _PcapOnceListening

    target = tmp_path / "tap.pcap"
    recorder = _PcapOnceListening(target)
    recorder.start()
    recorder.open(1, "127.0.0.1:40000", "127.0.0.1:7400", 1.0)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, recorder._fp.fileno())  # the disk fills up under the running tap
    finally:
        os.close(full)
    with pytest.raises(CommandError, match=f"^--write-pcap {target}: cannot write it: No space left on device$"):
        recorder.data(1, "c2s", b"x" * 100, 2.0)
    recorder.finish()  # already reported: closing says nothing more


def test_summary_counts_error_replies_apart_from_problems(dump) -> None:
    """Issue 38 item 10: traffic holding an ERROR reply (and a transport ERROR
    frame) is not summarised as "errors: none"."""
    import os

    from ampcap.wire.envelope import seal
    from ampcap.wire.identity import Identity
    from ampcap.wire.registry import MessageType

    ident = Identity.from_seed(b"\x07" * 32)
    _, wire = seal(ident, typ=MessageType.ERROR, to=ident.did, now_ms=T0, entropy=os.urandom,
                   body={"code": 3004, "category": "delegation", "message": "delegation invalid"})
    message = encode_frame(FrameType.AMP_MESSAGE, wire)
    code, out = dump(["--color", "never", "--now", str(T0), "-"], stdin=message)
    assert code == 0, out
    assert "problems found: none" in out and "errors: none" not in out
    assert "error replies: 3004 DELEGATION_INVALID ×1" in out
    frame = encode_frame(FrameType.ERROR, TransportError(code=1001, message="bad").to_payload())
    code, out = dump(["--color", "never", "--now", str(T0), "-"], stdin=message + frame)
    assert "error replies: 1001 INVALID_MESSAGE ×1, 3004 DELEGATION_INVALID ×1" in out
