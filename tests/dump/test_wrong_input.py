"""``ampcap dump`` on input that is not what it reads by default (issue 26):
not one frame decoded is exit 1 with one line saying what the input looks
like and which option reads it; a bare ``ampcap dump`` at a terminal says
that it reads stdin."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampcap.dump.sniff import describe_undecodable
from ampcap.wire.frames import FrameType, Framing, encode_frame

# A CBOR map standing in for a message: the sniffer looks at shapes, not contents.
MESSAGE = bytes.fromhex("a2617601637479700a") + b"\x00" * 40
RAW_FRAMED = len(MESSAGE).to_bytes(4, "big") + MESSAGE


def ampcap_dump(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ampcap.cli.main", "dump", *args], input=stdin,
                          capture_output=True, timeout=60)


@pytest.mark.parametrize(("content", "args", "says"), [
    (RAW_FRAMED.hex().encode() + b"\n", [], "it looks like hex text: read it with --hex"),
    (RAW_FRAMED.hex().encode(), ["--hex"], "its hex decodes to frames with a bare 4-byte length (the Rust "
                                           "example's framing): read it with --framing raw, or --compat rust-example"),
    (RAW_FRAMED, [], "it looks like frames with a bare 4-byte length"),
    (MESSAGE, [], "it looks like one bare CBOR message without framing: read it with --framing none"),
    (b'{"hello": "world"}\n', [], "it looks like text, not AMP traffic"),
    ("Grüße, café, 日本語 — ✓\n".encode() * 3, [], "it looks like text, not AMP traffic"),
    (b"x" + "é".encode() * 300, [], "it looks like text, not AMP traffic"),  # a character cut at the 512-byte sniff
    (gzip.compress(RAW_FRAMED), [], "it looks like gzip-compressed data: decompress it first"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", [], "it looks like HTTP traffic, not AMP"),
    (bytes(range(200, 256)) * 20, [], "it looks like binary data that is not AMP traffic: neither RFC 002 frames"),
])
def test_not_one_frame_decoded_says_what_the_input_looks_like(tmp_path: Path, content: bytes, args: list[str],
                                                              says: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    done = ampcap_dump(str(path), *args)
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ampcap dump: {str(path)!r}: not one AMP frame could be "
                                                   f"decoded: {says}"), lines
    assert b"1001 INVALID_MESSAGE" in done.stdout  # the finding itself is still shown


def test_the_option_it_names_reads_the_input(tmp_path: Path) -> None:
    path = tmp_path / "conn.hex"
    path.write_text(RAW_FRAMED.hex())
    done = ampcap_dump(str(path), "--hex", "--framing", "raw", "--now", "0")
    assert done.returncode == 0 and done.stderr == b""
    assert b"AMP_MESSAGE" in done.stdout


def test_input_with_frames_then_garbage_keeps_exit_0() -> None:
    """A stream that decodes and then breaks is traffic with a finding, not the wrong kind of input."""
    good = encode_frame(FrameType.PING, b"12345678")
    done = ampcap_dump("-", stdin=good + b"\x00\x00\x00\x00")
    assert done.returncode == 0 and b"1001" in done.stdout and done.stderr == b""
    done = ampcap_dump("-", "--strict", stdin=good + b"\x00\x00\x00\x00")
    assert done.returncode == 1 and done.stderr == b""


def test_empty_input_is_not_a_failure() -> None:
    done = ampcap_dump("-")
    assert done.returncode == 0 and done.stderr == b"" and b"0 frames" in done.stdout


def test_describe_without_framing_names_what_it_was_read_as() -> None:
    assert describe_undecodable(b"", framing=Framing.RFC002) == "it is empty"
    assert "neither raw-framed messages" in describe_undecodable(b"\x00\xff" * 30, framing=Framing.RAW)
    # Read as raw frames, an RFC 002 stream is recognised as such.
    rfc002 = encode_frame(FrameType.AMP_MESSAGE, MESSAGE)
    assert describe_undecodable(rfc002, framing=Framing.RAW) == \
        "it looks like RFC 002 frames: read it with --framing rfc002 (the default)"


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_bare_dump_at_a_terminal_says_it_reads_stdin() -> None:
    import pty  # noqa: F401  (os.openpty is enough; pty documents the platform)

    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "dump"], stdin=terminal,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(terminal)
        terminal = -1
        line = proc.stderr.readline() if proc.stderr else b""
        assert line.startswith(b"ampcap dump: reading AMP frames from stdin"), line
        os.write(controller, b"\x04")  # Ctrl-D at the start of a line: end of input
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert b"0 frames" in out
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)


def test_piped_stdin_gets_no_notice() -> None:
    assert ampcap_dump(stdin=b"").stderr == b""
