"""RFC 006 Appendix A.1–A.17, each as a test of the sans-I/O session layer
(006:A.2, A.15 and A.17 also run against a live target: interop/session_vectors.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from session_helpers import (ALICE, BOB, ERROR, RESPONSE, REVIEW, SID, T0, answer, init, message, op, provider,
                             request)  # noqa: E402

from ampcap.errors import AmpError
from ampcap.session.context import RequestTracker, scope_of, session_context
from ampcap.session.control import is_control
from ampcap.session.record import Checkpoint, ThreadMode
from ampcap.session.state import RequestState, SessionState
from ampcap.wire.cbor import dumps
from ampcap.wire.registry import MessageType

PROGRESS, PROCESSING = int(MessageType.PROGRESS), int(MessageType.PROCESSING)
RESULT, INVOKE = int(MessageType.CAP_RESULT), int(MessageType.CAP_INVOKE)


def _error_code(out) -> int:
    assert out.typ == ERROR, out
    return out.body["code"]


def test_a1_init_accept() -> None:
    p, _ = provider()
    out = answer(p.handle(init(), "c", T0))
    assert out.typ == RESPONSE and out.reply_to is not None and out.thread_id == SID
    assert out.body["op"] == "accept" and out.body["status"] == "active"
    assert out.body["thread_mode"] == "coupled" and out.body["expires_at"] == T0 + 60_000
    assert p.sessions[SID].status is SessionState.ACTIVE


def test_a2_session_id_thread_id_mismatch_is_4001() -> None:
    p, _ = provider()
    assert _error_code(answer(p.handle(init(thread=bytes(16)), "c", T0))) == 4001
    assert SID not in p.sessions
    p.handle(init(), "c", T0)
    assert _error_code(answer(p.handle(op("suspend", thread=bytes(16)), "c", T0))) == 4001


def _tracked(mode: ThreadMode, thread: bytes | None) -> tuple[RequestTracker, bytes]:
    tracker = RequestTracker()
    req = message(ALICE, INVOKE, {"id": REVIEW, "params": {}, "session": session_context(SID)}, thread_id=thread)
    tracker.sent(req.envelope.id, SID, thread, mode)
    return tracker, req.envelope.id


def test_a3_provisional_replies_correlate_then_the_terminal_one() -> None:
    tracker, rid = _tracked(ThreadMode.COUPLED, SID)
    ctx = {"session": session_context(SID)}
    processing = message(BOB, PROCESSING, {**ctx, "status_text": "working"}, reply_to=rid, thread_id=SID)
    progress = message(BOB, PROGRESS, {**ctx, "progress_pct": 50}, reply_to=rid, thread_id=SID)
    for msg in (processing, progress):
        assert tracker.on_reply(msg.envelope, msg.body).state is RequestState.EXECUTING
    done = message(BOB, RESULT, {**ctx, "status": "success", "result": 1}, reply_to=rid, thread_id=SID)
    assert tracker.on_reply(done.envelope, done.body).state is RequestState.DONE
    assert not tracker.knows(rid)


def test_a4_provisional_without_reply_to_is_4001() -> None:
    tracker, _ = _tracked(ThreadMode.COUPLED, SID)
    stray = message(BOB, PROGRESS, {"session": session_context(SID), "progress_pct": 5}, thread_id=SID)
    with pytest.raises(AmpError) as exc:
        tracker.on_reply(stray.envelope, stray.body)
    assert exc.value.code == 4001


def test_a4b_independent_mode_provisional_thread_mismatch_is_4001() -> None:
    t1, t2 = b"T1" * 8, b"T2" * 8
    tracker, rid = _tracked(ThreadMode.INDEPENDENT, t1)
    wrong = message(BOB, PROGRESS, {"session": session_context(SID), "progress_pct": 5}, reply_to=rid, thread_id=t2)
    with pytest.raises(AmpError) as exc:
        tracker.on_reply(wrong.envelope, wrong.body)
    assert exc.value.code == 4001
    right = message(BOB, PROGRESS, {"session": session_context(SID), "progress_pct": 5}, reply_to=rid, thread_id=t1)
    assert tracker.on_reply(right.envelope, right.body) is not None


def test_a5_resume_returns_the_effective_checkpoint() -> None:
    p, _ = provider()
    p.handle(init(), "c", T0)
    p.handle(op("suspend", now=T0 + 1), "c", T0 + 1)
    assert p.sessions[SID].status is SessionState.SUSPENDED
    seen = b"\x00" * 8 + b"lastseen"
    out = answer(p.handle(op("resume", now=T0 + 2, checkpoint=Checkpoint(last_seen_msg_id=seen)), "c", T0 + 2))
    assert out.typ == RESPONSE and out.body["op"] == "accept" and out.body["status"] == "active"
    assert out.body["checkpoint"]["last_seen_msg_id"] == seen
    assert p.sessions[SID].status is SessionState.ACTIVE
    # resume is allowed from active too (§5.5)
    assert answer(p.handle(op("resume", now=T0 + 3), "c", T0 + 3)).body["status"] == "active"


def test_a6_resume_of_an_unknown_session_is_4001_without_detail() -> None:
    p, _ = provider()
    out = answer(p.handle(op("resume"), "c", T0))
    assert _error_code(out) == 4001 and out.body["message"] == "unknown session"


def test_a7_pins_survive_suspend_and_resume() -> None:
    p, _ = provider()
    accept = answer(p.handle(init(pin={"org.agentries.code-review": REVIEW}), "c", T0))
    assert accept.body["pinned_capabilities"] == {"org.agentries.code-review": REVIEW}
    p.handle(op("suspend"), "c", T0)
    out = answer(p.handle(op("resume"), "c", T0 + 1))
    assert out.body["pinned_capabilities"] == {"org.agentries.code-review": REVIEW}
    assert dict(p.sessions[SID].pinned) == {"org.agentries.code-review": REVIEW}


def test_a8_a_pin_that_cannot_be_honoured_is_4003() -> None:
    p, served = provider()
    p.handle(init(pin={"org.agentries.code-review": REVIEW}), "c", T0)
    other = message(ALICE, INVOKE, {"capability": "org.agentries.code-review", "version": "3.0.0", "params": {},
                                    "session": session_context(SID)}, thread_id=SID)
    with pytest.raises(AmpError) as exc:
        p.check_invoke(other, T0)
    assert exc.value.code == 4003
    served.ids.discard(REVIEW)  # the provider lost the pinned version
    assert _error_code(answer(p.handle(op("resume"), "c", T0 + 1))) == 4003
    # and a pin asked for at init that is not served: reject with reason_code 4003
    out = answer(p.handle(init(sid=b"s" * 16, pin={"org.agentries.code-review": REVIEW}), "c", T0))
    assert out.body["op"] == "reject" and out.body["reason_code"] == 4003 and out.body["status"] == "failed"


def _with_delegation(hook) -> object:
    from dataclasses import replace

    p, _ = provider(delegation_fresh=hook)
    p.handle(init(), "c", T0)
    p.sessions[SID] = replace(p.sessions[SID], delegation_cache=({"fingerprint": b"f", "updated_at": T0},))
    p.handle(op("suspend"), "c", T0)
    return p


def test_a9_revoked_delegation_on_resume_is_3004() -> None:
    def revoked(entry, now):
        raise AmpError(3004, "delegation revoked")

    p = _with_delegation(revoked)
    assert _error_code(answer(p.handle(op("resume"), "c", T0 + 1))) == 3004


def test_a10_revocation_source_unavailable_in_strict_mode_is_5002() -> None:
    def unreachable(entry, now):
        raise AmpError(5002, "revocation source unavailable")

    p = _with_delegation(unreachable)
    assert _error_code(answer(p.handle(op("resume"), "c", T0 + 1))) == 5002


def test_a11_a_non_participant_is_3001() -> None:
    p, _ = provider()
    p.handle(init(), "c", T0)
    assert _error_code(answer(p.handle(op("update", sender=BOB, expires_in_ms=5), "c", T0))) == 3001
    invoke = message(BOB, INVOKE, {"id": REVIEW, "params": {}, "session": session_context(SID)}, thread_id=SID)
    with pytest.raises(AmpError) as exc:
        p.check_invoke(invoke, T0)
    assert exc.value.code == 3001


def test_a12_close_is_idempotent() -> None:
    p, _ = provider()
    p.handle(init(), "c", T0)
    first = answer(p.handle(op("close"), "c", T0 + 1))
    assert first.body["op"] == "close" and first.body["status"] == "closed"
    again = p.handle(op("close", now=T0 + 2), "c", T0 + 2)
    assert answer(again).body["status"] == "closed" and p.sessions[SID].closed_at == T0 + 1
    assert not any(type(a).__name__ == "SaveSession" for a in again)  # no transition, nothing to save


def test_a13_independent_mode_negotiated_and_threads_vary() -> None:
    p, _ = provider()
    out = answer(p.handle(init(mode=ThreadMode.INDEPENDENT), "c", T0))
    assert out.body["thread_mode"] == "independent"
    for thread in (b"A" * 16, b"B" * 16, None):
        msg = message(ALICE, INVOKE, {"id": REVIEW, "params": {}, "session": session_context(SID)}, thread_id=thread)
        assert p.check_invoke(msg, T0).session_id == SID


def test_a14_a_request_without_sess_v_is_no_session_control() -> None:
    body = {"op": "init", "payload": "business"}
    assert not is_control(int(MessageType.REQUEST), body)
    assert is_control(int(MessageType.REQUEST), {**body, "sess_v": 1})
    assert not is_control(int(MessageType.MESSAGE), {**body, "sess_v": 1})


def test_a15_independent_provisional_without_session_context_is_4001() -> None:
    tracker, rid = _tracked(ThreadMode.INDEPENDENT, b"T1" * 8)
    bare = message(BOB, PROGRESS, {"progress_pct": 10}, reply_to=rid, thread_id=b"T1" * 8)
    with pytest.raises(AmpError) as exc:
        tracker.on_reply(bare.envelope, bare.body)
    assert exc.value.code == 4001


@pytest.mark.parametrize("ctx", ["not a map", {"session_id": b"short", "session_scope": True},
                                 {"session_id": SID, "session_scope": False}])
def test_a16_malformed_session_context_is_1001(ctx) -> None:
    p, _ = provider()
    p.handle(init(), "c", T0)
    msg = message(ALICE, INVOKE, {"id": REVIEW, "params": {}, "session": ctx}, thread_id=SID)
    with pytest.raises(AmpError) as exc:
        p.check_invoke(msg, T0)
    assert exc.value.code == 1001


def test_a17_error_codes_on_the_wire() -> None:
    assert dumps(1001) == bytes.fromhex("1903e9") and dumps(4001) == bytes.fromhex("190fa1")
    p, _ = provider()
    mismatch = answer(p.handle(init(thread=bytes(16)), "c", T0))
    assert b"\x64code\x19\x0f\xa1" in dumps(mismatch.body)
    bad = answer(p.handle(request({"sess_v": 1, "op": "init", "session_id": b"x"}), "c", T0))
    assert b"\x64code\x19\x03\xe9" in dumps(bad.body)


def test_thread_id_naming_a_live_session_without_the_marker_is_4001() -> None:
    p, _ = provider()
    p.handle(init(), "c", T0)
    plain = message(ALICE, INVOKE, {"id": REVIEW, "params": {}}, thread_id=SID)
    with pytest.raises(AmpError) as exc:
        scope_of(plain.envelope, plain.body, p.sessions)
    assert exc.value.code == 4001


def test_ended_sessions_are_forgotten_a_day_after_they_end() -> None:
    from ampcap.session.provider import ProviderConfig

    p, _ = provider(config=ProviderConfig(keep_ended_ms=1_000))
    p.handle(init(), "c", T0)
    p.handle(op("close", now=T0 + 5), "c", T0 + 5)
    assert p.sessions[SID].status is SessionState.CLOSED
    deadline = p.get_timer()
    assert deadline is not None and deadline >= T0 + 1_000
    p.handle_timer(T0 + 60_000 + 1_000)  # expires_at (T0 + 60 s) + keep_ended_ms
    assert SID not in p.sessions and p.get_timer() is None
    # a live session is expired at its time, then forgotten later
    p.handle(init(sid=b"L" * 16), "c", T0)
    p.handle_timer(T0 + 60_001)
    assert p.sessions[b"L" * 16].status is SessionState.EXPIRED
    p.handle_timer(T0 + 62_000)
    assert b"L" * 16 not in p.sessions
