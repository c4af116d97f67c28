"""Federation (RFC 003 §5.6, RFC 002 §6.5-§6.6, §7.3): two real relays, each
on its own store, handing off through their wrappers. Appendix A.5-A.15."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ampcap.deleg.cose import _sig_structure, default_kid
from ampcap.relay import Audit, Finalized, Forward, ReportCommit, parse_routes
from ampcap.relay.federation import (CommitReceipt, TransferReceipt, decode_forward, encode_commit_report,
                                     encode_forward, encode_forward_answer, ForwardAnswer, sign_commit_receipt,
                                     sign_transfer_receipt)
from ampcap.relay.states import TransferState
from ampcap.wire.cbor import CBORTag, dumps, loads
from relay_helpers import NOW, ident, make_relay, message, recipient_ack

ALICE, BOB, CAROL, MALLORY = ident(1), ident(2), ident(3), ident(4)
A_ID, B_ID = ident(100), ident(101)
CODE_2003, CODE_3001 = b"\x6aerror_code\x19\x07\xd3", b"\x6aerror_code\x19\x0b\xb9"


def routes_for_a(mode: str = "single"):
    return parse_routes({"peer": [{"did": B_ID.did, "url": "https://relay-b.test", "trusted": True,
                                   "transfer_modes": ["single", "dual"]}],
                         "route": [{"recipient": BOB.did, "via": [B_ID.did], "mode": mode},
                                   {"recipient": CAROL.did, "via": [B_ID.did], "mode": mode}]})


def routes_for_b():
    return parse_routes({"peer": [{"did": A_ID.did, "url": "https://relay-a.test", "trusted": True}]})


@pytest.fixture
def pair(store, store2):
    def build(mode: str = "single", **config):
        a = make_relay(store, n=100, routes=routes_for_a(mode), **config)
        b = make_relay(store2, n=101, routes=routes_for_b(), **config)
        b.register(BOB.did, NOW)
        b.register(CAROL.did, NOW)
        return a, b
    return build


def _forwards(actions) -> list[Forward]:
    return [a for a in actions if isinstance(a, Forward)]


def _answer(body: bytes) -> dict:
    return loads(body)


def test_a9_single_custody_moves_only_after_a_valid_receipt(pair) -> None:
    a, b = pair()
    msg_id, raw = message(ALICE, BOB.did)
    result = a.submit(raw, principal=ALICE.did, now=NOW)
    [fwd] = _forwards(result.actions)
    assert fwd.url == "https://relay-b.test" and fwd.downstream == B_ID.did
    req = decode_forward(fwd.wrapper)
    assert req.message == raw and req.relay_path == (A_ID.did,) and req.hop_limit == 7
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.TRANSFER_PENDING
    body, _ = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 1)
    answer = _answer(body)
    assert answer["accepted"] is True and isinstance(answer["receipt"], bytes)
    actions = a.forward_answered(fwd.seq, BOB.did, body, NOW + 2)
    assert Finalized(seq=fwd.seq, reason="transferred") in actions
    assert a.queue.get(fwd.seq, BOB.did) is None  # local copy gone after acceptance
    assert b.poll(BOB.did, None, 10, NOW + 3).messages == (raw,)  # byte-identical downstream


def test_a5_loop_is_refused_2003_without_receipt_or_queueing(pair) -> None:
    a, b = pair()
    _, raw = message(ALICE, BOB.did)
    wrapper = _wrapper(raw, relay_path=(A_ID.did, B_ID.did), hop_limit=5)
    body, _ = b.receive_forward(wrapper, principal=A_ID.did, now=NOW)
    answer = _answer(body)
    assert answer["accepted"] is False and "receipt" not in answer and answer["error_code"] == 2003
    assert "loop" in answer["error_message"]
    assert CODE_2003 in body  # A.15
    assert b.poll(BOB.did, None, 10, NOW).messages == ()
    # §5.6.5 order: the path before the hop budget (both wrong: the loop is named).
    both, _ = b.receive_forward(_wrapper(raw, relay_path=(B_ID.did,), hop_limit=0), principal=A_ID.did, now=NOW)
    assert "loop" in _answer(both)["error_message"]


def _wrapper(raw: bytes, *, relay_path=(), hop_limit=8, upstream=None, recipient=None, mode="single") -> bytes:
    from ampcap.relay.federation import ForwardRequest
    return encode_forward(ForwardRequest(message=raw, from_did=ALICE.did, recipient_did=recipient or BOB.did,
                                         relay_path=tuple(relay_path), hop_limit=hop_limit,
                                         upstream_relay=upstream or A_ID.did, transfer_mode=mode))


def test_a6_hop_limit_zero_is_refused_and_the_upstream_keeps_it_local(pair) -> None:
    a, b = pair()
    _, raw = message(ALICE, BOB.did)
    body, _ = b.receive_forward(_wrapper(raw, relay_path=("did:web:x",), hop_limit=0), principal=A_ID.did, now=NOW)
    answer = _answer(body)
    assert answer == {"accepted": False, "error_code": 2003, "error_message": answer["error_message"]}
    assert "hop" in answer["error_message"]
    # Upstream: A got the message with one hop left; its handoff carries 0,
    # B refuses, and A keeps it (rolled back, local, pollable).
    routes_x = parse_routes({"peer": [{"did": "did:key:z6MkX", "url": "https://x.test", "trusted": True}]})
    a.routes = replace(a.routes, peers={**a.routes.peers, **routes_x.peers})
    body, actions = a.receive_forward(_wrapper(raw, relay_path=("did:key:z6MkX",), hop_limit=1,
                                               upstream="did:key:z6MkX"), principal="did:key:z6MkX", now=NOW)
    assert _answer(body)["accepted"] is True
    [fwd] = _forwards(actions)
    assert decode_forward(fwd.wrapper).hop_limit == 0
    refusal, _ = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 1)
    assert _answer(refusal)["error_code"] == 2003
    audits = a.forward_answered(fwd.seq, BOB.did, refusal, NOW + 2)
    assert [x.event for x in audits if isinstance(x, Audit)] == ["transfer-rolled-back"]
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.LOCAL_QUEUED
    assert a.poll(BOB.did, None, 10, NOW + 3).messages == (raw,)
    # And the retry cannot pass the hop limit either: A stops at its own check.
    retry = a.tick(NOW + 10_000)
    assert _forwards(retry) == []


def test_a7_duplicate_handoff_returns_the_first_receipt_and_one_entry(pair) -> None:
    a, b = pair()
    _, raw = message(ALICE, BOB.did)
    wrapper = _wrapper(raw, relay_path=(A_ID.did,), hop_limit=7)
    first, _ = b.receive_forward(wrapper, principal=A_ID.did, now=NOW)
    second, _ = b.receive_forward(wrapper, principal=A_ID.did, now=NOW + 50)
    assert _answer(first)["receipt"] == _answer(second)["receipt"]
    assert b.poll(BOB.did, None, 10, NOW + 60).messages == (raw,)


def test_a8_no_receipt_before_the_timeout_rolls_back_and_retries(pair) -> None:
    a, b = pair()
    _, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    assert a.poll(BOB.did, None, 10, NOW + 1).messages == ()  # pending: not delivered locally
    actions = a.tick(NOW + 5_001)
    assert [x.event for x in actions if isinstance(x, Audit)] == ["transfer-rolled-back"]
    copy = a.queue.get(fwd.seq, BOB.did)
    assert copy.transfer.state is TransferState.LOCAL_QUEUED
    assert a.poll(BOB.did, None, 10, NOW + 5_002).messages == (raw,)  # local delivery resumes
    # §5.6.7: retried after 1000 ms, then 2000 ms; at most 3 attempts.
    [retry] = _forwards(a.tick(NOW + 6_001))
    a.forward_failed(retry.seq, BOB.did, NOW + 6_100)
    assert _forwards(a.tick(NOW + 7_000)) == []
    [third] = _forwards(a.tick(NOW + 8_100))
    a.forward_failed(third.seq, BOB.did, NOW + 8_200)
    assert _forwards(a.tick(NOW + 60_000)) == []
    assert a.queue.get(fwd.seq, BOB.did).transfer.attempts == 3
    # A late answer to a rolled-back handoff changes nothing.
    late, _ = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 60_001)
    a.forward_answered(fwd.seq, BOB.did, late, NOW + 60_002)
    assert a.queue.get(fwd.seq, BOB.did) is not None


def _refused_with(a, fwd, body, code) -> None:
    actions = a.forward_answered(fwd.seq, fwd.recipient, body, NOW + 2)
    [audit] = [x for x in actions if isinstance(x, Audit)]
    assert audit.event == "transfer-rolled-back" and audit.code == code
    copy = a.queue.get(fwd.seq, fwd.recipient)
    assert copy is not None and copy.transfer.state is TransferState.LOCAL_QUEUED


def _receipt(signer, msg_id, **overrides) -> TransferReceipt:
    fields = dict(msg_id=msg_id, from_did=ALICE.did, recipient_did=BOB.did, upstream_relay=A_ID.did,
                  downstream_relay=B_ID.did, accepted_at=NOW, hop_limit_remaining=6)
    fields.update(overrides)
    return TransferReceipt(**fields)


def test_a10_receipt_from_the_wrong_signer_or_tuple_is_3001_and_no_custody(pair) -> None:
    a, _ = pair()
    msg_id, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    forged = sign_transfer_receipt(MALLORY, _receipt(MALLORY, msg_id))
    _refused_with(a, fwd, encode_forward_answer(ForwardAnswer(accepted=True, receipt=forged)), 3001)
    # Signed by B but for another message / another upstream / another recipient.
    [fwd] = _forwards(a.tick(NOW + 1_002))
    for bad in (_receipt(B_ID, b"\x00" * 16), _receipt(B_ID, msg_id, upstream_relay=MALLORY.did),
                _receipt(B_ID, msg_id, recipient_did=CAROL.did)):
        body = encode_forward_answer(ForwardAnswer(accepted=True, receipt=sign_transfer_receipt(B_ID, bad)))
        copy = a.queue.get(fwd.seq, BOB.did)
        a.queue.set_transfer(fwd.seq, BOB.did, replace(copy.transfer, state=TransferState.TRANSFER_PENDING))
        _refused_with(a, fwd, body, 3001)
    # A tampered signature.
    good = bytearray(sign_transfer_receipt(B_ID, _receipt(B_ID, msg_id)))
    good[-1] ^= 1
    copy = a.queue.get(fwd.seq, BOB.did)
    a.queue.set_transfer(fwd.seq, BOB.did, replace(copy.transfer, state=TransferState.TRANSFER_PENDING))
    _refused_with(a, fwd, encode_forward_answer(ForwardAnswer(accepted=True, receipt=bytes(good))), 3001)


def _sign1_with_alg(identity, payload: bytes, alg: int) -> bytes:
    protected = dumps({1: alg, 4: default_kid(identity.did).encode()})
    return dumps(CBORTag(18, [protected, {}, payload, identity.sign(_sig_structure(protected, payload))]))


def test_a11_unsupported_receipt_alg_is_3001(pair) -> None:
    a, _ = pair()
    msg_id, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    receipt = _sign1_with_alg(B_ID, dumps(_receipt(B_ID, msg_id).to_map()), -7)
    _refused_with(a, fwd, encode_forward_answer(ForwardAnswer(accepted=True, receipt=receipt)), 3001)


def test_receipt_v_2_is_1004(pair) -> None:
    a, _ = pair()
    msg_id, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    payload = {**_receipt(B_ID, msg_id).to_map(), "receipt_v": 2}
    from ampcap.deleg.cose import sign1
    receipt = sign1(B_ID, dumps(payload))
    _refused_with(a, fwd, encode_forward_answer(ForwardAnswer(accepted=True, receipt=receipt)), 1004)


def _dual_accepted(pair):
    a, b = pair("dual")
    msg_id, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    body, _ = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 1)
    assert a.forward_answered(fwd.seq, BOB.did, body, NOW + 2)[0].event == "transfer-accepted"
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.DUAL_ACTIVE
    return a, b, msg_id, raw, fwd


def test_a12_dual_custody_commit_receipt_finalizes_upstream(pair) -> None:
    a, b, msg_id, raw, fwd = _dual_accepted(pair)
    assert a.poll(BOB.did, None, 10, NOW + 3).messages == ()  # retained, not delivered twice
    assert b.poll(BOB.did, None, 10, NOW + 3).messages == (raw,)
    result = b.submit(recipient_ack(BOB, ALICE.did, msg_id), principal=BOB.did, now=NOW + 4)
    [report] = [x for x in result.actions if isinstance(x, ReportCommit)]
    assert report.upstream == A_ID.did and report.url == "https://relay-a.test"
    # The principal must be the receipt's downstream relay (RFC 002 A.11): no state change otherwise.
    refused, _ = a.receive_commit_report(report.report, principal=MALLORY.did, now=NOW + 5)
    assert _answer(refused)["error_code"] == 3001 and CODE_3001 in refused  # A.15
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.DUAL_ACTIVE
    body, actions = a.receive_commit_report(report.report, principal=B_ID.did, now=NOW + 5)
    assert _answer(body) == {"accepted": True}
    assert Finalized(seq=fwd.seq, reason="commit-reported") in actions
    assert a.queue.get(fwd.seq, BOB.did) is None


def test_a_commit_report_that_overtakes_its_transfer_receipt_waits_for_it(pair) -> None:
    """The recipient is on a live link at B: B pushes, the recipient ACKs and
    B's commit report reaches A before A has read B's answer to the handoff.
    A keeps the verified report; custody moves only with the transfer
    receipt (§5.6.4), and the report applies then. A forged early report
    changes nothing."""
    a, b = pair("dual")
    msg_id, raw = message(ALICE, BOB.did)
    [fwd] = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    b.link_up(BOB.did, NOW)
    body, _ = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 1)
    [report] = [x for x in b.submit(recipient_ack(BOB, ALICE.did, msg_id), principal=BOB.did, now=NOW + 2).actions
                if isinstance(x, ReportCommit)]
    forged = sign_commit_receipt(MALLORY, CommitReceipt(
        msg_id=msg_id, from_did=ALICE.did, recipient_did=BOB.did, upstream_relay=A_ID.did,
        downstream_relay=B_ID.did, result="delivered", committed_at=NOW))
    refused, _ = a.receive_commit_report(encode_commit_report(forged), principal=B_ID.did, now=NOW + 3)
    assert _answer(refused)["error_code"] == 3001
    early, actions = a.receive_commit_report(report.report, principal=B_ID.did, now=NOW + 3)
    assert _answer(early) == {"accepted": True} and actions[0].event == "commit-reported-early"
    copy = a.queue.get(fwd.seq, BOB.did)
    assert copy.transfer.state is TransferState.TRANSFER_PENDING  # no custody change without the receipt
    actions = a.forward_answered(fwd.seq, BOB.did, body, NOW + 4)
    assert [x.event for x in actions if isinstance(x, Audit)] == ["transfer-accepted", "commit-reported"]
    assert Finalized(seq=fwd.seq, reason="commit-reported") in actions
    assert a.queue.get(fwd.seq, BOB.did) is None


@pytest.mark.parametrize("online", [True, False])
def test_an_acknowledgement_handed_over_in_dual_custody_is_reported(pair, online: bool) -> None:
    """An ACK for a recipient of B (never acknowledged in turn) is delivered
    when it is handed over, by push or poll: B reports that to A, which
    would otherwise keep its copy until expiry."""
    a, b = pair("dual")
    msg_id, _ = message(BOB, ALICE.did)
    ack = recipient_ack(ALICE, BOB.did, msg_id, now=NOW)
    [fwd] = _forwards(a.submit(ack, principal=ALICE.did, now=NOW).actions)
    if online:
        b.link_up(BOB.did, NOW)
    body, actions = b.receive_forward(fwd.wrapper, principal=A_ID.did, now=NOW + 1)
    if not online:
        page = b.poll(BOB.did, None, 10, NOW + 2)
        assert page.messages == (ack,)
        actions = list(page.actions)
    [report] = [x for x in actions if isinstance(x, ReportCommit)]
    a.forward_answered(fwd.seq, BOB.did, body, NOW + 3)
    _, done = a.receive_commit_report(report.report, principal=B_ID.did, now=NOW + 4)
    assert Finalized(seq=fwd.seq, reason="commit-reported") in done
    assert b.queue.get(fwd.seq, BOB.did) is None


def test_a14_unsupported_commit_receipt_alg_is_3001(pair) -> None:
    a, b, msg_id, raw, fwd = _dual_accepted(pair)
    payload = CommitReceipt(msg_id=msg_id, from_did=ALICE.did, recipient_did=BOB.did, upstream_relay=A_ID.did,
                            downstream_relay=B_ID.did, result="delivered", committed_at=NOW).to_map()
    report = encode_commit_report(_sign1_with_alg(B_ID, dumps(payload), -7))
    body, _ = a.receive_commit_report(report, principal=B_ID.did, now=NOW + 5)
    assert _answer(body)["accepted"] is False and _answer(body)["error_code"] == 3001
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.DUAL_ACTIVE


def test_commit_report_for_an_unknown_transfer_is_3001(pair) -> None:
    a, _ = pair("dual")
    receipt = sign_commit_receipt(B_ID, CommitReceipt(
        msg_id=b"\x01" * 16, from_did=ALICE.did, recipient_did=BOB.did, upstream_relay=A_ID.did,
        downstream_relay=B_ID.did, result="delivered", committed_at=NOW))
    body, _ = a.receive_commit_report(encode_commit_report(receipt), principal=B_ID.did, now=NOW)
    assert _answer(body)["error_code"] == 3001


def test_commit_report_failed_result_is_not_delivery(pair) -> None:
    a, b, msg_id, raw, fwd = _dual_accepted(pair)
    receipt = sign_commit_receipt(B_ID, CommitReceipt(
        msg_id=msg_id, from_did=ALICE.did, recipient_did=BOB.did, upstream_relay=A_ID.did,
        downstream_relay=B_ID.did, result="failed", committed_at=NOW + 5))
    body, _ = a.receive_commit_report(encode_commit_report(receipt), principal=B_ID.did, now=NOW + 5)
    assert _answer(body)["accepted"] is True
    copy = a.queue.get(fwd.seq, BOB.did)
    assert copy is not None and copy.transfer.state is TransferState.COMMIT_REPORTED
    assert a.poll(BOB.did, None, 10, NOW + 6).messages == (raw,)  # local policy resumes


def test_a13_multi_recipient_message_is_split_per_recipient(pair) -> None:
    a, b = pair()
    msg_id, raw = message(ALICE, [BOB.did, CAROL.did])
    forwards = _forwards(a.submit(raw, principal=ALICE.did, now=NOW).actions)
    assert sorted(decode_forward(f.wrapper).recipient_did for f in forwards) == sorted([BOB.did, CAROL.did])
    assert all(decode_forward(f.wrapper).message == raw for f in forwards)
    to_bob = next(f for f in forwards if f.recipient == BOB.did)
    body, _ = b.receive_forward(to_bob.wrapper, principal=A_ID.did, now=NOW + 1)
    a.forward_answered(to_bob.seq, BOB.did, body, NOW + 2)
    assert a.queue.get(to_bob.seq, BOB.did) is None  # Bob's transferred
    carol = a.queue.get(to_bob.seq, CAROL.did)
    assert carol is not None and carol.transfer.state is TransferState.TRANSFER_PENDING  # Carol's independent


def test_rfc002_a9_forward_from_an_untrusted_or_mismatched_principal_is_3001(pair) -> None:
    a, b = pair()
    _, raw = message(ALICE, BOB.did)
    for principal, upstream in ((MALLORY.did, A_ID.did), (A_ID.did, MALLORY.did), (None, A_ID.did),
                                (MALLORY.did, MALLORY.did)):
        body, actions = b.receive_forward(_wrapper(raw, upstream=upstream), principal=principal, now=NOW)
        assert _answer(body)["error_code"] == 3001 and CODE_3001 in body and actions == []
    assert b.poll(BOB.did, None, 10, NOW).messages == ()


def test_malformed_wrappers_are_1001_and_versions_1004(pair) -> None:
    _, b = pair()
    _, raw = message(ALICE, BOB.did)
    good = loads(_wrapper(raw))
    cases = [(b"\xff", 1001), (dumps([1]), 1001), (dumps({**good, "fwd_v": 2}), 1004),
             (dumps({k: v for k, v in good.items() if k != "hop_limit"}), 1001),
             (dumps({**good, "relay_path": "x"}), 1001), (dumps({**good, "extra": 1}), 1001),
             (dumps({**good, "recipient_did": CAROL.did}), 1001), (dumps({**good, "transfer_mode": "x"}), 1001)]
    for body, code in cases:
        answer, _ = b.receive_forward(body, principal=A_ID.did, now=NOW)
        assert _answer(answer)["error_code"] == code, body


def test_handoff_for_a_recipient_the_downstream_does_not_serve_is_2001(pair) -> None:
    _, b = pair()
    stranger = ident(9)
    _, raw = message(ALICE, stranger.did)
    body, _ = b.receive_forward(_wrapper(raw, recipient=stranger.did), principal=A_ID.did, now=NOW)
    assert _answer(body)["error_code"] == 2001


def test_the_timer_covers_handoff_deadlines(pair) -> None:
    a, _ = pair(lease_ms=600_000)
    _, raw = message(ALICE, BOB.did, ttl=3_600_000)
    a.submit(raw, principal=ALICE.did, now=NOW)
    assert a.next_deadline(NOW) == NOW + 5_001  # the accept timeout, not the lease renewal
