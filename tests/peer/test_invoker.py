"""Invoker: correlation (A.12, A.13), one outcome per call, §16.3 retries."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

from ampcap.errors import AmpError, LocalProtocolError
from ampcap.peer.executor import Execute
from ampcap.peer.invoker import (
    CALL_TRANSITIONS,
    CallInput,
    CallState,
    InvokeFailed,
    InvokeProgress,
    InvokeRetrying,
    InvokerConfig,
    InvokeSucceeded,
    InvokeTimedOut,
    Invoker,
    QueryAnswered,
    QueryFailed,
    RetryPolicy,
    _advance,
    invoke_body,
)
from ampcap.peer.outbound import Log
from ampcap.wire.registry import MessageType

sys.path.insert(0, str(Path(__file__).parent))
from exec_helpers import (  # noqa: E402
    ALICE,
    BOB,
    DECLARE,
    ERROR,
    INVOKE,
    PROVIDER,
    QUERY,
    RESULT,
    T0,
    deliver,
    entropy,
    make_executor,
    message,
    sends,
)

ECHO_ID = "org.ampcap.demo.echo:1.0.0"


def invoker(jitter: float = 1.0, **cfg: Any) -> Invoker:
    return Invoker(InvokerConfig(**cfg), lambda: jitter, entropy)


def reply(typ: int, body: Any, reply_to: bytes | None, now: int = T0, sender=PROVIDER) -> Any:
    return message(sender, typ, body, now, reply_to=reply_to, to=ALICE.did)


def outcomes(events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, (InvokeSucceeded, InvokeFailed, InvokeTimedOut,
                                                 QueryAnswered, QueryFailed))]


def test_invoke_body_forms() -> None:
    assert invoke_body(ECHO_ID, {"a": 1}) == {"id": ECHO_ID, "params": {"a": 1}}
    assert invoke_body(("x.y", "1.2.0"), 1, 50) == {"capability": "x.y", "version": "1.2.0", "params": 1,
                                                     "timeout_ms": 50}
    assert invoke_body(("x.y", ">=1.0.0 <2.0.0"), 1)["negotiate"] == {"range": ">=1.0.0 <2.0.0"}
    assert invoke_body(("x.y", {"preferred": "1.0.0"}), 1)["negotiate"] == {"preferred": "1.0.0"}


def test_success_is_one_outcome_and_a_second_reply_is_only_dropped() -> None:
    inv = invoker()
    handle, out = inv.start_invoke("A", ECHO_ID, {"message": "hi"}, timeout_ms=1000, now_ms=T0)
    assert out.typ == INVOKE and out.msg_id == handle and out.ts_ms == T0 and out.body["timeout_ms"] == 1000
    assert inv.get_timer() == T0 + 1000
    res = reply(RESULT, {"status": "success", "result": {"message": "hi"}}, handle)
    assert inv.on_reply(res, "A", T0 + 5) == [InvokeSucceeded(handle=handle, result={"message": "hi"},
                                                               capability_id=ECHO_ID, attempts=1)]
    again = inv.on_reply(reply(RESULT, {"status": "success", "result": 1}, handle), "A", T0 + 6)
    assert all(isinstance(e, Log) for e in again)  # late, not wrong: no ERROR 4001
    assert inv.pending == 0 and inv.get_timer() is None


def test_a12_result_with_unknown_reply_to_is_dropped_and_answered_4001() -> None:
    inv = invoker()
    handle, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    stray = reply(RESULT, {"status": "success", "result": 1}, b"\x00" * 16)
    events = inv.on_reply(stray, "A", T0)
    [send] = sends(events)
    assert send.out.typ == ERROR and send.out.body["code"] == 4001 and send.out.reply_to == stray.envelope.id
    assert outcomes(events) == [] and inv.state_of(handle) is CallState.SENT
    # A reply with no reply_to at all is no better.
    assert sends(inv.on_reply(reply(RESULT, {"status": "success", "result": 1}, None), "A", T0))[0].out.body["code"] == 4001


def test_a13_declare_not_answering_a_pending_query_is_4001() -> None:
    inv = invoker()
    qh, _ = inv.start_query("A", {"capability": "org.ampcap.demo.echo"}, now_ms=T0)
    ih, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    declare = {"capabilities": []}
    # CAP_DECLARE aimed at the invoke, CAP_RESULT aimed at the query: both mismatches.
    for typ, body, target in ((DECLARE, declare, ih), (RESULT, {"status": "success", "result": 1}, qh)):
        events = inv.on_reply(reply(typ, body, target), "A", T0)
        assert [s.out.body["code"] for s in sends(events)] == [4001] and outcomes(events) == []
    assert inv.pending == 2


def test_a_declare_the_parser_chokes_on_fails_the_query_not_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from ampcap.caps import descriptor

    def choke(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(descriptor.Descriptor, "from_wire", choke)
    inv = invoker()
    qh, _ = inv.start_query("A", {"capability": "org.ampcap.demo.echo"}, now_ms=T0)
    [failed] = inv.on_reply(reply(DECLARE, {"capabilities": [{"name": "x"}]}, qh), "A", T0)
    assert isinstance(failed, QueryFailed) and failed.error.code == 1001 and inv.pending == 0


def test_reply_from_another_did_is_a_mismatch() -> None:
    inv = invoker()
    handle, out = inv.start_invoke("A", ECHO_ID, {}, to=PROVIDER.did, now_ms=T0)
    assert out.to == PROVIDER.did
    events = inv.on_reply(reply(RESULT, {"status": "success", "result": 1}, handle, sender=ALICE), "A", T0)
    assert sends(events) and outcomes(events) == []


def test_provisional_replies_become_progress_events() -> None:
    inv = invoker()
    handle, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    events = []
    events += inv.on_reply(reply(int(MessageType.ACK), {"ack_source": "recipient", "received_at": T0}, handle), "A", T0)
    events += inv.on_reply(reply(int(MessageType.PROCESSING), {"status_text": "busy"}, handle), "A", T0)
    events += inv.on_reply(reply(int(MessageType.PROGRESS), {"progress_pct": 40}, handle), "A", T0)
    assert events == [InvokeProgress(handle=handle, kind="ack"),
                      InvokeProgress(handle=handle, kind="processing", text="busy"),
                      InvokeProgress(handle=handle, kind="progress", pct=40)]
    assert inv.state_of(handle) is CallState.SENT


def test_error_reply_and_result_error_fail_the_call() -> None:
    inv = invoker()
    h1, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    h2, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    [e1] = inv.on_reply(reply(ERROR, AmpError(4004, "params.message missing").to_body(), h1), "A", T0)
    assert isinstance(e1, InvokeFailed) and e1.error.code == 4004 and e1.error.message == "params.message missing"
    err = {"status": "error", "error": {"code": 5001, "name": "INTERNAL_ERROR", "message": "boom"}}
    [e2] = inv.on_reply(reply(RESULT, err, h2), "A", T0)
    assert isinstance(e2, InvokeFailed) and e2.error.code == 5001


def test_malformed_result_still_gives_one_outcome() -> None:
    inv = invoker()
    h, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    [e] = inv.on_reply(reply(RESULT, {"status": "weird"}, h), "A", T0)
    assert isinstance(e, InvokeFailed) and e.error.code == 1001


def test_local_timeout_once_and_late_reply_dropped() -> None:
    inv = invoker()
    h, _ = inv.start_invoke("A", ECHO_ID, {}, timeout_ms=100, now_ms=T0)
    assert inv.handle_timer(T0 + 99) == []
    assert inv.handle_timer(T0 + 100) == [InvokeTimedOut(handle=h, attempts=1)]
    assert inv.handle_timer(T0 + 10_000) == []
    late = inv.on_reply(reply(RESULT, {"status": "success", "result": 1}, h), "A", T0 + 200)
    assert all(isinstance(e, Log) for e in late) and late


@pytest.mark.parametrize("jitter", [0.5, 0.75, 1.0])
def test_retry_schedule_matches_rfc001_16_3(jitter: float) -> None:
    inv = invoker(jitter)
    h, out = inv.start_invoke("A", ECHO_ID, {}, timeout_ms=1000, retry=RetryPolicy(), now_ms=T0)
    now, waits = T0, []
    for attempt in range(1, 6):
        now += 1000
        events = inv.handle_timer(now)  # local timeout of this attempt
        if attempt == 5:
            assert events == [InvokeTimedOut(handle=h, attempts=5)]
            break
        [retrying] = events
        assert isinstance(retrying, InvokeRetrying) and retrying.attempt == attempt + 1
        waits.append(retrying.at_ms - now)
        now = retrying.at_ms
        [send] = inv.handle_timer(now)
        assert send.out == out  # the very same message: id, ts, ttl, body
    assert waits == [int(1000 * 2 ** n * jitter) for n in range(4)]
    for n, w in enumerate(waits, start=1):  # the §16.3 table's ranges
        assert 500 * 2 ** (n - 1) <= w <= 1000 * 2 ** (n - 1)


def test_backoff_is_capped_and_jitter_clamped() -> None:
    policy = RetryPolicy(max_attempts=20)
    assert policy.backoff_ms(7, 1.0) == 60_000 and policy.backoff_ms(30, 1.0) == 60_000
    assert policy.backoff_ms(1, 5.0) == 1000 and policy.backoff_ms(1, 0.0) == 500


def test_retry_only_for_retryable_errors_and_only_when_asked() -> None:
    inv = invoker()
    h, _ = inv.start_invoke("A", ECHO_ID, {}, retry=RetryPolicy(), now_ms=T0)
    [e] = inv.on_reply(reply(ERROR, AmpError(4004, "bad").to_body(), h), "A", T0)
    assert isinstance(e, InvokeFailed)
    h2, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)  # no RetryPolicy
    [e2] = inv.on_reply(reply(ERROR, AmpError(5004, "busy").to_body(), h2), "A", T0)
    assert isinstance(e2, InvokeFailed) and e2.error.code == 5004
    h3, _ = inv.start_invoke("A", ECHO_ID, {}, retry=RetryPolicy(), now_ms=T0)
    [e3] = inv.on_reply(reply(ERROR, AmpError(5004, "busy").to_body(), h3), "A", T0)
    assert isinstance(e3, InvokeRetrying) and inv.state_of(h3) is CallState.BACKOFF
    # A reply arriving during back-off answers the same message: accepted.
    [e4] = inv.on_reply(reply(RESULT, {"status": "success", "result": 7}, h3), "A", T0 + 1)
    assert isinstance(e4, InvokeSucceeded) and inv.get_timer() is None


def test_a_result_error_is_final_even_with_a_retryable_code() -> None:
    # The invocation ran; a resend under the same id would only fetch the
    # provider's cached CAP_RESULT again (R8), after seconds of back-off.
    inv = invoker()
    h, _ = inv.start_invoke("A", ECHO_ID, {}, retry=RetryPolicy(), now_ms=T0)
    err = {"status": "error", "error": {"code": 5001, "name": "INTERNAL_ERROR", "message": "boom"}}
    [e] = inv.on_reply(reply(RESULT, err, h), "A", T0)
    assert isinstance(e, InvokeFailed) and e.error.code == 5001 and e.attempts == 1
    assert inv.pending == 0 and inv.get_timer() is None


def test_a_refused_reply_ends_its_call_at_once() -> None:
    # A CAP_RESULT or ERROR that failed the receive checks will not be
    # followed by a good one: the call fails with that refusal's code now
    # rather than time out (and be retried) later.
    inv = invoker()
    h1, _ = inv.start_invoke("A", ECHO_ID, {}, to=PROVIDER.did, retry=RetryPolicy(), now_ms=T0)
    h2, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    bad_result = reply(RESULT, {"status": "success"}, h1).envelope
    assert inv.on_rejected(reply(MessageType.PROGRESS, {"progress_pct": 5}, h1).envelope,
                           AmpError(1001, "x"), T0) == []  # a bad PROGRESS: the result may still come
    assert inv.on_rejected(reply(RESULT, {}, h1, sender=BOB).envelope, AmpError(1001, "x"), T0) == []  # not the callee
    [e1] = inv.on_rejected(bad_result, AmpError(1001, "missing result", path="body.result"), T0)
    assert isinstance(e1, InvokeFailed) and e1.error.code == 1001 and e1.error.path == "body.result"
    assert "CAP_RESULT was refused: missing result" in e1.error.message
    [e2] = inv.on_rejected(reply(ERROR, {"code": 5004}, h2).envelope, AmpError(1002, "bad signature"), T0)
    assert isinstance(e2, InvokeFailed) and e2.error.code == 1002
    assert inv.pending == 0 and inv.on_rejected(bad_result, AmpError(1001, "again"), T0) == []


def test_no_retry_past_the_message_lifetime() -> None:
    inv = invoker(message_ttl_ms=3_500)
    h, _ = inv.start_invoke("A", ECHO_ID, {}, timeout_ms=1000, retry=RetryPolicy(), now_ms=T0)
    [retrying] = inv.handle_timer(T0 + 1000)
    assert isinstance(retrying, InvokeRetrying)
    inv.handle_timer(retrying.at_ms)
    assert inv.handle_timer(retrying.at_ms + 1000) == [InvokeTimedOut(handle=h, attempts=2)]


def test_query_answered_and_failed() -> None:
    ex = make_executor()
    inv = invoker()
    h, out = inv.start_query("A", {"capability": "org.ampcap.demo.echo"}, limit=2, order="oldest-first", now_ms=T0)
    assert out.body == {"filter": {"capability": "org.ampcap.demo.echo"}, "limit": 2, "order": "oldest-first"}
    [send] = ex.handle(deliver(ALICE, out, T0), "S", T0)
    [answer] = inv.on_reply(deliver(PROVIDER, send.out, T0, to=ALICE.did), "A", T0)
    assert isinstance(answer, QueryAnswered) and answer.next_cursor == "more"
    assert [str(d.version) for d in answer.descriptors] == ["1.0.0", "1.1.0"]
    h2, out2 = inv.start_query("A", {"capability": "org.agentries.nonexistent"}, now_ms=T0)
    [send2] = ex.handle(deliver(ALICE, out2, T0), "S", T0)
    [failed] = inv.on_reply(deliver(PROVIDER, send2.out, T0, to=ALICE.did), "A", T0)
    assert failed == QueryFailed(handle=h2, error=failed.error) and failed.error.code == 4002
    h3, _ = inv.start_query("A", {"capability": "x.y"}, timeout_ms=10, now_ms=T0)
    [timed] = inv.handle_timer(T0 + 10)
    assert isinstance(timed, QueryFailed) and timed.error.code == 5003


def test_end_to_end_retry_is_recognised_by_the_executor() -> None:
    """The invoker's resend is the same signed message, so the executor's R8
    cache answers it instead of running the capability twice."""
    ex = make_executor()
    inv = invoker()
    h, out = inv.start_invoke("A", ECHO_ID, {"message": "hi"}, timeout_ms=1000, retry=RetryPolicy(), now_ms=T0)
    [execute] = ex.handle(deliver(ALICE, out, T0), "S", T0)
    assert isinstance(execute, Execute)
    [retrying] = inv.handle_timer(T0 + 1000)  # the provider is slow: local timeout
    [resend] = inv.handle_timer(retrying.at_ms)
    assert ex.handle(deliver(ALICE, resend.out, retrying.at_ms), "S2", retrying.at_ms)[0].__class__ is Log
    results = ex.complete(execute.job.key, result={"message": "hi"}, now_ms=retrying.at_ms + 5)
    assert [s.conn for s in results] == ["S", "S2"]
    [done] = inv.on_reply(deliver(PROVIDER, results[1].out, retrying.at_ms + 6, to=ALICE.did), "A",
                          retrying.at_ms + 6)
    assert isinstance(done, InvokeSucceeded) and done.attempts == 2
    late = inv.on_reply(deliver(PROVIDER, results[0].out, retrying.at_ms + 7, to=ALICE.did), "A", retrying.at_ms + 7)
    assert outcomes(late) == [] and sends(late) == []


def test_pending_is_bounded_and_bad_timeouts_refused() -> None:
    inv = invoker(max_pending=1)
    inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    with pytest.raises(LocalProtocolError) as exc:
        inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    assert exc.value.code == 5004
    with pytest.raises(LocalProtocolError):
        invoker().start_invoke("A", ECHO_ID, {}, timeout_ms=0, now_ms=T0)


def test_abandon_forgets_without_outcome() -> None:
    inv = invoker()
    h, _ = inv.start_invoke("A", ECHO_ID, {}, now_ms=T0)
    inv.abandon(h)
    assert inv.pending == 0 and inv.handle_timer(T0 + 10**9) == []


def test_call_state_table() -> None:
    for state, event in itertools.product(CallState, CallInput):
        if (state, event) in CALL_TRANSITIONS:
            assert _advance(state, event) is CALL_TRANSITIONS[(state, event)]
        else:
            with pytest.raises(LocalProtocolError):
                _advance(state, event)
    assert all(s is not CallState.DONE for (s, _) in CALL_TRANSITIONS)  # DONE is final


def test_non_reply_types_are_ignored() -> None:
    assert invoker().on_reply(message(PROVIDER, QUERY, {"filter": {"type": "x"}}, to=ALICE.did), "A", T0) == []
