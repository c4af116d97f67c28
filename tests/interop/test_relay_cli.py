"""Two ampcap processes exchange CAP_INVOKE / CAP_RESULT through a relay that
behaves like the public Rust example's (tools/stand_in_relay.py), using only
the command line: ``ampcap serve --relay URL`` and ``ampcap invoke URL --to DID``.
Real loopback TCP, three separate processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "net"))
from amp_helpers import _read_line, serve_process  # noqa: E402

PYTHON = sys.executable


@contextmanager
def relay_process() -> Iterator[str]:
    proc = subprocess.Popen([PYTHON, str(ROOT / "tools" / "stand_in_relay.py"), "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _read_line(proc, 20.0)
        yield line.rsplit(" ", 1)[-1]
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


def ampcap(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "caller"))
    return subprocess.run([PYTHON, "-m", "ampcap", *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("compat", [[], ["--compat", "rust-example"]], ids=["rfc-profile", "rust-example"])
def test_invoke_and_query_through_the_relay_from_the_command_line(tmp_path: Path, compat: list[str]) -> None:
    with relay_process() as relay_url, serve_process(tmp_path, "--relay", relay_url, *compat, verbose=True) as daemon:
        added = ampcap(tmp_path, "invoke", relay_url, "org.ampcap.demo.math.add", "--version", "1.0.0",
                       "--params", '{"a": 2, "b": 40}', "--to", daemon.did, "--json", *compat)
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout) == {"result": {"sum": 42}}
        slept = ampcap(tmp_path, "invoke", relay_url, "org.ampcap.demo.sleep:1.0.0", "--params", '{"ms": 200}',
                       "--to", daemon.did, *compat)
        assert slept.returncode == 0 and json.loads(slept.stdout) == {"slept_ms": 200}
        assert "progress 100%" in slept.stderr  # PROGRESS found its way back through the relay
        failed = ampcap(tmp_path, "invoke", relay_url, "org.ampcap.demo.fail:1.0.0", "--to", daemon.did, *compat)
        assert failed.returncode == 1 and "5001" in failed.stderr
        listed = ampcap(tmp_path, "query", relay_url, "echo", "--to", daemon.did, "--json", *compat)
        assert listed.returncode == 0, listed.stderr
        assert [c["version"] for c in json.loads(listed.stdout)["capabilities"]] == ["2.0.0", "1.1.0", "1.0.0"]
    assert "registered at relay" in daemon.stderr()


def test_nobody_registered_under_the_did_times_out_cleanly(tmp_path: Path) -> None:
    with relay_process() as relay_url:
        out = ampcap(tmp_path, "invoke", relay_url, "org.ampcap.demo.noop:1.0.0", "--timeout", "1",
                     "--to", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK")
    assert out.returncode == 1
    assert "5003" in out.stderr and "Traceback" not in out.stderr  # the relay drops silently: a local timeout


def test_compat_serve_caps_frames_at_the_examples_8_mib(tmp_path: Path) -> None:
    """002:A.5 in direct compat mode: a frame over 8 MiB is refused (the
    example's limit), everything else still passes."""
    with serve_process(tmp_path, "--compat", "rust-example") as daemon:
        out = ampcap(tmp_path, "interop", daemon.url, "--compat", "rust-example", "--target-did", daemon.did,
                     "--vector", "002:A.5", "--vector", "004:A.5", "--report", str(tmp_path / "report.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed, 0 failed" in out.stdout


def test_interop_relay_drives_the_rfc003_vectors_from_the_command_line(tmp_path: Path) -> None:
    """Against the Rust example's behaviour (no RFC 003) the relay vectors
    fail, each saying why; against ampcap's relay they pass
    (tests/relay/test_relay_process.py)."""
    report_file = tmp_path / "relay-report.json"
    with relay_process() as relay_url:
        out = ampcap(tmp_path, "interop", "--relay", relay_url, "--timeout", "1", "--vector", "003:A.1",
                     "--vector", "003:A.7", "--report", str(report_file))
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(report_file.read_text())
    results = {r["vector_id"]: (r["status"], r["notes"]) for r in report["results"]}
    assert results["003:A.1"][0] == "fail" and "no terminal reply" in results["003:A.1"][1]
    assert results["003:A.7"][0] == "fail" and "2 deliveries" in results["003:A.7"][1]
    usage = ampcap(tmp_path, "interop", "--relay-did", "did:web:r.example", "--self")
    assert usage.returncode == 2 and "--relay" in usage.stderr


@pytest.mark.parametrize(("serve_compat", "call_compat", "advice"), [
    ([], ["--compat", "rust-example"], "drop --compat rust-example"),
    (["--compat", "rust-example"], [], "use its profile too (--compat rust-example)"),
], ids=["caller-rust", "daemon-rust"])
def test_a_timeout_says_the_peers_messages_failed_verification_and_which_profile_fits(
        tmp_path: Path, serve_compat: list[str], call_compat: list[str], advice: str) -> None:
    # One side signs like the Rust example, the other by the RFC: every answer
    # fails verification and is dropped, so the call can only time out. It
    # says why, and which Sig_Input profile those answers verify under.
    with relay_process() as relay_url, serve_process(tmp_path, "--relay", relay_url, *serve_compat) as daemon:
        out = ampcap(tmp_path, "invoke", relay_url, "org.ampcap.demo.noop:1.0.0", "--to", daemon.did,
                     "--timeout", "2", *call_compat)
    assert out.returncode == 1 and "error 5003 TIMEOUT" in out.stderr, out.stderr
    assert "failed signature verification (1002)" in out.stderr and advice in out.stderr, out.stderr
