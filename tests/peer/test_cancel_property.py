"""The executor's side of ampcap's remote cancel (R23), sans-I/O: a cancel is
an event like a completion or a deadline, and whichever comes first decides
the invoke's one terminal reply. Hypothesis draws the order of completions,
cancels (the invoke's own sender's, a stranger's, repeated ones), deadlines
and resends of the same invoke; every invoke must end with exactly one
terminal message id, its journal record must hold those very bytes, and a
cancel that won must say so (5003, ``{"cancelled": true}``) and stop the job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampcap.peer.actions import Cancel, Execute
from ampcap.peer.journal import Persist
from ampcap.wire.cbor import loads
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.identity import DidKeyResolver

sys.path.insert(0, str(Path(__file__).parent))
from exec_helpers import ALICE, BOB, INVOKE, RESULT, T0, make_executor, message, sends  # noqa: E402

ECHO_ID = "org.ampcap.demo.echo:1.0.0"

EVENT = st.tuples(st.sampled_from(["complete", "cancel", "stranger_cancel", "resend", "tick"]),
                  st.integers(min_value=0, max_value=3),  # which invoke
                  st.integers(min_value=0, max_value=400))  # ms later


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timeouts=st.lists(st.integers(min_value=50, max_value=1_000), min_size=1, max_size=4),
       script=st.lists(EVENT, max_size=24))
def test_every_invoke_ends_with_exactly_one_terminal_message(timeouts: list[int],
                                                             script: list[tuple[str, int, int]]) -> None:
    ex = make_executor()
    ex.journal = True
    pipeline = ReceivePipeline(DidKeyResolver())
    now = T0
    invokes = []
    terminal_ids: dict[bytes, set[bytes]] = {}
    journaled: dict[bytes, set[bytes]] = {}
    cancelled_jobs: set[bytes] = set()
    outcome: dict[bytes, str] = {}  # what ended each invoke first

    def take(actions: list[Any], cause: str) -> None:
        for persist in (a for a in actions if isinstance(a, Persist)):
            for record in persist.records:
                journaled.setdefault(record.key.msg_id, set()).add(record.terminal.wire)
        for send in sends(actions, RESULT):
            invoke_id = send.out.reply_to
            assert send.out.msg_id is not None and send.out.wire is not None
            if invoke_id not in terminal_ids:
                outcome[invoke_id] = cause
                body = loads(send.out.wire)["body"]
                if cause == "cancel":
                    assert body["error"]["code"] == 5003 and body["error"]["details"] == {"cancelled": True}
                if cause == "complete":
                    assert body["status"] == "success"
            terminal_ids.setdefault(invoke_id, set()).add(send.out.msg_id)
        for cancel in (a for a in actions if isinstance(a, Cancel)):
            cancelled_jobs.add(cancel.key.msg_id)

    for timeout in timeouts:
        inbound = message(ALICE, INVOKE, {"id": ECHO_ID, "params": {"message": "hi"}, "timeout_ms": timeout},
                          now, pipeline=pipeline)
        actions = ex.handle(inbound, "A", now)
        [execute] = [a for a in actions if isinstance(a, Execute)]
        invokes.append((inbound, execute.job.key))

    for kind, which, later in script:
        now += later
        inbound, key = invokes[which % len(invokes)]
        take(ex.handle_timer(now), "timeout")
        if kind == "complete":
            take(ex.complete(key, result={"message": "hi"}, now_ms=now), "complete")
        elif kind == "cancel":
            take(ex.cancel_requested(ALICE.did, key.msg_id, now), "cancel")
        elif kind == "stranger_cancel":  # another sender cannot cancel Alice's invoke
            assert ex.cancel_requested(BOB.did, key.msg_id, now) == []
        elif kind == "resend":
            take(ex.handle(inbound, "B", now), "resend")

    now += 2_000  # every deadline has passed
    take(ex.handle_timer(now), "timeout")
    assert ex.running == 0
    for inbound, key in invokes:
        ids = terminal_ids.get(key.msg_id)
        assert ids is not None and len(ids) == 1, (outcome, terminal_ids)
        assert len(journaled[key.msg_id]) == 1  # the journal keeps exactly the bytes sent
        # A resend now gets those same bytes again.
        again = sends(ex.handle(inbound, "C", now), RESULT)
        assert [s.out.msg_id for s in again] == list(ids)
        assert again[0].out.wire in journaled[key.msg_id]
        if outcome[key.msg_id] in ("cancel", "timeout"):
            assert key.msg_id in cancelled_jobs  # its task is told to stop
        else:
            assert key.msg_id not in cancelled_jobs
