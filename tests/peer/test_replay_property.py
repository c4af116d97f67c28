"""Ruling R8 as amended, as a property: whatever clients do (exact resends on
any connection, connections that vanish, jobs that time out, rejections),
every invoke is answered by one terminal message, and every copy of it that
is ever sent is the same message: one distinct id, the same bytes.

Seeded random runs over the real executor and receive pipeline (no sockets):
the test is small in CI, and AMPCAP_SOAK_SCALE=large makes it longer.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from exec_helpers import ALICE, BOB, INVOKE, T0, ident, make_executor, message  # noqa: E402

from ampcap.peer.executor import Cancel, Execute
from ampcap.peer.outbound import Send
from ampcap.wire.envelope import decode_envelope
from ampcap.wire.identity import DidKeyResolver
from ampcap.wire.receive import Inbound, ReceivePipeline
from ampcap.wire.registry import MessageType, error_info

RESULT, ERROR = int(MessageType.CAP_RESULT), int(MessageType.ERROR)
STEPS = {"small": 400, "medium": 3000, "large": 20000}[os.environ.get("AMPCAP_SOAK_SCALE", "small")]
ECHO_ID = "org.ampcap.demo.echo:1.0.0"


def _body(rng: random.Random) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.1:
        return {"id": ECHO_ID, "params": {"message": 7}}  # 4004, rejected before running
    if kind < 0.15:
        return {"id": "org.example.none:1.0.0", "params": {}}  # 4002
    return {"id": ECHO_ID, "params": {"message": f"m{rng.randrange(10**6)}"}, "timeout_ms": rng.choice([50, 500, 5000])}


@pytest.mark.parametrize("seed", range(3))
def test_every_invoke_has_one_terminal_message_however_often_it_is_resent(seed: int) -> None:
    rng = random.Random(seed)
    ex = make_executor()
    pipeline = ReceivePipeline(DidKeyResolver())  # one replay cache, like the daemon's
    clients = [ALICE, BOB, ident(7), ident(8)]
    sent: list[tuple[Any, dict[str, Any], bytes, int]] = []  # (sender, body, id, ts) of every invoke
    conns = [f"c{i}" for i in range(4)]
    next_conn = len(conns)
    running: list[Any] = []  # job keys
    terminals: dict[bytes, set[bytes]] = {}  # invoke id -> distinct wire bytes of its terminal replies
    retryable: set[bytes] = set()
    now = T0

    def take(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Execute):
                running.append(action.job.key)
            elif isinstance(action, Cancel):
                running.remove(action.key)
            elif isinstance(action, Send) and action.out.typ in (RESULT, ERROR):
                assert action.out.wire is not None or error_info(action.out.body["code"]).retry
                if action.out.wire is None:  # a retryable refusal: not the last word (R8 keeps none)
                    retryable.add(action.out.reply_to)
                    continue
                env = decode_envelope(action.out.wire)
                assert env.reply_to == action.out.reply_to and env.id == action.out.msg_id
                terminals.setdefault(env.reply_to, set()).add(action.out.wire)

    def deliver(inbound: Inbound, conn: str) -> None:
        take(ex.handle(inbound, conn, now))

    for _ in range(STEPS):
        now += rng.randrange(0, 40)
        step = rng.random()
        if step < 0.3 or not sent:  # a new invoke
            sender, body = rng.choice(clients), _body(rng)
            inbound = message(sender, INVOKE, body, now, pipeline=pipeline)
            sent.append((sender, body, inbound.envelope.id, inbound.envelope.ts))
            deliver(inbound, rng.choice(conns))
        elif step < 0.6:  # an exact resend of an earlier one, on any connection
            sender, body, msg_id, ts = rng.choice(sent)
            deliver(message(sender, INVOKE, body, now, msg_id=msg_id, ts=ts, pipeline=pipeline), rng.choice(conns))
        elif step < 0.8 and running:  # a job completes
            key = running.pop(rng.randrange(len(running)))
            take(ex.complete(key, result={"ok": True}, now_ms=now))
        elif step < 0.9:  # a connection is aborted; a new one takes its place
            gone = conns.pop(rng.randrange(len(conns)))
            ex.connection_closed(gone)
            conns.append(f"c{next_conn}")
            next_conn += 1
        else:  # time passes: some jobs time out (5003)
            now += rng.randrange(0, 2000)
            take(ex.handle_timer(now))

    # Everything ends; then every invoke is resent once more, on a new connection.
    while running:
        take(ex.complete(running.pop(), result={"ok": True}, now_ms=now))
    for sender, body, msg_id, ts in sent:
        deliver(message(sender, INVOKE, body, now, msg_id=msg_id, ts=ts, pipeline=pipeline), "last")

    for _, _, msg_id, _ in sent:
        copies = terminals.get(msg_id, set())
        assert len(copies) == 1, f"invoke {msg_id.hex()} got {len(copies)} different terminal messages"
        assert len({decode_envelope(w).id for w in copies}) == 1
    assert ex.running == 0
