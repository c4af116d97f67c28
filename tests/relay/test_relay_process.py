"""``ampcap relay`` as a process, with ``ampcap serve --relay`` behind it and
``ampcap invoke --to`` in front: real processes on loopback TCP, the queue
read back from the relay's SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402
from relay_proc import PYTHON, relay_process  # noqa: E402


def ampcap(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "caller"))
    return subprocess.run([PYTHON, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _typ(raw: bytes) -> int:
    from ampcap.wire.cbor import DEFAULT_LIMITS
    from ampcap.wire.envelope import decode_envelope

    return decode_envelope(raw, DEFAULT_LIMITS).typ


def _wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_invoke_through_ampcap_relay_and_every_message_is_committed(tmp_path: Path) -> None:
    with relay_process(tmp_path) as relay:
        with serve_process(tmp_path, "--relay", relay.url, "--relay-did", relay.did, "--state-dir",
                           str(tmp_path / "agent-state"), verbose=True) as agent:
            assert _wait_for(lambda: "registered at RFC 003 relay" in agent.stderr())
            added = ampcap(tmp_path, "invoke", relay.url, "org.ampcap.demo.math.add:1.0.0", "--params",
                           '{"a": 2, "b": 40}', "--to", agent.did, "--relay-did", relay.did, "--json")
            assert added.returncode == 0, added.stderr
            assert json.loads(added.stdout) == {"result": {"sum": 42}}
            slept = ampcap(tmp_path, "invoke", relay.url, "org.ampcap.demo.sleep:1.0.0", "--params", '{"ms": 200}',
                           "--to", agent.did, "--relay-did", relay.did)
            assert slept.returncode == 0 and json.loads(slept.stdout) == {"slept_ms": 200}
            failed = ampcap(tmp_path, "invoke", relay.url, "org.ampcap.demo.fail:1.0.0", "--to", agent.did,
                            "--relay-did", relay.did)
            assert failed.returncode == 1 and "5001" in failed.stderr
            assert relay.http_url is not None  # a caller over HTTP: POST, then the reply by polling
            polled = ampcap(tmp_path, "invoke", relay.http_url, "org.ampcap.demo.math.add:1.0.0", "--params",
                            '{"a": 1, "b": 1}', "--to", agent.did, "--relay-did", relay.did, "--json")
            assert polled.returncode == 0 and json.loads(polled.stdout) == {"result": {"sum": 2}}, polled.stderr
            assert "WARNING" not in agent.stderr() and "rejected" not in agent.stderr()
            # Every invoke was acknowledged by the agent (after its journal
            # held it): none waits. (A one-shot caller may exit before its ACK
            # of a last PROGRESS leaves: that entry waits for it, as it should.)
            assert _wait_for(lambda: set(relay.entries(agent.did)) <= {"delivered"}), relay.entries(agent.did)
            # The agent's recipient ACK of each invoke follows its reply; the
            # caller waited for it before leaving, so none waits in the queue.
            assert [raw for (raw,) in relay.query("SELECT raw FROM relay_record") if _typ(bytes(raw)) == 3] == []
        assert relay.terminate() == 0
    log = relay.stderr()
    assert "link up " + agent.did in log and "refused" not in log


def test_an_offline_agent_gets_the_invoke_when_it_comes_back(tmp_path: Path) -> None:
    agent_key = tmp_path / "agent.key"
    subprocess.run([PYTHON, "-m", "ampcap.cli.main", "keygen", "--out", str(agent_key)], check=True,
                   capture_output=True)
    with relay_process(tmp_path) as relay:
        common = ("--identity", str(agent_key), "--relay", relay.url, "--relay-did", relay.did, "--state-dir",
                  str(tmp_path / "agent-state"))
        with serve_process(tmp_path, *common) as agent:  # registers, then goes away
            assert _wait_for(lambda: relay.stderr().count("link up") >= 1)
        assert _wait_for(lambda: "link down" in relay.stderr())
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "caller"))
        caller = subprocess.Popen([PYTHON, "-m", "ampcap.cli.main", "invoke", relay.url,
                                   "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}', "--to", agent.did,
                                   "--relay-did", relay.did, "--timeout", "60", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert _wait_for(lambda: relay.entries().get("pending", 0) >= 1, 20)  # queued on disk
            with serve_process(tmp_path, *common):
                out, err = caller.communicate(timeout=60)
        finally:
            if caller.poll() is None:
                caller.kill()
                caller.communicate()
        assert caller.returncode == 0, err
        assert json.loads(out) == {"result": {"sum": 3}}
        assert _wait_for(lambda: set(relay.entries()) <= {"delivered"})


def test_relay_refuses_an_unregistered_recipient_and_bad_options(tmp_path: Path) -> None:
    with relay_process(tmp_path, http=False) as relay:
        out = ampcap(tmp_path, "invoke", relay.url, "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}',
                     "--to", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "--relay-did", relay.did,
                     "--timeout", "5")
        assert out.returncode == 1 and "2001" in out.stderr, out.stderr
    bad = ampcap(tmp_path, "relay", "--webhook", "nonsense")
    assert bad.returncode == 2 and "--webhook" in bad.stderr and "Traceback" not in bad.stderr
    not_url = ampcap(tmp_path, "relay", "--listen", "127.0.0.1:0", "--state-url", str(tmp_path / "dir"))
    assert not_url.returncode == 2 and "postgresql://" in not_url.stderr and not (tmp_path / "dir").exists()
    both = ampcap(tmp_path, "relay", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "d"), "--state-url",
                  "postgresql://x@127.0.0.1:1/x")
    assert both.returncode == 2 and "one" in both.stderr
    down = ampcap(tmp_path, "relay", "--listen", "127.0.0.1:0", "--state-url", "postgresql://x@127.0.0.1:1/x")
    assert down.returncode == 1 and "Traceback" not in down.stderr and len(down.stderr.strip().splitlines()) == 1, \
        down.stderr


def test_interop_relay_vectors_pass_against_ampcap_relay(tmp_path: Path) -> None:
    """``interop --relay`` against the real relay: the harness hands off as an
    upstream relay that the relay's routes file trusts."""
    harness = tmp_path / "harness.key"
    made = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "keygen", "--out", str(harness)], check=True,
                          capture_output=True, text=True)
    routes = tmp_path / "routes.toml"
    routes.write_text(f'[[peer]]\ndid = "{made.stdout.strip()}"\nurl = "http://127.0.0.1:9"\ntrusted = true\n')
    with relay_process(tmp_path, "--routes", str(routes)) as relay:
        assert relay.http_url is not None
        report = tmp_path / "report.json"
        out = ampcap(tmp_path, "interop", "--relay", relay.url, "--relay-framing", "rfc002", "--relay-forward",
                     relay.http_url, "--relay-identity", str(harness), "--report", str(report), "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        results = {r["vector_id"]: r["status"] for r in json.loads(report.read_text())["results"]
                   if r["vector_id"].startswith("003:")}
        assert results == {v: "pass" for v in ("003:A.1", "003:A.5", "003:A.6", "003:A.7", "003:A.15")}
        # Without the trusted identity, the federation vectors say why they fail.
        untrusted = ampcap(tmp_path, "interop", "--relay", relay.url, "--relay-framing", "rfc002",
                           "--relay-forward", relay.http_url, "--vector", "003:A.6", "--report", "-")
        assert untrusted.returncode == 1 and "trusted" in untrusted.stdout


def test_agent_comes_back_to_a_restarted_relay_and_gets_what_was_queued(tmp_path: Path) -> None:
    """The relay restarts on its state dir (same port): the agent behind it
    dials again and registers, and an invoke sent to the new relay process
    reaches it."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{probe.getsockname()[1]}"
    with relay_process(tmp_path, http=False, listen=listen) as relay:
        with serve_process(tmp_path, "--relay", relay.url, "--relay-did", relay.did, "--state-dir",
                           str(tmp_path / "agent-state"), verbose=True) as agent:
            assert _wait_for(lambda: "link up" in relay.stderr())
            assert relay.terminate() == 0
            with relay_process(tmp_path, http=False, listen=listen, state_dir=relay.state_dir,
                               identity=tmp_path / "relay.key") as again:
                assert _wait_for(lambda: "link up " + agent.did in again.stderr(), 30), agent.stderr()
                out = ampcap(tmp_path, "invoke", again.url, "org.ampcap.demo.math.add:1.0.0", "--params",
                             '{"a": 5, "b": 6}', "--to", agent.did, "--relay-did", again.did, "--json")
                assert out.returncode == 0, out.stderr
                assert json.loads(out.stdout) == {"result": {"sum": 11}}


def test_an_encrypted_invoke_is_carried_on_an_amps_link_and_answered_encrypted(tmp_path: Path) -> None:
    # The relay cannot check an authcrypted message's signature (it covers the
    # plaintext, which only the recipient can read): it carries it as it came,
    # and the agent behind it decrypts, verifies and answers encrypted.
    with relay_process(tmp_path) as relay:
        with serve_process(tmp_path, "--relay", relay.url, "--relay-did", relay.did, "--state-dir",
                           str(tmp_path / "agent-state"), verbose=True) as agent:
            assert _wait_for(lambda: "registered at RFC 003 relay" in agent.stderr())
            added = ampcap(tmp_path, "invoke", relay.url, "org.ampcap.demo.math.add:1.0.0", "--params",
                           '{"a": 20, "b": 22}', "--to", agent.did, "--relay-did", relay.did, "--encrypt", "--json")
            assert added.returncode == 0, added.stderr
            assert json.loads(added.stdout) == {"result": {"sum": 42}}
            assert _wait_for(lambda: set(relay.entries(agent.did)) <= {"delivered"}), relay.entries(agent.did)
            # On disk the relay kept only ciphertext: the params never appear in clear.
            kept = b"".join(bytes(raw) for (raw,) in relay.query("SELECT raw FROM relay_record"))
            assert b"math.add" not in kept
        assert relay.terminate() == 0
    assert "refused" not in relay.stderr()
