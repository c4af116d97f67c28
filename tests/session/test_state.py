"""The RFC 006 §8 tables, checked pair by pair, and the record's CDDL."""

from __future__ import annotations

import itertools

import pytest

from ampcap.errors import AmpError
from ampcap.schema import load_schemas
from ampcap.session.record import Checkpoint, SessionRecord, ThreadMode
from ampcap.session.state import (REQUEST_TRANSITIONS, SESSION_TRANSITIONS, TERMINAL, RequestInput, RequestState,
                                  SessionInput, SessionState, advance_request, advance_session)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(SessionState, SessionInput)))
def test_every_session_pair_is_in_the_table_or_4001(state: SessionState, event: SessionInput) -> None:
    if (state, event) in SESSION_TRANSITIONS:
        assert advance_session(state, event) is SESSION_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(AmpError) as exc:
            advance_session(state, event)
        assert exc.value.code == 4001


def test_the_rfc_diagram_edges_are_there() -> None:
    S, I = SessionState, SessionInput
    for edge, to in [((S.NONE, I.INIT), S.PENDING), ((S.PENDING, I.ACCEPT), S.ACTIVE),
                     ((S.PENDING, I.REJECT), S.FAILED), ((S.ACTIVE, I.SUSPEND), S.SUSPENDED),
                     ((S.ACTIVE, I.CLOSE), S.CLOSING), ((S.ACTIVE, I.TTL), S.EXPIRED),
                     ((S.SUSPENDED, I.RESUME), S.ACTIVE), ((S.SUSPENDED, I.CLOSE), S.CLOSING),
                     ((S.SUSPENDED, I.TTL), S.EXPIRED), ((S.CLOSING, I.FINALIZE), S.CLOSED)]:
        assert SESSION_TRANSITIONS[edge] is to
    # nothing leaves a terminal state (a repeated close on CLOSED stays CLOSED)
    assert all(to is state for (state, _), to in SESSION_TRANSITIONS.items() if state in TERMINAL)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(RequestState, RequestInput)))
def test_every_request_pair(state: RequestState, event: RequestInput) -> None:
    if (state, event) in REQUEST_TRANSITIONS:
        assert advance_request(state, event) is REQUEST_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(AmpError):
            advance_request(state, event)


def test_a_record_round_trips_and_matches_the_cddl() -> None:
    record = SessionRecord(session_id=bytes(16), owner="did:key:zA", participants=("did:key:zA", "did:key:zB"),
                           status=SessionState.SUSPENDED, created_at=1, expires_at=9, last_activity_at=2,
                           thread_mode=ThreadMode.INDEPENDENT, suspended_at=3,
                           checkpoint=Checkpoint(last_seen_msg_id=bytes(16), last_activity_at=2),
                           pinned={"org.x.y": "org.x.y:1.0.0"}, last_terminal=bytes(16))
    wire = record.to_wire()
    found = load_schemas().validate("session-record", wire)
    assert [v for v in found if v.kind == "error"] == []
    assert {v.path for v in found} == {"thread_mode", "last_terminal"}  # the two documented extension keys
    assert SessionRecord.from_wire(wire) == record


@pytest.mark.parametrize("rule", ["session-init-body", "session-accept-body", "session-reject-body",
                                  "session-update-body", "session-suspend-body", "session-resume-body",
                                  "session-close-body", "session-control-base"])
def test_every_control_rule_compiles(rule: str) -> None:
    load_schemas().node(rule)
