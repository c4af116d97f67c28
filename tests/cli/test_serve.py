"""``ampcap serve``: the URL line contract, configuration errors, SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

from ampcap.files.identity import save_identity  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

PY = sys.executable
LINE = re.compile(r"^amp://127\.0\.0\.1:(\d+) (did:key:z[1-9A-HJ-NP-Za-km-z]+)$")


def run(tmp: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"))
    return subprocess.run([PY, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_prints_one_url_line_and_reuses_the_default_identity(tmp_path: Path) -> None:
    with serve_process(tmp_path) as first:
        match = LINE.match(f"{first.url} {first.did}")
        assert match and int(match.group(1)) > 0
        assert first.terminate() == 0
        assert first.proc.stdout is not None and first.proc.stdout.read() == ""  # exactly one line
    identity_file = tmp_path / "config" / "ampcap" / "identity.json"
    assert identity_file.exists() and identity_file.stat().st_mode & 0o077 == 0
    with serve_process(tmp_path) as second:
        assert second.did == first.did  # created once, then reused
        assert second.url != "" and second.terminate() == 0


def test_explicit_identity_file(tmp_path: Path) -> None:
    ident = Identity.generate(os.urandom)
    path = save_identity(ident, tmp_path / "id.json")
    with serve_process(tmp_path, "--identity", str(path)) as proc:
        assert proc.did == ident.did


def test_sigint_also_drains_and_exits_zero(tmp_path: Path) -> None:
    with serve_process(tmp_path) as proc:
        proc.proc.send_signal(signal.SIGINT)
        assert proc.proc.wait(10) == 0


@pytest.mark.parametrize("args, needle", [
    (["serve"], "nothing to serve"),
    (["serve", "--demo", "--listen", "nonsense"], "HOST:PORT"),
    (["serve", "--demo", "--drain-timeout", "0"], "--drain-timeout"),
    (["serve", "--demo", "--tls-cert", "x.pem"], "--tls-key"),
    (["serve", "--demo", "--policy", "/nonexistent/policy.toml"], "policy"),
    (["serve", "--manifest", "/nonexistent/m.toml"], "m.toml"),
    (["serve", "--demo", "--identity", "/nonexistent/id.json"], "identity"),
])
def test_bad_configuration_is_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    result = run(tmp_path, *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert needle in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("binding", "needle"), [
    ('{ python = "no_such_module_xyz:run" }', "cannot import 'no_such_module_xyz'"),
    ('{ command = ["/nonexistent/prog"] }', "no program at '/nonexistent/prog'"),
])
def test_a_binding_that_cannot_run_stops_serve_at_start(tmp_path: Path, binding: str, needle: str) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(f"""
[[capability]]
id = "org.example.broken:1.0.0"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
binding = {binding}
""")
    result = run(tmp_path, "serve", "--manifest", str(manifest), "--listen", "127.0.0.1:0")
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert needle in line and f"{manifest}:6:" in line, line  # the binding line


@pytest.mark.parametrize("flag", ["--connect", "--relay"])
def test_a_peer_it_cannot_dial_is_named_with_its_flag(tmp_path: Path, flag: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # released: nobody listens there
    result = run(tmp_path, "serve", "--demo", "--listen", "127.0.0.1:0", flag, f"amp://127.0.0.1:{port}")
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"ampcap serve: error 5002 UNAVAILABLE: {flag} amp://127.0.0.1:{port}: cannot reach it: ")


def test_port_in_use_is_reported(tmp_path: Path) -> None:
    with serve_process(tmp_path) as proc:
        port = proc.url.rsplit(":", 1)[1]
        # (its own store: the default one is the first daemon's, see below)
        result = run(tmp_path, "serve", "--demo", "--listen", f"127.0.0.1:{port}", "--state-dir", "none")
        assert result.returncode == 1 and "Traceback" not in result.stderr
        # One line that names the address and the reason.
        assert result.stderr.strip().splitlines() == [
            f"ampcap serve: cannot listen on 127.0.0.1:{port}: Address already in use"], result.stderr


def test_a_second_daemon_on_the_same_store_is_refused(tmp_path: Path) -> None:
    # R25: two daemons of the default identity would share the default state
    # directory without coordinating; the second is refused, with what to do.
    with serve_process(tmp_path):
        result = run(tmp_path, "serve", "--demo", "--listen", "127.0.0.1:0")
        assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("ampcap serve: state store ") and "does not coordinate" in line
        assert "--state-dir" in line and "--workers" in line
        # Its own directory, or none, is fine (checked by the port test above for none).
    result = run(tmp_path, "serve", "--demo", "--listen", "127.0.0.1:0", "--state-url", "/not/a/url")
    assert result.returncode == 2 and "expected postgresql://" in result.stderr
    result = run(tmp_path, "serve", "--demo", "--listen", "127.0.0.1:0", "--state-url", "postgresql://x/y",
                 "--state-dir", "none")
    assert result.returncode == 2 and "give one" in result.stderr
