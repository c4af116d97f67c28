"""``ampcap query`` / ``ampcap invoke`` against ``ampcap serve --demo``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import ServeProcess, self_signed_cert, serve_process  # noqa: E402

PY = sys.executable


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("client")) as proc:
        yield proc


def ampcap(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"))
    return subprocess.run([PY, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, env=env, timeout=60)


def test_query_readable_and_json(daemon: ServeProcess, tmp_path: Path) -> None:
    out = ampcap(tmp_path, "query", daemon.url, "org.ampcap.demo.echo")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("org.ampcap.demo.echo:2.0.0")
    out = ampcap(tmp_path, "query", daemon.url, "echo", "--range", ">=1.0.0 <2.0.0", "--json")
    doc = json.loads(out.stdout)
    assert [c["id"] for c in doc["capabilities"]] == ["org.ampcap.demo.echo:1.1.0", "org.ampcap.demo.echo:1.0.0"]
    assert doc["next_cursor"] is None


def test_query_not_found(daemon: ServeProcess, tmp_path: Path) -> None:
    out = ampcap(tmp_path, "query", daemon.url, "org.agentries.nonexistent", "--json")
    assert out.returncode == 1
    assert "error 4002 CAPABILITY_NOT_FOUND" in out.stderr
    assert json.loads(out.stdout)["error"]["code"] == 4002


def test_invoke_by_id_range_and_version(daemon: ServeProcess, tmp_path: Path) -> None:
    out = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}',
                 "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"result": {"sum": 3}}
    out = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo", "--range", ">=1.0.0 <2.0.0",
                 "--params", '{"message": "hi"}')
    assert out.returncode == 0 and json.loads(out.stdout) == {"message": "hi", "version": "1.1.0"}
    out = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo", "--version", "3.0.0",
                 "--params", '{"message": "hi"}')
    assert out.returncode == 1 and "error 4003 VERSION_MISMATCH" in out.stderr


def test_invoke_encrypted_end_to_end(daemon: ServeProcess, tmp_path: Path) -> None:
    # The daemon opens the authcrypt CAP_INVOKE with its own key agreement
    # key and encrypts its CAP_RESULT back, which the CLI opens with its own.
    out = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo:1.0.0", "--params", '{"message": "sh"}',
                 "--encrypt", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"result": {"message": "sh", "version": "1.0.0"}}


def test_invoke_shows_progress_on_stderr(daemon: ServeProcess, tmp_path: Path) -> None:
    out = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.sleep:1.0.0", "--params", '{"ms": 400}')
    assert out.returncode == 0 and json.loads(out.stdout) == {"slept_ms": 400}
    assert "progress 100%" in out.stderr


def test_ctrl_c_during_an_invoke_exits_130_without_a_traceback(daemon: ServeProcess, tmp_path: Path) -> None:
    import signal

    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.Popen([PY, "-m", "ampcap.cli.main", "invoke", daemon.url, "org.ampcap.demo.sleep:1.0.0",
                             "--params", '{"ms": 5000}'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the new identity's note, then the first PROGRESS
    while line and not line.startswith("progress"):
        line = proc.stderr.readline()
    assert line.startswith("progress"), line  # the call is running inside trio
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert out == "" and "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_output_that_cannot_be_written_is_not_blamed_on_the_peer(daemon: ServeProcess, tmp_path: Path) -> None:
    # The call succeeded; writing its answer failed. Say that, not "cannot reach".
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    for args in (["invoke", daemon.url, "org.ampcap.demo.echo:1.0.0", "--params", '{"message": "x"}'],
                 ["query", daemon.url, "echo"]):
        with open("/dev/full", "w") as full:
            out = subprocess.run([PY, "-m", "ampcap.cli.main", *args], stdout=full, stderr=subprocess.PIPE, text=True, env=env,
                                 timeout=60)
        assert out.returncode == 1 and "No space left on device" in out.stderr, out.stderr
        assert "5002" not in out.stderr and "cannot reach" not in out.stderr and "Traceback" not in out.stderr


def test_timeout_also_bounds_connecting_to_a_port_that_never_answers(tmp_path: Path) -> None:
    import socket
    import time

    with socket.socket() as silent:  # accepts (the kernel's backlog) but never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"amp://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        out = ampcap(tmp_path, "query", url, "echo", "--timeout", "1")
        took = time.monotonic() - started
    assert out.returncode == 1 and "error 5003 TIMEOUT" in out.stderr, out.stderr
    assert took < 8, took  # not the 10 s handshake timeout on top of start-up


def test_invoke_errors(daemon: ServeProcess, tmp_path: Path) -> None:
    fail = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.fail:1.0.0")
    assert fail.returncode == 1 and "error 5001 INTERNAL_ERROR" in fail.stderr
    slow = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.sleep:1.0.0", "--params", '{"ms": 5000}',
                  "--timeout", "0.3")
    assert slow.returncode == 1 and "error 5003 TIMEOUT" in slow.stderr
    bad = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo:1.0.0", "--params", "{not json")
    assert bad.returncode != 0 and "--params" in bad.stderr and "Traceback" not in bad.stderr
    schema = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo:1.0.0", "--params", "{}")
    assert schema.returncode == 1 and "error 4004 SCHEMA_VIOLATION" in schema.stderr
    noversion = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo")
    assert noversion.returncode != 0 and "--version" in noversion.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "amp://127.0.0.1:1"])
def test_unreachable_or_bad_url(tmp_path: Path, url: str) -> None:
    out = ampcap(tmp_path, "query", url, "x.y")
    assert out.returncode != 0 and "Traceback" not in out.stderr and out.stderr.strip()


def test_query_and_invoke_over_amps_with_a_self_signed_daemon(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    (tmp_path / "server").mkdir()  # the daemon's identity, not the caller's
    with serve_process(tmp_path / "server", "--tls-cert", str(cert), "--tls-key", str(key)) as tls_daemon:
        assert tls_daemon.url.startswith("amps://127.0.0.1:")
        # Verified against the system store by default: a self-signed daemon is refused, in one line.
        out = ampcap(tmp_path, "query", tls_daemon.url, "echo")
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert out.stderr.strip().endswith("TLS failed: the server's certificate is not trusted (self-signed "
                                           "certificate); trust its CA with --ca-file FILE (or, while "
                                           "developing, skip the check with --insecure)"), out.stderr
        assert out.stderr.splitlines()[-1].startswith("error 5002 UNAVAILABLE: ")  # after "created identity …"
        # --ca-file names the certificate to trust; --insecure skips the check.
        out = ampcap(tmp_path, "query", tls_daemon.url, "echo", "--ca-file", str(cert))
        assert out.returncode == 0 and out.stdout.startswith("org.ampcap.demo.echo:2.0.0"), out.stderr
        out = ampcap(tmp_path, "invoke", tls_daemon.url, "org.ampcap.demo.echo:1.0.0", "--insecure",
                     "--params", '{"message": "over tls"}')
        assert out.returncode == 0 and json.loads(out.stdout) == {"message": "over tls", "version": "1.0.0"}
    out = ampcap(tmp_path, "query", "amps://127.0.0.1:9", "echo", "--ca-file", str(tmp_path / "missing.pem"))
    assert out.returncode == 1 and "cannot load CA file" in out.stderr and "Traceback" not in out.stderr


def test_serve_dials_an_amps_peer_it_trusts_with_ca_file(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with serve_process(tmp_path / "a", "--tls-cert", str(cert), "--tls-key", str(key)) as tls_daemon:
        # Trusted: the dialling daemon starts (its URL line comes after the dial succeeded).
        with serve_process(tmp_path / "b", "--connect", tls_daemon.url, "--ca-file", str(cert)) as dialler:
            assert dialler.url.startswith("amp://")
        # Not trusted: serve stops with the reason on one line, before printing any URL.
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "c"))
        out = subprocess.run([PY, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0",
                              "--connect", tls_daemon.url], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 1 and out.stdout == "" and "Traceback" not in out.stderr
        assert "certificate is not trusted" in out.stderr.strip().splitlines()[-1]


def test_a_caller_with_the_daemons_own_identity_is_told_so_before_any_request(daemon: ServeProcess,
                                                                                 tmp_path: Path) -> None:
    """Issue 26, then 36: serve and query/invoke on one machine share a config
    directory. By default the caller signs with caller.json, its own, and the
    call goes through; given the daemon's key, it is refused (exit 2) and told
    what to do."""
    shared = daemon.stderr_path.parent  # the daemon's XDG_CONFIG_HOME lives there
    out = ampcap(shared, "invoke", daemon.url, "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}')
    assert out.returncode == 0 and json.loads(out.stdout) == {"sum": 3}, out.stderr
    assert (shared / "config" / "ampcap" / "caller.json").is_file()
    daemon_key = str(shared / "config" / "ampcap" / "identity.json")
    out = ampcap(shared, "query", daemon.url, "org.ampcap.demo.echo", "--identity", daemon_key)
    assert out.returncode == 2 and out.stdout == ""
    assert f"the agent at {daemon.url} ({daemon.did}) is this caller's own DID" in out.stderr
    assert "ampcap keygen --out caller.key" in out.stderr and "--identity caller.key" in out.stderr
    # Named by --peer-did or --to, it is refused before anything is dialled: the
    # URL below has nobody listening, and the answer is still the usage error.
    for flag in ("--peer-did", "--to"):
        out = ampcap(shared, "invoke", "amp://127.0.0.1:9", "org.ampcap.demo.math.add:1.0.0", "--params",
                     '{"a": 1, "b": 2}', flag, daemon.did, "--identity", daemon_key)
        assert out.returncode == 2, out.stderr
        assert f"{flag} {daemon.did} is this caller's own DID (from --identity {daemon_key})" in out.stderr
    assert "at the relay, the caller would take the target's place" in out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["invoke", "org.x.y", "--version", "1.0"], "argument --version: '1.0' is not a SemVer 2.0.0 version"),
    (["invoke", "org.x.y", "--version", "01.0.0"], "argument --version: "),
    (["invoke", "org.x.y", "--range", "^1.2.0"], "argument --range: '^1.2.0': caret ranges"),
    (["invoke", "org.x.y", "--range", "1.x"], "argument --range: '1.x': partial and wildcard versions"),
    (["query", "org.x.y", "--range", ""], "argument --range: empty version range"),
    (["invoke", "ossa:demo/add@1"], "'ossa:demo/add@1' is not a valid capability URI"),
])
def test_malformed_versions_ranges_and_uris_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    """Issue 26: checked while parsing, exit 2 and nothing sent (nobody listens
    at the URL: a sent request would have been exit 1, 5002)."""
    command, *rest = args
    out = ampcap(tmp_path, command, "amp://127.0.0.1:9", *rest)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr.splitlines()[-1], out.stderr
    assert "5002" not in out.stderr


def test_an_ossa_uri_alone_invokes_its_compatible_versions(daemon: ServeProcess, tmp_path: Path) -> None:
    out = ampcap(tmp_path, "invoke", daemon.url, "ossa:demo/add@1.0", "--params", '{"a": 2, "b": 40}')
    assert out.returncode == 0 and json.loads(out.stdout) == {"sum": 42}, out.stderr


def test_ctrl_c_cancels_the_invoke_at_the_provider(tmp_path: Path) -> None:
    """R23: on Ctrl-C `ampcap invoke` asks the daemon to stop the invoke; its
    task ends at once with 5003 (it would have slept 20 s)."""
    import signal
    import time

    with serve_process(tmp_path, verbose=True) as daemon:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "caller"))
        proc = subprocess.Popen([PY, "-m", "ampcap.cli.main", "invoke", daemon.url, "org.ampcap.demo.sleep:1.0.0",
                                 "--params", '{"ms": 20000}'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and not line.startswith("progress"):
            line = proc.stderr.readline()
        assert line.startswith("progress"), line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130 and "Traceback" not in err, err
        for _ in range(100):
            if "cap=org.ampcap.demo.sleep:1.0.0 code=5003" in daemon.stderr():
                break
            time.sleep(0.1)
        assert "cap=org.ampcap.demo.sleep:1.0.0 code=5003" in daemon.stderr(), daemon.stderr()


def test_invoke_and_query_print_a_deprecation_line(tmp_path: Path) -> None:
    """R23: a deprecated version (examples/manifest.toml's countdown 0.9.0) is
    one line on stderr; stdout stays the result."""
    examples = Path(__file__).parents[2] / "examples" / "manifest.toml"
    with serve_process(tmp_path, "--manifest", str(examples)) as served:
        out = ampcap(tmp_path / "caller", "invoke", served.url, "org.example.greeter.countdown:0.9.0",
                     "--params", '{"from": 1}', "--json")
        assert out.returncode == 0 and json.loads(out.stdout) == {"result": {"done": True}}, out.stderr
        lines = [line for line in out.stderr.splitlines() if line.startswith("warning: ")]
        assert lines == ["warning: org.example.greeter.countdown:0.9.0 is deprecated; use "
                         "org.example.greeter.countdown:1.0.0; sunset 2027-06-30"], out.stderr
        out = ampcap(tmp_path / "caller", "query", served.url, "org.example.greeter.countdown")
        assert out.returncode == 0 and "is deprecated" in out.stderr and "is deprecated" not in out.stdout
        out = ampcap(tmp_path / "caller", "invoke", served.url, "org.example.greeter.greet:1.2.0",
                     "--params", '{"name": "Ada"}')
        assert out.returncode == 0 and "warning" not in out.stderr
