"""Each class of bad command-line or file input: one clear line on stderr,
a non-zero exit (2 for usage), never a traceback.

Complements test_cli_bad_input.py (which runs the command as a subprocess)
with in-process runs of ``main([...])`` and the cases that need a real process
(closed stdin, a port in use).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ampcap.cli.main import main

AMPCAP = [sys.executable, "-m", "ampcap.cli.main"]


def _one_line_failure(capsys: pytest.CaptureFixture[str], code: int, argv: list[str], expected: int) -> str:
    out, err = capsys.readouterr()
    assert code == expected, (argv, err)
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, f"{argv}: a failure must say what went wrong"
    return lines[-1]


@pytest.mark.parametrize(
    "option,value",
    [("--port", "99999999"), ("--port", "-1"), ("--bytes", "-1"), ("--now", "-5"), ("--now", "soon"),
     ("--max-size", "0"), ("--max-size", str(1 << 40))],
)
def test_out_of_range_numbers_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               option: str, value: str) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    argv = ["dump", option, value, str(empty)]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    line = _one_line_failure(capsys, int(exc.value.code or 0), argv, 2)
    assert option in line


def test_directory_as_identity_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["id", "--identity", str(tmp_path)]
    line = _one_line_failure(capsys, main(argv), argv, 1)
    assert "not a regular file" in line and "chmod" not in line


def test_hex_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {"odd.hex": b"a1 b2\n c", "text.hex": b"zz not hex\n", "binary.hex": bytes(range(128, 256))}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        argv = ["dump", "--hex", str(path)]
        line = _one_line_failure(capsys, main(argv), argv, 1)
        assert "--hex input is not hex text" in line, line


def test_hex_input_is_decoded_in_chunks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Whitespace, including line breaks that split a byte's two digits across
    # read chunks, is ignored; the result equals the binary input's dump.
    raw = b"\xff" + os.urandom(300_000)  # a first "frame" far over the maximum, whatever follows
    binary, hexed = tmp_path / "in.bin", tmp_path / "in.hex"
    binary.write_bytes(raw)
    text = raw.hex()
    hexed.write_text("\n".join(text[i:i + 77] for i in range(0, len(text), 77)))
    # Random bytes hold not one frame: exit 1 both ways (issue 26), the same records.
    assert main(["dump", "--json", "--no-summary", str(binary)]) == 1
    expected = capsys.readouterr().out
    assert main(["dump", "--json", "--no-summary", "--hex", str(hexed)]) == 1
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "garbage", "malformed"])
def test_bad_keyring_and_manifest_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / "input"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)))
    elif kind == "malformed":
        path.write_text("{bad = [\n")
    target = tmp_path / "target"
    target.write_bytes(b"")
    for argv in (["dump", "--keyring", str(path), str(target)], ["caps", "list", str(path)],
                 ["caps", "show", str(path), "x"], ["id", "--identity", str(path)]):
        if kind == "empty" and argv[0] == "dump":
            continue  # an empty keyring file is valid (no keys)
        _one_line_failure(capsys, main(argv), argv, 1)


def test_non_utf8_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/missing\xff")
    for argv in (["dump", name], ["dump", "--keyring", name, name], ["caps", "list", name],
                 ["id", "--identity", name]):
        _one_line_failure(capsys, main(argv), argv, 1)


def test_closed_stdin_is_one_line() -> None:
    proc = subprocess.run(AMPCAP + ["dump", "-"], capture_output=False, stdin=None, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(0))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["ampcap dump: stdin is closed; give an INPUT file"]


def test_a_tap_that_cannot_listen_leaves_the_capture_file_alone(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.pcap"
    old.write_bytes(b"yesterday's capture")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(AMPCAP + ["dump", "--listen", f"127.0.0.1:{port}", "--upstream", "127.0.0.1:9",
                                        "--write-pcap", str(old)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert old.read_bytes() == b"yesterday's capture"
    for bad in (str(tmp_path) + "/", str(tmp_path / "missing" / "x.pcap")):
        argv = ["dump", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--write-pcap", bad]
        line = _one_line_failure(capsys, main(argv), argv, 1)
        assert "--write-pcap" in line and "directory" in line
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody reads it: an error, not a tap stuck before its first packet
    argv = ["dump", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--write-pcap", str(fifo)]
    line = _one_line_failure(capsys, main(argv), argv, 1)
    assert line == f"ampcap dump: --write-pcap {fifo}: a FIFO with no reader"


def _with_closed(fd: str, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60,
                 ) -> subprocess.CompletedProcess[str]:
    """Run ampcap with stdout (``fd="1"``) or stderr (``"2"``) closed, as ``>&-`` does."""
    return subprocess.run(["bash", "-c", f'exec "$@" {fd}>&-', "_", *AMPCAP, *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_closed_stdout_fails_before_the_work_except_for_serve(tmp_path: Path) -> None:
    proc = _with_closed("1", ["caps", "list", "--demo"])
    assert proc.returncode == 1 and proc.stderr.strip() == \
        "ampcap caps: standard output is closed; there is nowhere to write the output"
    # serve runs on (a supervisor may close stdout); SIGTERM still ends it with 0.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    serve = subprocess.Popen(["bash", "-c", 'exec "$@" 1>&-', "_", *AMPCAP, "serve", "--demo", "--listen",
                              "127.0.0.1:0"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        import time

        time.sleep(2)
        assert serve.poll() is None
        serve.terminate()
        assert serve.wait(timeout=30) == 0
    finally:
        serve.kill()
    assert serve.stderr is not None and "Traceback" not in serve.stderr.read()


def test_closed_stderr_keeps_messages_out_of_the_output(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # the identity is created: a notice on stderr
    proc = _with_closed("2", ["invoke", "amp://127.0.0.1:1", "org.x.y:1.0.0", "--json"], env=env)
    assert proc.returncode == 1
    import json

    assert json.loads(proc.stdout)["error"]["code"] == 5002  # the whole stdout is the JSON, nothing else


def test_a_file_name_the_output_encoding_cannot_take_is_escaped(tmp_path: Path) -> None:
    name = os.fsdecode(b"nx\xff.toml")
    (tmp_path / name).write_text("")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run(AMPCAP + ["caps", "validate", str(tmp_path / name)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "nx\\udcff.toml" in proc.stdout


def test_listen_port_in_use_is_one_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(AMPCAP + ["dump", "--listen", f"127.0.0.1:{port}", "--upstream", "127.0.0.1:9"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"ampcap dump: cannot listen on 127.0.0.1:{port}: Address already in use"]


@pytest.mark.parametrize("argv", [["caps", "list", "--demo"], ["dump", "-", "--hex"]])
def test_a_reader_that_leaves_early_is_not_an_error(argv: list[str]) -> None:
    """`ampcap … | head`: the pipe's reader closes before the output is done."""
    # Closed before the child has even imported ampcap, so its first write meets EPIPE.
    proc = subprocess.Popen(AMPCAP + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stdin.write(b"00" * 4096)  # for dump: hex that prints a line per chunk
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert err == ""


@pytest.mark.parametrize("hostport", ["nohost", "127.0.0.1:99999", "127.0.0.1:abc", "::"])
def test_bad_listen_hostport_is_usage(capsys: pytest.CaptureFixture[str], hostport: str) -> None:
    argv = ["dump", "--listen", hostport, "--upstream", "127.0.0.1:9"]
    line = _one_line_failure(capsys, main(argv), argv, 2)
    assert "HOST:PORT" in line


@pytest.mark.parametrize("argv,needle", [
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--params", "{bad"], "--params is not valid JSON"),
    (["query", "ftp://127.0.0.1:9", "echo"], "unsupported scheme 'ftp'"),
    (["query", "amp://127.0.0.1:9", "echo", "--limit", "-1"], "--limit must be from 0 to 18446744073709551615"),
    (["query", "amp://127.0.0.1:9", "echo", "--limit", str(1 << 64)], "--limit must be from 0"),
    (["serve", "--demo", "--listen", "nohost"], "--listen: expected HOST:PORT"),
    (["serve", "--demo", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["serve", "--demo", "--max-in-flight", "0"], "--max-in-flight must be positive"),
    (["serve", "--demo", "--connect", "ftp://x"], "--connect 'ftp://x'"),
    (["serve"], "nothing to serve"),
])
def test_command_line_mistakes_are_usage_errors_without_an_amp_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], needle: str) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # Nothing was sent, so no AMP code (such as 1001 INVALID_MESSAGE) applies.
    line = _one_line_failure(capsys, main(argv), argv, 2)
    assert line.startswith(f"ampcap {argv[0]}: ") and needle in line, line
    assert "error " not in line and "INVALID_MESSAGE" not in line
    assert list(tmp_path.iterdir()) == []  # checked before the default identity is created


def test_keygen_over_an_existing_file_is_a_plain_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "id.json"
    assert main(["keygen", "--out", str(key)]) == 0
    capsys.readouterr()
    argv = ["keygen", "--out", str(key)]
    line = _one_line_failure(capsys, main(argv), argv, 1)
    assert line == f"ampcap keygen: {key} already exists; pass --force to replace it"


def test_keygen_into_a_directory_says_so_even_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keygen", "--out", str(tmp_path)], ["keygen", "--out", str(tmp_path), "--force"]):
        line = _one_line_failure(capsys, main(argv), argv, 1)
        assert line == f"ampcap keygen: {tmp_path}: is a directory; give a file name (e.g. {tmp_path / 'identity.json'})"


def test_broken_local_files_are_plain_failures_without_an_amp_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Our own files are not AMP traffic: a broken policy, identity, keyring or
    manifest is one line naming the file, exit 1, and no "4001 BAD_REQUEST"."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    broken = tmp_path / "broken.toml"
    broken.write_text("allow = [\n")
    broken.chmod(0o600)  # so the identity loader gets as far as parsing it
    open_key = tmp_path / "open.json"
    open_key.write_text("{}")
    open_key.chmod(0o644)
    cases = [
        (["serve", "--demo", "--policy", str(broken)], "not valid TOML"),
        (["serve", "--demo", "--identity", str(open_key)], "chmod 600"),
        (["serve", "--demo", "--identity", str(broken)], str(broken)),
        (["serve", "--demo", "--keyring", str(broken)], "keyring"),
        (["serve", "--manifest", str(broken)], "TOML"),
        (["caps", "list", str(broken)], "TOML"),
        (["id", "--identity", str(open_key)], "chmod 600"),
        (["dump", "--keyring", str(broken), str(broken)], "keyring"),
    ]
    for argv, needle in cases:
        line = _one_line_failure(capsys, main(argv), argv, 1)
        assert line.startswith(f"ampcap {argv[0]}: {tmp_path}"), (argv, line)
        assert needle in line, (argv, line)
        assert "error " not in line and "BAD_REQUEST" not in line and "INVALID_MESSAGE" not in line, (argv, line)


def test_max_connections_is_fitted_to_the_open_file_limit(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # Past the descriptor limit the listener cannot even accept to refuse
    # (EMFILE); below it, clients past --max-connections get 5004.
    import resource

    from ampcap.cli.serve import fit_to_descriptors

    limits = {"now": (200, 200)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: limits.update(now=value))
    assert fit_to_descriptors(10_000) == 136
    assert "serving at most 136" in caplog.text
    assert fit_to_descriptors(100) == 100
    limits["now"] = (1024, 65536)  # a soft limit below the hard one is raised first
    assert fit_to_descriptors(10_000) == 10_000 and limits["now"] == (65536, 65536)


def test_every_problem_of_a_policy_file_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    policy = tmp_path / "p.toml"
    policy.write_text('default = "maybe"\nallow = [1]\n')
    assert main(["serve", "--demo", "--policy", str(policy)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"ampcap serve: {policy}: default: expected \"allow\" or \"deny\"",
                     f"ampcap serve: {policy}: allow[0]: expected a non-empty string"]


def test_ctrl_c_beside_the_errors_it_caused_is_still_ctrl_c(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # trio raises KeyboardInterrupt in whichever task runs when the signal
    # lands (a connection's reader, inside a progress callback); the call
    # then fails because that connection closed. Both leave the nursery
    # together: the user pressed Ctrl-C, and that is all there is to say.
    import ampcap.cli.keys
    from ampcap.errors import AmpError

    def interrupted(args: object) -> int:
        raise BaseExceptionGroup("nursery", [AmpError(5002, "connection closed before the reply"),
                                             BaseExceptionGroup("reader", [KeyboardInterrupt()])])

    monkeypatch.setattr(ampcap.cli.keys, "run_id", interrupted)
    assert main(["id"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and "5002" not in err


@pytest.mark.parametrize("command", [
    ["interop", "amp://127.0.0.1:1", "--report"],
    ["dump", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--write-pcap"],
    ["keygen", "--out"],
])
def test_every_output_path_is_checked_alike_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            command: list[str]) -> None:
    # --report once took "out/" for a file name and wrote a file called "out".
    flag = command[-1]
    cases = {
        str(tmp_path / "out") + "/": "names a directory; give a file name",
        str(tmp_path): "is a directory; give a file name",
        str(tmp_path / "missing" / "x"): f"no directory {str(tmp_path / 'missing')!r} to write it in",
        "": "names a directory; give a file name",
    }
    for target, problem in cases.items():
        argv = [*command, target]
        line = _one_line_failure(capsys, main(argv), argv, 1)
        assert line.startswith(f"ampcap {command[0]}: ") and problem in line, line
        assert target in line and (flag in line or command[0] == "keygen"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("did", ["did:key:zWRONG", "did:web:\u202e\x1b[31m"])
def test_id_refuses_a_did_its_key_file_cannot_back(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  did: str) -> None:
    # It printed the DID (raw escapes and all) and exited 0; serve announced it.
    import json

    from ampcap.wire.identity import Identity

    key = tmp_path / "id.json"
    key.write_text(json.dumps(Identity.generate(os.urandom).to_json() | {"did": did}))
    key.chmod(0o600)
    argv = ["id", "--identity", str(key)]
    line = _one_line_failure(capsys, main(argv), argv, 1)
    assert line.startswith(f"ampcap id: {key}: ") and ("does not match its key" in line or "is not a DID" in line)
    assert "\x1b" not in line and "\u202e" not in line
