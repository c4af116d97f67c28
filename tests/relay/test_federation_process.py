"""Federation end to end between two real ``ampcap relay`` processes (RFC 003
§5.6, RFC 002 §6.5-§6.6), routes and trusted peers from files (R24):

    alice --POST--> relay A --forward--> relay B <--poll/ACK-- bob (offline: he polls)
    bob's ACK --POST--> relay B --forward--> relay A <--poll-- alice

in single custody (A's copy goes with B's transfer receipt) and dual custody
(A keeps it until B's commit receipt, which bob's ACK sets off), and a
handoff to a relay that does not answer (stopped with SIGSTOP) rolled back
and retried until it takes. Raw bytes are compared end to end."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from relay_proc import HttpAgent, RelayProcess, free_port, keygen, relay_process, wait_for  # noqa: E402

from ampcap.wire.cbor import DEFAULT_LIMITS
from ampcap.wire.envelope import decode_envelope
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType


@dataclass
class Pair:
    a: RelayProcess
    b: RelayProcess
    alice: HttpAgent
    bob: HttpAgent


def _routes(path: Path, peer_did: str, peer_url: str, recipient: str, mode: str) -> Path:
    path.write_text(f'[[peer]]\ndid = "{peer_did}"\nurl = "{peer_url}"\ntrusted = true\n'
                    f'transfer_modes = ["single", "dual"]\n\n'
                    f'[[route]]\nrecipient = "{recipient}"\nvia = ["{peer_did}"]\nmode = "{mode}"\n')
    return path


@contextmanager
def two_relays(tmp: Path, mode: str) -> Iterator[Pair]:
    """Relay A routes bob's messages to B; B routes alice's (bob's ACKs) back to A; each trusts the other."""
    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    a_did, b_did = keygen(tmp / "a.key"), keygen(tmp / "b.key")
    a_port, b_port = free_port(), free_port()
    a_routes = _routes(tmp / "a-routes.toml", b_did, f"http://127.0.0.1:{b_port}", bob.did, mode)
    b_routes = _routes(tmp / "b-routes.toml", a_did, f"http://127.0.0.1:{a_port}", alice.did, mode)
    with ExitStack() as stack:
        b = stack.enter_context(relay_process(tmp, "--routes", str(b_routes), http=f"127.0.0.1:{b_port}",
                                              identity=tmp / "b.key", state_dir=tmp / "b-state"))
        a = stack.enter_context(relay_process(tmp, "--routes", str(a_routes), http=f"127.0.0.1:{a_port}",
                                              identity=tmp / "a.key", state_dir=tmp / "a-state"))
        assert a.http_url is not None and b.http_url is not None and (a.did, b.did) == (a_did, b_did)
        pair = Pair(a, b, HttpAgent(a.http_url, a.did, alice), HttpAgent(b.http_url, b.did, bob))
        # Each agent registers with its own relay (a poll with its bearer token).
        assert pair.alice.poll()["messages"] == [] and pair.bob.poll()["messages"] == []
        yield pair


def _left(relay: RelayProcess) -> list[tuple[int, str, str, str]]:
    """What waits in a relay: (type, recipient, state, transfer state) per entry."""
    rows = relay.query("SELECT r.raw, e.recipient, e.state, e.t_state FROM relay_entry e JOIN relay_record r "
                       "ON r.seq = e.seq")
    return [(decode_envelope(bytes(raw), DEFAULT_LIMITS).typ, who[-6:], state, t) for raw, who, state, t in rows]


def _poll_until(agent: HttpAgent, timeout: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    wait_for(lambda: bool(got.extend(agent.poll()["messages"]) or got), timeout)
    return got


def _journey(pair: Pair, mode: str) -> None:
    raw = pair.alice.message(pair.bob.who.did, {"text": f"far away ({mode})"})
    assert pair.alice.post(raw) == 202  # A's signed relay ACK: on A's disk
    got = _poll_until(pair.bob)
    assert got == [raw]  # the exact bytes alice signed, through two relays
    if mode == "single":
        # A let go of its copy once B's transfer receipt verified.
        assert wait_for(lambda: pair.a.entries() == {}, 10), pair.a.transfers()
    else:
        # Dual custody: A keeps its copy until B reports bob's terminal state.
        assert pair.a.transfers() == {"dual_active": 1}
    assert pair.bob.ack(raw) == 202  # the recipient ACK commits at B ...
    assert wait_for(lambda: pair.b.entries(pair.bob.who.did) in ({}, {"delivered": 1}), 10)
    if mode == "dual":  # ... and B's commit receipt lets A finalize
        assert wait_for(lambda: pair.a.entries(pair.bob.who.did) == {}, 10), pair.a.transfers()
        assert "commit-reported" in pair.a.stderr()
    # bob's ACK travelled back to alice through B and A, byte for byte.
    [ack] = _poll_until(pair.alice)
    env = decode_envelope(ack, DEFAULT_LIMITS)
    assert env.typ == int(MessageType.ACK) and env.reply_to == decode_envelope(raw, DEFAULT_LIMITS).id
    assert env.sender == pair.bob.who.did and env.body["ack_source"] == "recipient"
    assert pair.bob.poll()["messages"] == [] and pair.alice.poll()["messages"] == []  # nothing left to take
    # The ACK's own handoff (B -> A) is over too: in dual custody A reported
    # alice's taking it, so neither relay holds anything.
    assert wait_for(lambda: pair.a.entries() == {} and pair.b.entries() in ({}, {"delivered": 1}), 10), \
        (pair.a.transfers(), pair.b.transfers())
    assert "transfer-accepted" in pair.a.stderr() and "transfer-accepted" in pair.b.stderr()
    assert "rolled-back" not in pair.a.stderr() + pair.b.stderr()


@pytest.mark.parametrize("mode", ["single", "dual"])
def test_a_message_crosses_two_relays_to_an_offline_recipient_and_its_ack_comes_back(tmp_path: Path,
                                                                                      mode: str) -> None:
    with two_relays(tmp_path, mode) as pair:
        _journey(pair, mode)
        for relay in (pair.a, pair.b):
            assert relay.terminate() == 0
    assert "Traceback" not in pair.a.stderr() + pair.b.stderr()


@pytest.mark.parametrize("mode", ["single", "dual"])
def test_a_handoff_to_a_stalled_relay_is_rolled_back_and_retried(tmp_path: Path, mode: str) -> None:
    """B stops answering (SIGSTOP): A's handoff times out and is rolled back
    (§5.6.4, the §5.6.7 defaults); B comes back before A's retries run out,
    the retry takes (B answers the handoff it had queued while stopped with
    its first receipt, §5.6.3), and bob gets the message once."""
    with two_relays(tmp_path, mode) as pair:
        pair.b.proc.send_signal(signal.SIGSTOP)
        try:
            raw = pair.alice.message(pair.bob.who.did, {"text": "while B sleeps"})
            assert pair.alice.post(raw) == 202
            assert wait_for(lambda: "transfer-rolled-back" in pair.a.stderr(), 15), pair.a.stderr()
            assert pair.a.entries() == {"pending": 1}  # still in A's custody, deliverable there
        finally:
            pair.b.proc.send_signal(signal.SIGCONT)
        assert wait_for(lambda: "transfer-accepted" in pair.a.stderr(), 20), pair.a.stderr()
        got = _poll_until(pair.bob)
        assert got == [raw]
        if mode == "single":
            assert wait_for(lambda: pair.a.entries() == {}, 10)
        assert pair.bob.ack(raw) == 202
        assert wait_for(lambda: pair.a.entries(pair.bob.who.did) == {}, 10), pair.a.transfers()
        assert pair.bob.drain() == []  # one entry at B, committed: not handed out again
        [ack] = _poll_until(pair.alice)
        assert decode_envelope(ack, DEFAULT_LIMITS).reply_to == decode_envelope(raw, DEFAULT_LIMITS).id
        for relay in (pair.a, pair.b):
            assert relay.terminate() == 0


@pytest.mark.parametrize("mode", ["single", "dual"])
def test_an_invoke_crosses_two_relays_to_an_agent_and_its_reply_comes_back_on_a_live_link(tmp_path: Path,
                                                                                          mode: str) -> None:
    """``ampcap invoke`` holds a live link at relay A; the agent (``ampcap
    serve --relay``) holds one at relay B. The invoke is handed A -> B and
    pushed to the agent, its reply (and the agent's recipient ACK) handed
    B -> A and pushed to the caller; every entry ends committed or handed
    over, in both relays."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
    import json
    import subprocess

    from amp_helpers import serve_process
    from relay_proc import PYTHON

    agent_key, caller_key = tmp_path / "agent.key", tmp_path / "caller.key"
    agent_did, caller_did = keygen(agent_key), keygen(caller_key)
    a_did, b_did = keygen(tmp_path / "a.key"), keygen(tmp_path / "b.key")
    a_port, b_port = free_port(), free_port()
    a_routes = _routes(tmp_path / "a-routes.toml", b_did, f"http://127.0.0.1:{b_port}", agent_did, mode)
    b_routes = _routes(tmp_path / "b-routes.toml", a_did, f"http://127.0.0.1:{a_port}", caller_did, mode)
    with relay_process(tmp_path, "--routes", str(b_routes), http=f"127.0.0.1:{b_port}", identity=tmp_path / "b.key",
                       state_dir=tmp_path / "b-state") as b, \
            relay_process(tmp_path, "--routes", str(a_routes), http=f"127.0.0.1:{a_port}",
                          identity=tmp_path / "a.key", state_dir=tmp_path / "a-state") as a, \
            serve_process(tmp_path, "--identity", str(agent_key), "--relay", b.url, "--relay-did", b.did,
                          "--state-dir", str(tmp_path / "agent-state")) as agent:
        assert wait_for(lambda: "link up " + agent.did in b.stderr(), 20)
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "caller"))
        for n in range(3):
            out = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "invoke", a.url, "org.ampcap.demo.math.add:1.0.0",
                                  "--identity", str(caller_key), "--params", json.dumps({"a": n, "b": 40}), "--to",
                                  agent.did, "--relay-did", a.did, "--timeout", "30", "--json"],
                                 capture_output=True, text=True, env=env, timeout=60)
            assert out.returncode == 0, out.stderr + a.stderr() + b.stderr()
            assert json.loads(out.stdout) == {"result": {"sum": n + 40}}
        # Nothing waits in either relay: the invokes were committed by the
        # agent's ACKs (at B, reported to A in dual custody), the replies and
        # ACKs handed to the caller on its link.
        assert wait_for(lambda: a.entries() == {} and set(b.entries()) <= {"delivered"}, 15), \
            (_left(a), _left(b))
        assert "rolled-back" not in a.stderr() + b.stderr() and "refused" not in a.stderr() + b.stderr()
        assert a.terminate() == 0 and b.terminate() == 0
