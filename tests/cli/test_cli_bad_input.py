"""Bad input on the command line or in files gives one clear line and a
non-zero exit code, never a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

AMPCAP = [sys.executable, "-m", "ampcap.cli.main"]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8)
    bad_hex = tmp_path / "bad.hex"
    bad_hex.write_text("zz not hex\n")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{bad")
    os.chmod(bad_json, 0o600)
    directory = tmp_path / "dir"
    directory.mkdir()
    # Nested past Python's recursion limit: the json and tomllib parsers raise
    # RecursionError, which is not their usual decode error.
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100_000)
    os.chmod(deep_json, 0o600)
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("x = " + "[" * 100_000)
    fifo = tmp_path / "fifo"  # nobody ever writes to it: reading it would block for good
    os.mkfifo(fifo)
    return {"garbage": str(garbage), "hex": str(bad_hex), "json": str(bad_json), "dir": str(directory),
            "fifo": str(fifo),
            "missing": str(tmp_path / "missing"), "deep_json": str(deep_json), "deep_toml": str(deep_toml),
            "deep_params": "[" * 100_000}


CASES = [
    (["dump", "{missing}"], 1),
    (["dump", "{dir}"], 1),
    (["dump", "--hex", "{hex}"], 1),
    (["dump", "--keyring", "{json}", "{garbage}"], 1),
    (["dump", "--keyring", "{missing}", "{garbage}"], 1),
    (["dump", "--now", "soon", "{garbage}"], 2),
    (["dump", "--listen", "nohost", "--upstream", "127.0.0.1:9"], 2),
    (["id", "--identity", "{missing}"], 1),
    (["id", "--identity", "{json}"], 1),
    (["keygen", "--out", "{dir}"], 1),
    (["keygen", "--out", "/dev/null", "--force"], 1),
    (["keygen", "--out", "{missing}/sub/key.json"], 1),
    (["caps", "validate", "{missing}"], 1),
    (["caps", "validate", "{garbage}"], 1),
    (["caps", "list", "{dir}"], 1),
    (["caps", "show", "--demo", "org.example.none"], 1),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--params", "{{bad"], 2),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo", "--params", "{{}}"], 2),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--compat", "rust-example"], 2),
    (["no-such-command"], 2),
    (["interop", "--self", "--capability", "not a name!!"], 2),
    (["interop", "--self", "--capability", "org.example.tool:1.0"], 2),
    (["dump", "--type", "CAP_INVOK", "{garbage}"], 2),
    (["dump", "--did", "notadid", "{garbage}"], 2),
    (["caps", "validate", "{fifo}"], 1),
    (["serve", "--listen", "127.0.0.1:0", "--manifest", "{fifo}"], 1),
    (["serve", "--demo", "--listen", "127.0.0.1:0", "--policy", "{fifo}"], 1),
    (["dump", "--keyring", "{fifo}", "{garbage}"], 1),
    (["query", "amps://127.0.0.1:9", "echo", "--ca-file", "{fifo}"], 1),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--version", "1.0.0"], 2),
    (["serve", "--demo", "--listen", "amp://127.0.0.1:0"], 2),
    (["dump", "--listen", "amp://127.0.0.1:0", "--upstream", "127.0.0.1:9"], 2),
    (["serve", "--demo", "--listen", "127.0.0.1:0", "--tls-cert", "{garbage}", "--tls-key", "{missing}"], 1),
    (["serve", "--demo", "--listen", "127.0.0.1:0", "--tls-cert", "{garbage}", "--tls-key", "{garbage}"], 1),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--params", "{deep_params}"], 2),
    (["id", "--identity", "{deep_json}"], 1),
    (["dump", "--keyring", "{deep_json}", "{garbage}"], 1),
    (["dump", "--keyring", "{deep_toml}", "{garbage}"], 1),
    (["serve", "--demo", "--listen", "127.0.0.1:0", "--policy", "{deep_toml}"], 1),
    (["caps", "validate", "{deep_toml}"], 1),
    (["interop", "--self", "--params", "{deep_params}"], 2),
]


@pytest.mark.parametrize("argv,code", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_clear_line(files: dict[str, str], argv: list[str], code: int) -> None:
    args = [a.format(**files) for a in argv]
    proc = subprocess.run(AMPCAP + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    # `caps validate` reports problems as its output (stdout); the others use stderr.
    assert (proc.stderr + proc.stdout).strip(), "a failure must say what went wrong"


def test_undecodable_bytes_are_findings_not_failures(files: dict[str, str]) -> None:
    # Garbage is still dumped: a record with its 1001 finding, exit 0 (--strict makes it 1).
    proc = subprocess.run(AMPCAP + ["dump", "--framing", "none", files["garbage"]],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "1001" in proc.stdout
    strict = subprocess.run(AMPCAP + ["dump", "--strict", "--framing", "none", files["garbage"]],
                            capture_output=True, text=True, timeout=60)
    assert strict.returncode == 1


def test_invoke_without_a_version_says_how_to_find_one() -> None:
    # Checked before dialling (port 9 has no daemon): the name alone picks no version.
    proc = subprocess.run(AMPCAP + ["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo", "--params", "{}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "names no version" in proc.stderr
    assert "ampcap query amp://127.0.0.1:9 org.ampcap.demo.echo" in proc.stderr
