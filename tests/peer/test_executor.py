"""Executor: RFC 004 §7.2 order, §7.3 states, rulings R5, R8, R9, R10."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampcap.errors import AmpError, LocalProtocolError
from ampcap.peer.dedupe import InvokeKey
from ampcap.peer.executor import (
    DENIED,
    TRANSITIONS,
    Cancel,
    Execute,
    ExecutorConfig,
    InvokeInput,
    InvokeState,
    advance,
    delegation_violation,
)
from ampcap.peer.limits import InFlightLimits
from ampcap.peer.policy import parse_policy
from ampcap.peer.sealing import Sealer
from ampcap.wire.cbor import dumps
from ampcap.wire.identity import DidKeyResolver
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.registry import MessageType

sys.path.insert(0, str(Path(__file__).parent))
from exec_helpers import (  # noqa: E402
    ALICE,
    BOB,
    DECLARE,
    ERROR,
    INVOKE,
    QUERY,
    RESULT,
    PROVIDER,
    T0,
    catalog_executor,
    entropy,
    make_executor,
    message,
    only_send,
    sends,
)

ECHO = "org.ampcap.demo.echo"
ECHO_ID = f"{ECHO}:1.0.0"
SESSION = {"session_id": b"\x01" * 16, "session_scope": True}


def by_id(params: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": ECHO_ID, "params": {"message": "hi"} if params is None else params, **extra}


def jobs(actions: list[Any]) -> list[Execute]:
    return [a for a in actions if isinstance(a, Execute)]


def error_code(actions: list[Any]) -> int:
    send = only_send(actions)
    assert send.out.typ == ERROR, send
    return send.out.body["code"]


# ------------------------------------------------------------ acceptance


def test_accepted_invoke_runs_once_and_gets_one_success_result() -> None:
    ex = make_executor()
    inv = message(ALICE, INVOKE, by_id(timeout_ms=5_000), thread_id=b"t" * 16)
    [action] = ex.handle(inv, "A", T0)
    job = action.job
    assert job.capability_id == ECHO_ID and job.params == {"message": "hi"}
    assert job.deadline_ms == T0 + 5_000 and job.conn == "A"
    assert job.key == InvokeKey(ALICE.did, inv.envelope.id)
    assert job.binding.target == "ampcap.caps.demo:echo"
    assert ex.state_of(job.key) is InvokeState.EXECUTING
    [send] = ex.complete(job.key, result={"message": "hi"}, now_ms=T0 + 10)
    assert send.conn == "A"
    assert send.out.typ == RESULT and send.out.body == {"status": "success", "result": {"message": "hi"}}
    assert send.out.reply_to == inv.envelope.id and send.out.thread_id == b"t" * 16
    assert send.out.to == ALICE.did
    assert ex.running == 0 and ex.state_of(job.key) is None


def test_timeout_is_capped_by_config_and_defaulted() -> None:
    ex = make_executor(config=ExecutorConfig(default_timeout_ms=1_000, max_timeout_ms=2_000))
    [a] = ex.handle(message(ALICE, INVOKE, by_id(timeout_ms=99_999_999)), "A", T0)
    [b] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    assert a.job.deadline_ms == T0 + 2_000 and b.job.deadline_ms == T0 + 1_000
    assert ex.get_timer() == T0 + 1_000


def test_ack_on_receipt_comes_first() -> None:
    ex = make_executor(config=ExecutorConfig(ack_on_receipt=True))
    inv = message(ALICE, INVOKE, by_id())
    actions = ex.handle(inv, "A", T0 + 5)
    ack = actions[0].out
    assert ack.typ == MessageType.ACK and ack.reply_to == inv.envelope.id
    assert ack.body == {"ack_source": "recipient", "received_at": T0 + 5}
    assert len(jobs(actions)) == 1


def test_legacy_type_alias_resolves_to_canonical() -> None:
    ex = make_executor()
    [a] = ex.handle(message(ALICE, INVOKE, {"type": "echo", "version": "1.1.0", "params": {"message": "x"}}), "A", T0)
    assert a.job.capability_id == f"{ECHO}:1.1.0"


def test_negotiated_range_selects_highest() -> None:
    ex = make_executor()
    body = {"capability": ECHO, "negotiate": {"range": ">=1.0.0 <2.0.0"}, "params": {"message": "x"}}
    [a] = ex.handle(message(ALICE, INVOKE, body), "A", T0)
    assert a.job.capability_id == f"{ECHO}:1.1.0"


# ---------------------------------------------------------- §7.2 ordering

# Failure flags in the order the executor must report them. Note "acl" sits
# before "missing": a caller without a grant must never learn (4002) that a
# capability does not exist (R10, A.9).
FLAGS = ["step1", "caller", "rate", "overload", "delegation", "acl", "missing", "version", "params"]
CODES = {"caller": 3001, "rate": 3005, "overload": 5004, "delegation": 3004, "acl": 3001,
         "missing": 4002, "version": 4003, "params": 4004}


def _scenario(step1: str | None, flags: set[str]) -> int:
    policy_text: dict[str, Any] = {"deny": [ALICE.did] if "caller" in flags else [],
                                   "rate_limit": {"rate": 0.001, "burst": 1}}
    if "acl" in flags:
        policy_text["capability"] = [{"match": "org.ampcap.demo.*", "deny": [ALICE.did]}]
    limits = InFlightLimits(per_connection=1, total=10)
    ex = make_executor(policy=parse_policy(policy_text), limits=limits)
    if "rate" in flags:  # spend the only token on a query
        ex.handle(message(ALICE, QUERY, {"filter": {"capability": ECHO}}), "A", T0)
    if "overload" in flags:
        limits.acquire("A")
    name = "org.ampcap.demo.nope" if "missing" in flags else ECHO
    body: dict[str, Any] = {"capability": name, "version": "9.0.0" if "version" in flags else "1.0.0",
                            "params": {} if "params" in flags else {"message": "m"}}
    if "delegation" in flags:
        body["delegation"] = {"chain": []}
    if step1 == "shape":
        del body["params"]
    elif step1 == "identity":
        body["id"] = ECHO_ID
        body["negotiate"] = {"preferred": "1.0.0"}
    return error_code(ex.handle(message(ALICE, INVOKE, body), "A", T0))


@pytest.mark.parametrize("step1", [None, "shape", "identity"])
def test_earliest_failing_step_wins(step1: str | None) -> None:
    later = FLAGS[1:]
    for bits in itertools.product([False, True], repeat=len(later)):
        flags = {f for f, on in zip(later, bits) if on}
        if step1 is None and not flags:
            continue
        expected = {"shape": 1001, "identity": 4001}[step1] if step1 else CODES[next(f for f in later if f in flags)]
        assert _scenario(step1, flags) == expected, (step1, sorted(flags))


# ---------------------------------------------------------------- vectors


def test_a8_id_disagreeing_with_capability_is_4001() -> None:
    ex = make_executor()
    body = {"id": ECHO_ID, "capability": "org.agentries.translate", "version": "1.0.0", "params": {}}
    assert error_code(ex.handle(message(ALICE, INVOKE, body), "A", T0)) == 4001


def test_a16_id_with_negotiate_is_4001() -> None:
    ex = make_executor()
    body = by_id(negotiate={"range": ">=1.0.0"})
    assert error_code(ex.handle(message(ALICE, INVOKE, body), "A", T0)) == 4001


@pytest.mark.parametrize("body, code", [
    ({"capability": ECHO, "params": {}}, 4001),  # by-name without version or negotiate
    ({"params": {}}, 4001),  # neither form
    ({"capability": ECHO, "version": "1.0", "params": {}}, 4001),  # bad semver (R6)
    ({"capability": ECHO, "version": 1, "params": {}}, 1001),  # wrong type
    ({"id": ECHO_ID}, 1001),  # params missing
    (["not", "a", "map"], 1001),
    (by_id(session={"session_id": b"short"}), 1001),  # malformed session (RFC 004 §9)
    (by_id(timeout_ms=True), 1001),
    # Numbers Python will not read (over 4,300 digits): a bad version, not a crash (5001).
    ({"capability": ECHO, "version": "1" * 5000 + ".0.0", "params": {}}, 4001),
    ({"capability": ECHO, "negotiate": {"range": ">=" + "1" * 5000 + ".0.0"}, "params": {}}, 4001),
    ({"capability": "ossa:a/b@" + "1" * 5000 + ".0", "version": "1.0.0", "params": {}}, 4002),
])
def test_step1_body_faults(body: Any, code: int) -> None:
    assert error_code(make_executor().handle(message(ALICE, INVOKE, body), "A", T0)) == code


def test_a_query_range_with_a_huge_number_is_4001() -> None:
    body = {"filter": {"capability": ECHO, "version": ">=" + "1" * 5000 + ".0.0"}}
    assert error_code(make_executor().handle(message(ALICE, QUERY, body), "A", T0)) == 4001


def test_a6_missing_required_param_is_4004() -> None:
    ex = make_executor()
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id(params={})), "A", T0)) == 4004


def test_a19_delegation_is_3004_with_minimal_detail() -> None:
    ex = make_executor()
    send = only_send(ex.handle(message(ALICE, INVOKE, by_id(delegation={"chain": ["x"]})), "A", T0))
    assert send.out.body["code"] == 3004 and "details" not in send.out.body
    hinted = message(ALICE, INVOKE, by_id(), ext={"delegation_hint": "x"})
    assert error_code(ex.handle(hinted, "A", T0)) == 3004


def test_delegation_carriage_helper() -> None:
    assert delegation_violation(message(ALICE, int(MessageType.MESSAGE), {"delegation": 1})).code == 4001
    assert delegation_violation(message(ALICE, int(MessageType.MESSAGE), {"x": 1}, ext={"delegation": 1})).code == 3004
    assert delegation_violation(message(ALICE, INVOKE, by_id(delegation=1))) is None  # the executor's step 3
    assert delegation_violation(message(ALICE, int(MessageType.MESSAGE), {"text": "hi"})) is None


def test_a20_a21_session_context_changes_nothing_and_is_echoed() -> None:
    ex = make_executor()
    [plain] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    [with_session] = ex.handle(message(ALICE, INVOKE, by_id(session=SESSION)), "A", T0)
    assert plain.job.capability_id == with_session.job.capability_id
    assert plain.job.params == with_session.job.params
    [done] = ex.complete(with_session.job.key, result=1, now_ms=T0)
    assert done.out.body == {"status": "success", "result": 1, "session": SESSION}
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id(params={}, session=SESSION)), "A", T0)) == 4004


# -------------------------------------------------------------------- R10


def test_r10_denied_caller_gets_identical_bytes_for_existing_and_missing() -> None:
    policy = parse_policy({"capability": [{"match": "org.ampcap.*", "allow": [BOB.did]}]})
    bodies = []
    for body in (by_id(), {"capability": "org.ampcap.demo.nope", "version": "1.0.0", "params": {}},
                 {"capability": ECHO, "version": "7.0.0", "params": {"message": "x"}},
                 by_id(params={"wrong": 1})):
        send = only_send(make_executor(policy=policy).handle(message(ALICE, INVOKE, body), "A", T0))
        bodies.append(dumps(send.out.body))
    assert len(set(bodies)) == 1
    assert bodies[0] == dumps(AmpError(3001, DENIED).to_body())
    # A caller denied outright (step 2) gets those very bytes too.
    deny_all = parse_policy({"default": "deny"})
    send = only_send(make_executor(policy=deny_all).handle(message(ALICE, INVOKE, by_id()), "A", T0))
    assert dumps(send.out.body) == bodies[0]
    # Bob has the grant, so he may learn that the capability does not exist.
    missing = {"capability": "org.ampcap.demo.nope", "version": "1.0.0", "params": {}}
    assert error_code(make_executor(policy=policy).handle(message(BOB, INVOKE, missing), "A", T0)) == 4002


def test_alias_cannot_bypass_capability_acl() -> None:
    policy = parse_policy({"capability": [{"match": ECHO, "deny": [ALICE.did]}]})
    body = {"type": "echo", "version": "1.0.0", "params": {"message": "x"}}
    assert error_code(make_executor(policy=policy).handle(message(ALICE, INVOKE, body), "A", T0)) == 3001


def test_restricted_caller_cannot_tell_known_aliases_from_unknown_names() -> None:
    # Alice may not use the demo namespace. Aliases and OSSA URIs carry no
    # namespace, so for her an unknown one must look exactly like a known one
    # that leads into org.ampcap.demo.*; Bob, whom no rule refuses, still
    # learns that a name does not exist.
    policy = parse_policy({"capability": [{"match": "org.ampcap.demo.*", "allow": [BOB.did]}]})
    ex = catalog_executor(policy)
    denied = []
    for name in ("echo", "echoo", "ossa:demo/add@1.0", "ossa:demo/sub@1.0", ECHO, "org.ampcap.demo.nope"):
        for typ, body in ((INVOKE, {"type": name, "version": "1.0.0", "params": {"message": "x"}}),
                          (QUERY, {"filter": {"capability": name}})):
            send = only_send(ex.handle(message(ALICE, typ, body), "A", T0))
            assert send.out.typ == ERROR and send.out.body["code"] == 3001, (name, typ)
            denied.append(send.out.body)
    assert all(b == denied[0] for b in denied)
    for typ, body in ((INVOKE, {"type": "echoo", "version": "1.0.0", "params": {}}), (QUERY, {"filter": {"capability": "echoo"}})):
        assert error_code(ex.handle(message(BOB, typ, body), "B", T0)) == 4002
    [run] = jobs(ex.handle(message(BOB, INVOKE, {"type": "echo", "version": "1.0.0", "params": {"message": "x"}}),
                           "B", T0))
    assert run.job.capability_id == ECHO_ID


# ---------------------------------------------------------- R5 terminals


def test_timeout_gives_one_5003_and_late_complete_is_dropped() -> None:
    ex = make_executor()
    [a] = ex.handle(message(ALICE, INVOKE, by_id(timeout_ms=100)), "A", T0)
    assert ex.handle_timer(T0 + 99) == []
    actions = ex.handle_timer(T0 + 100)
    [send] = sends(actions)
    assert send.out.typ == RESULT and send.out.body["error"]["code"] == 5003
    assert send.out.body["error"]["name"] == "TIMEOUT"
    assert [c for c in actions if isinstance(c, Cancel)] == [Cancel(key=a.job.key, code=5003)]
    assert sends(ex.complete(a.job.key, result="late", now_ms=T0 + 200)) == []
    assert ex.handle_timer(T0 + 10_000) == [] and ex.get_timer() is None


def test_crashing_binding_gives_exactly_one_5001() -> None:
    ex = make_executor()
    [a] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    [send] = ex.complete(a.job.key, error=AmpError(5001, "binding raised"), now_ms=T0)
    assert send.out.body == {"status": "error",
                             "error": {"code": 5001, "name": "INTERNAL_ERROR", "message": "binding raised"}}
    assert sends(ex.complete(a.job.key, error=AmpError(5001, "again"), now_ms=T0)) == []
    assert ex.handle_timer(T0 + 10**9) == []


@pytest.mark.parametrize("code", [-1, 1 << 70])
def test_a_binding_error_with_an_invalid_code_becomes_5001(code: Any) -> None:
    ex = make_executor()
    [a] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    [send] = ex.complete(a.job.key, error=AmpError(code, "odd"), now_ms=T0)
    assert send.out.body["error"]["code"] == 5001


def test_unencodable_result_becomes_5001() -> None:
    ex = make_executor()
    [a] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    [send] = ex.complete(a.job.key, result={"x": object()}, now_ms=T0)
    assert send.out.body["error"]["code"] == 5001


def test_shutdown_gives_every_job_one_terminal_and_refuses_new_work() -> None:
    ex = make_executor()
    keys = [ex.handle(message(ALICE, INVOKE, by_id()), c, T0)[0].job.key for c in "ABC"]
    actions = ex.shutdown(T0 + 1)
    results = sends(actions, RESULT)
    assert sorted(s.conn for s in results) == ["A", "B", "C"]
    assert {s.out.body["error"]["code"] for s in results} == {5002}
    assert {c.key for c in actions if isinstance(c, Cancel)} == set(keys)
    assert all(sends(ex.complete(k, result=1, now_ms=T0 + 2)) == [] for k in keys)
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id()), "A", T0 + 3)) == 5002
    assert error_code(ex.handle(message(ALICE, QUERY, {"filter": {"capability": ECHO}}), "A", T0 + 3)) == 5002


def test_progress_and_processing_reply_to_the_invoke() -> None:
    ex = make_executor()
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    [p] = ex.progress(a.job.key, 150.4, "nearly", now_ms=T0)
    assert p.out.typ == MessageType.PROGRESS and p.out.reply_to == inv.envelope.id
    assert p.out.body == {"progress_pct": 100, "status_text": "nearly"}
    assert ex.progress(a.job.key, -3, now_ms=T0)[0].out.body == {"progress_pct": 0}
    assert ex.progress(a.job.key, float("nan"), now_ms=T0) == []
    [q] = ex.processing(a.job.key, "working", eta_ms=500, now_ms=T0)
    assert q.out.typ == MessageType.PROCESSING and q.out.body == {"status_text": "working", "eta_ms": 500}
    ex.complete(a.job.key, result=None, now_ms=T0)
    assert ex.progress(a.job.key, 50, now_ms=T0) == [] and ex.processing(a.job.key, now_ms=T0) == []


# --------------------------------------------------------------------- R8


def test_duplicate_while_running_waits_for_the_same_outcome() -> None:
    ex = make_executor()
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    retry = message(ALICE, INVOKE, by_id(), msg_id=inv.envelope.id, ts=inv.envelope.ts, now=T0 + 500)
    assert retry.fingerprint == inv.fingerprint
    assert jobs(ex.handle(retry, "B", T0 + 500)) == [] and sends(ex.handle(retry, "B", T0 + 600)) == []
    out = ex.complete(a.job.key, result={"ok": 1}, now_ms=T0 + 700)
    assert [s.conn for s in out] == ["A", "B"]
    assert out[0].out == out[1].out and out[0].out.reply_to == inv.envelope.id


def test_duplicate_after_done_gets_cached_terminal_again() -> None:
    ex = make_executor()
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    [first] = ex.complete(a.job.key, result={"ok": 1}, now_ms=T0)
    retry = message(ALICE, INVOKE, by_id(), msg_id=inv.envelope.id, ts=inv.envelope.ts, now=T0 + 9)
    [again] = ex.handle(retry, "B", T0 + 9)
    assert again.conn == "B" and again.out.wire == first.out.wire is not None  # the same bytes (R8)
    assert (again.out.msg_id, again.out.ts_ms) == (first.out.msg_id, first.out.ts_ms)
    assert again.out.body == first.out.body


def test_duplicate_after_the_terminal_message_expired_is_4001_never_a_new_message() -> None:
    # R8 amended: the cached reply lives as long as its own ts + ttl; past it
    # the retry is told so rather than sent a re-signed copy with a new id.
    ex = make_executor(seal=Sealer(PROVIDER, entropy, DidKeyResolver(), default_ttl_ms=1_000))
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    [first] = ex.complete(a.job.key, result={"ok": 1}, now_ms=T0)
    assert first.out.ttl_ms == 1_000
    retry = message(ALICE, INVOKE, by_id(), msg_id=inv.envelope.id, ts=inv.envelope.ts, now=T0 + 1_000)
    assert only_send(ex.handle(retry, "B", T0 + 1_000)).out.wire == first.out.wire
    late = only_send(ex.handle(retry, "B", T0 + 1_001)).out
    assert late.typ == ERROR and late.body["code"] == 4001 and "expired" in late.body["message"]
    assert late.wire is None  # not a terminal message of its own: no copy kept


def test_same_id_with_different_content_is_4001_and_reveals_nothing() -> None:
    ex = make_executor()
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    ex.complete(a.job.key, result={"secret": 42}, now_ms=T0)
    forged = message(ALICE, INVOKE, by_id(params={"message": "other"}), msg_id=inv.envelope.id, ts=inv.envelope.ts)
    send = only_send(ex.handle(forged, "A", T0 + 1))
    assert send.out.typ == ERROR and send.out.body["code"] == 4001
    assert b"secret" not in dumps(send.out.body)


def test_retry_after_the_result_was_dropped_for_memory_never_runs_again() -> None:
    # R8 within a memory budget: results past cache_bytes are dropped, but a
    # retry of such an invoke is still recognised and answered 4001, not run.
    ex = make_executor(config=ExecutorConfig(cache_bytes=4096))
    invokes = [message(ALICE, INVOKE, by_id(params={"message": "x" * 1000})) for _ in range(8)]
    for inv in invokes:
        [job] = jobs(ex.handle(inv, "A", T0))
        ex.complete(job.job.key, result={"message": "x" * 1000}, now_ms=T0)
    first = invokes[0]
    retry = message(ALICE, INVOKE, by_id(params={"message": "x" * 1000}), msg_id=first.envelope.id,
                    ts=first.envelope.ts, now=T0 + 5)
    actions = ex.handle(retry, "B", T0 + 5)
    assert jobs(actions) == [] and error_code(actions) == 4001
    last = invokes[-1]
    retry = message(ALICE, INVOKE, by_id(params={"message": "x" * 1000}), msg_id=last.envelope.id,
                    ts=last.envelope.ts, now=T0 + 5)
    again = only_send(ex.handle(retry, "B", T0 + 5))  # the latest results are still kept
    assert again.out.typ == RESULT and again.out.body["result"] == {"message": "x" * 1000}


def test_rejections_cached_unless_retryable() -> None:
    limits = InFlightLimits(per_connection=1, total=1)
    ex = make_executor(limits=limits)
    bad = message(ALICE, INVOKE, by_id(params={}))
    first = only_send(ex.handle(bad, "A", T0))
    assert only_send(ex.handle(bad, "A", T0 + 1)).out.wire == first.out.wire  # 4004 cached (same id → same answer)
    [running] = ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)
    busy = message(ALICE, INVOKE, by_id())
    assert error_code(ex.handle(busy, "A", T0)) == 5004
    ex.complete(running.job.key, result=1, now_ms=T0)
    assert len(jobs(ex.handle(busy, "A", T0 + 1))) == 1  # the retry of a 5004 runs


def test_id_reused_after_a_retryable_refusal_is_4001_and_the_true_retry_runs() -> None:
    # A 5004 is not cached (a retry must be able to run), but the id is still
    # taken: other content under it is not a retry (R8). The daemon's one
    # receive pipeline remembers what was signed under each id.
    pipeline = ReceivePipeline(DidKeyResolver())
    ex = make_executor(limits=InFlightLimits(per_connection=1, total=1))
    [running] = ex.handle(message(ALICE, INVOKE, by_id(), pipeline=pipeline), "A", T0)
    busy = message(ALICE, INVOKE, by_id(), pipeline=pipeline)
    assert error_code(ex.handle(busy, "A", T0)) == 5004
    ex.complete(running.job.key, result=1, now_ms=T0)
    other = message(ALICE, INVOKE, by_id(params={"message": "other"}), msg_id=busy.envelope.id,
                    ts=busy.envelope.ts, now=T0 + 1, pipeline=pipeline)
    actions = ex.handle(other, "A", T0 + 1)
    assert jobs(actions) == [] and error_code(actions) == 4001
    retry = message(ALICE, INVOKE, by_id(), msg_id=busy.envelope.id, ts=busy.envelope.ts, now=T0 + 2,
                    pipeline=pipeline)
    assert len(jobs(ex.handle(retry, "A", T0 + 2))) == 1


def test_retry_of_an_invoke_evicted_under_load_never_runs_again() -> None:
    # The cache holds 3 entries; 5 invokes push the first two out before
    # their messages expire. Their retries must not run (R8); new invokes,
    # from Alice and from others, still do.
    ex = make_executor(config=ExecutorConfig(cache_entries=3))
    sent = [message(ALICE, INVOKE, by_id(), now=T0 + i) for i in range(5)]
    for i, inv in enumerate(sent):
        [job] = jobs(ex.handle(inv, "A", T0 + i))
        ex.complete(job.job.key, result={"message": "hi"}, now_ms=T0 + i)
    for i in (0, 1):
        retry = message(ALICE, INVOKE, by_id(), msg_id=sent[i].envelope.id, ts=sent[i].envelope.ts, now=T0 + 10)
        actions = ex.handle(retry, "B", T0 + 10)
        assert jobs(actions) == [] and error_code(actions) == 4001
        assert "new message id" in only_send(actions).out.body["message"]
    kept = message(ALICE, INVOKE, by_id(), msg_id=sent[4].envelope.id, ts=sent[4].envelope.ts, now=T0 + 10)
    assert only_send(ex.handle(kept, "B", T0 + 10)).out.typ == RESULT  # still cached: the result again
    assert len(jobs(ex.handle(message(ALICE, INVOKE, by_id(), now=T0 + 10), "A", T0 + 10))) == 1
    assert len(jobs(ex.handle(message(BOB, INVOKE, by_id(), now=T0), "A", T0 + 10))) == 1


def test_retries_past_the_waiter_bound_are_answered_5004() -> None:
    # Every invoke message gets one answer (R5), even the 3rd connection's
    # retry when only 2 may wait; a later retry finds the cached result.
    ex = make_executor(config=ExecutorConfig(max_waiters=2))
    inv = message(ALICE, INVOKE, by_id())
    [a] = ex.handle(inv, "A", T0)
    retry = message(ALICE, INVOKE, by_id(), msg_id=inv.envelope.id, ts=inv.envelope.ts, now=T0 + 1)
    assert sends(ex.handle(retry, "B", T0 + 1)) == []
    refused = only_send(ex.handle(retry, "C", T0 + 1))
    assert refused.out.typ == ERROR and refused.out.body["code"] == 5004 and refused.out.body["retry"] is True
    assert [s.conn for s in ex.complete(a.job.key, result=1, now_ms=T0 + 2)] == ["A", "B"]
    assert only_send(ex.handle(retry, "C", T0 + 3)).out.typ == RESULT


# ------------------------------------------------------- limits and rates


def test_rate_limit_3005_then_refill() -> None:
    ex = make_executor(policy=parse_policy({"rate_limit": {"rate": 1, "burst": 2}}))
    codes = [ex.handle(message(ALICE, INVOKE, by_id(params={})), "A", T0) for _ in range(3)]
    assert [error_code(c) for c in codes] == [4004, 4004, 3005]
    assert error_code(ex.handle(message(BOB, INVOKE, by_id(params={})), "A", T0)) == 4004  # per sender
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id(params={}), now=T0 + 1000), "A", T0 + 1000)) == 4004


def test_overload_5004_per_connection_and_global() -> None:
    ex = make_executor(limits=InFlightLimits(per_connection=2, total=3))
    assert len(jobs(ex.handle(message(ALICE, INVOKE, by_id()), "A", T0))) == 1
    assert len(jobs(ex.handle(message(ALICE, INVOKE, by_id()), "A", T0))) == 1
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id()), "A", T0)) == 5004
    assert len(jobs(ex.handle(message(ALICE, INVOKE, by_id()), "B", T0))) == 1
    assert error_code(ex.handle(message(ALICE, INVOKE, by_id()), "C", T0)) == 5004


# ---------------------------------------------------------------- queries


def test_query_answers_declare_with_reply_to() -> None:
    ex = make_executor()
    q = message(ALICE, QUERY, {"filter": {"capability": ECHO}, "limit": 2})
    send = only_send(ex.handle(q, "A", T0))
    assert send.out.typ == DECLARE and send.out.reply_to == q.envelope.id
    assert [d["version"] for d in send.out.body["capabilities"]] == ["2.0.0", "1.1.0"]
    assert send.out.body["next_cursor"] == "more"


def test_query_legacy_type_a7() -> None:
    send = only_send(make_executor().handle(message(ALICE, QUERY, {"filter": {"type": "echo"}}), "A", T0))
    assert send.out.typ == DECLARE and len(send.out.body["capabilities"]) == 3


@pytest.mark.parametrize("body, code", [
    ({"filter": {"capability": "org.agentries.nonexistent"}}, 4002),  # A.17
    ({"filter": {"capability": ECHO, "version": ">=3.0.0"}}, 4003),
    ({"filter": {"capability": ECHO}, "cursor": "bogus"}, 4001),  # A.15
    ({"filter": {"capability": ECHO, "version": "^1.0"}}, 4001),  # R11
    ({"filter": {}}, 1001),
    ({"filter": {"capability": ECHO}, "order": "random"}, 1001),
    ({"filter": {"capability": ECHO}, "delegation": {}}, 4001),  # R9
])
def test_query_errors(body: Any, code: int) -> None:
    assert error_code(make_executor().handle(message(ALICE, QUERY, body), "A", T0)) == code


def test_query_denied_does_not_leak() -> None:
    policy = parse_policy({"capability": [{"match": "org.*", "allow": []}]})
    a = only_send(make_executor(policy=policy).handle(message(ALICE, QUERY, {"filter": {"capability": ECHO}}), "A", T0))
    b = only_send(make_executor(policy=policy).handle(
        message(ALICE, QUERY, {"filter": {"capability": "org.x.none"}}), "A", T0))
    assert a.out.body == b.out.body and a.out.body["code"] == 3001


def test_other_types_are_not_the_executors() -> None:
    assert make_executor().handle(message(ALICE, int(MessageType.MESSAGE), {"text": "hi"}), "A", T0) == []


# ------------------------------------------------------------ state table


def test_state_table_covers_section_7_3_and_refuses_the_rest() -> None:
    assert advance(InvokeState.RECEIVED, InvokeInput.VALIDATE) is InvokeState.VALIDATING
    for state, event in itertools.product(InvokeState, InvokeInput):
        if (state, event) in TRANSITIONS:
            continue
        with pytest.raises(LocalProtocolError):
            advance(state, event)
    assert {s for (s, _) in TRANSITIONS} | set(TRANSITIONS.values()) == set(InvokeState)


# ------------------------------------------------------------- hypothesis

# Ops on two invokes (k ∈ {0,1}) and two connections; time only moves forward.
_op = st.one_of(
    st.tuples(st.just("deliver"), st.integers(0, 1), st.sampled_from("AB")),
    st.tuples(st.just("complete"), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 300)),
    st.tuples(st.just("shutdown")),
    st.tuples(st.just("closed"), st.sampled_from("AB")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=25))
def test_no_interleaving_sends_two_terminals(ops: list[tuple[Any, ...]]) -> None:
    ex = make_executor(limits=InFlightLimits(per_connection=8, total=8))
    invokes = [message(ALICE, INVOKE, by_id(timeout_ms=200)), message(BOB, INVOKE, by_id(timeout_ms=100))]
    keys = [InvokeKey(i.envelope.sender, i.envelope.id) for i in invokes]
    now = T0
    executed: list[InvokeKey] = []
    spontaneous: dict[tuple[bytes, str], int] = {}  # terminals not asked for by a delivery
    terminal_bodies: dict[bytes, set[bytes]] = {}
    for op in ops:
        if op[0] == "deliver":
            actions = ex.handle(invokes[op[1]], op[2], now)
        elif op[0] == "complete":
            actions = ex.complete(keys[op[1]], result="r" if op[2] else None,
                                  error=None if op[2] else AmpError(5001, "boom"), now_ms=now)
        elif op[0] == "tick":
            now += op[1]
            actions = ex.handle_timer(now)
        elif op[0] == "shutdown":
            actions = ex.shutdown(now)
        else:
            ex.connection_closed(op[1])
            actions = []
        executed += [a.job.key for a in jobs(actions)]
        for s in sends(actions, RESULT):
            terminal_bodies.setdefault(s.out.reply_to, set()).add(dumps(s.out.body))
            if op[0] != "deliver":
                k = (s.out.reply_to, s.conn)
                spontaneous[k] = spontaneous.get(k, 0) + 1
    assert len(executed) == len(set(executed)), "an invoke ran twice"
    assert all(n == 1 for n in spontaneous.values()), spontaneous
    assert all(len(b) == 1 for b in terminal_bodies.values()), "one invoke, two different outcomes"
    assert all(ex.state_of(k) is None for k in executed if k.msg_id in terminal_bodies), "terminal, still running"
    if any(op[0] == "shutdown" for op in ops):
        assert ex.running == 0


def test_a_rejection_line_and_error_stay_short_for_a_huge_version() -> None:
    # Rejections are logged without throttle: a version of megabytes made a
    # log line (and an ERROR) of megabytes per message.
    ex = catalog_executor()
    version = "1.0.0-" + "a" * 1_000_000
    actions = ex.handle(message(ALICE, INVOKE, {"capability": ECHO, "version": version,
                                                "params": {"message": "hi"}}), "A", T0)
    assert error_code(actions) == 4003
    assert len(only_send(actions).out.body["message"]) < 1_000
    (note,) = [a for a in actions if type(a).__name__ == "Log"]
    assert len(note.message) < 2_000 and "(1000006 chars) of org.ampcap.demo.echo is not served" in note.message
