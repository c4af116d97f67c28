"""``ampcap relay --workers 2`` on one store (SQLite, and PostgreSQL with
``--state-url``): callers POST invokes to the shared HTTP port (any worker
takes them), an agent behind the relay (``ampcap serve --relay``) holds its
link at one worker, and that worker is killed with SIGKILL under load. The
launcher starts it again; the agent dials again; the dead worker's push
claims lapse (``--claim-lease``) and another worker pushes what they held.
Every accepted invoke gets exactly one terminal reply (counted by invoke id,
its bytes compared), and every queue entry ends committed."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402
from relay_proc import HttpAgent, relay_process, wait_for  # noqa: E402

from ampcap.peer.invoker import invoke_body
from ampcap.wire.cbor import DEFAULT_LIMITS
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType

_INVOKE, _RESULT, _ERROR = int(MessageType.CAP_INVOKE), int(MessageType.CAP_RESULT), int(MessageType.ERROR)


def _invoke(caller: HttpAgent, to: str, a: int, b: int) -> bytes:
    return seal(caller.who, typ=_INVOKE, to=to, body=invoke_body("org.ampcap.demo.math.add:1.0.0", {"a": a, "b": b}),
                now_ms=time.time_ns() // 1_000_000, entropy=os.urandom, ttl=600_000)[1]


def _call_until(caller: HttpAgent, to: str, tag: int, stop: threading.Event, accepted: dict[bytes, int]) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        raw = _invoke(caller, to, n, tag)
        try:
            status = caller.post(raw)
        except OSError:
            continue  # the worker that had this request died: it may or may not have been taken
        if status == 202:
            accepted[decode_envelope(raw, DEFAULT_LIMITS).id] = n + tag


def _terminal_replies(caller: HttpAgent, seen: dict[bytes, list[bytes]]) -> None:
    """One pass over the caller's mailbox: terminal replies by the invoke they answer; ACK each."""
    for raw in caller.drain(acknowledge=False):
        env = decode_envelope(raw, DEFAULT_LIMITS)
        if env.typ in (_RESULT, _ERROR) and env.reply_to is not None:
            seen.setdefault(env.reply_to, []).append(raw)
            caller.ack(raw)


def test_a_relay_worker_killed_under_load_loses_and_doubles_nothing(tmp_path: Path, store_target: str) -> None:
    store_args = ("--state-url", store_target) if store_target.startswith("postgresql://") else \
        ("--state-dir", store_target)
    with relay_process(tmp_path, "--workers", "2", "--claim-lease", "2", "--redeliver", "2",
                       store_args=store_args) as relay, \
            serve_process(tmp_path, "--relay", relay.url, "--relay-did", relay.did, "--state-dir",
                          str(tmp_path / "agent-state")) as agent:
        assert relay.http_url is not None
        link = re.compile(r"link up " + re.escape(agent.did) + r" at relay-(\d+)-")
        assert wait_for(lambda: link.search(relay.stderr()) is not None, 30), relay.stderr()
        victim = int(link.findall(relay.stderr())[-1])
        callers = [HttpAgent(relay.http_url, relay.did, Identity.generate(os.urandom)) for _ in range(3)]
        accepted: dict[bytes, int] = {}
        stop = threading.Event()
        threads = [threading.Thread(target=_call_until, args=(c, agent.did, 1000 * i, stop, accepted))
                   for i, c in enumerate(callers)]
        for t in threads:
            t.start()
        try:
            assert wait_for(lambda: len(accepted) >= 30, 60)
            os.kill(victim, signal.SIGKILL)  # the worker holding the agent's link, mid-stream
            at_kill = len(accepted)
            assert wait_for(lambda: len(accepted) >= at_kill + 30, 60), relay.stderr()[-6000:]  # the others go on
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert f"(pid {victim}) died (signal SIGKILL); starting it again" in relay.stderr()
        replies: dict[bytes, list[bytes]] = {}

        def all_answered() -> bool:
            for c in callers:
                _terminal_replies(c, replies)
            return set(accepted) <= set(replies)

        assert wait_for(all_answered, 90), (len(accepted), len(set(accepted) & set(replies)), relay.entries())
        for invoke_id, expected in accepted.items():
            got = replies[invoke_id]
            assert len(set(got)) == 1, "two different terminal replies to one invoke"
            env = decode_envelope(got[0], DEFAULT_LIMITS)
            assert env.typ == _RESULT and env.body["result"] == {"sum": expected}, env.body
        assert all(len(r) == 1 for r in replies.values()), "a terminal reply handed out twice after its ACK"
        # Everything for the agent was committed by its ACKs; nothing waits.
        assert wait_for(lambda: set(relay.entries(agent.did)) <= {"delivered"}, 30), relay.entries(agent.did)
        assert relay.terminate() == 0
    log = relay.stderr()
    assert "Traceback" not in log, log[log.index("Traceback"):][:4000]
