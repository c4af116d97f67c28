"""Whatever bytes arrive, every entry point answers with an AMP code and
never raises anything else (h11's fuzzing habit, with Hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampcap.errors import AmpError
from ampcap.relay import Audit, Forward
from ampcap.relay.federation import decode_forward
from ampcap.relay.states import TransferState
from ampcap.wire.cbor import dumps, loads
from relay_helpers import NOW, ident, make_relay, message
from test_federation import A_ID, B_ID, routes_for_a, routes_for_b

ALICE, BOB = ident(1), ident(2)


@pytest.fixture
def relays(store, store2):
    a = make_relay(store, n=100, routes=routes_for_a("dual"))
    b = make_relay(store2, n=101, routes=routes_for_b())
    b.register(BOB.did, NOW)
    _, raw = message(ALICE, BOB.did)
    [fwd] = [x for x in a.submit(raw, principal=ALICE.did, now=NOW).actions if isinstance(x, Forward)]
    return a, b, fwd


def _mutations() -> st.SearchStrategy[bytes]:
    _, raw = message(ALICE, BOB.did)
    wrapper = dumps({"fwd_v": 1, "message": raw, "from_did": ALICE.did, "recipient_did": BOB.did, "relay_path": [],
                     "hop_limit": 3, "upstream_relay": A_ID.did, "transfer_mode": "single"})
    flips = st.tuples(st.sampled_from([raw, wrapper]), st.integers(0, 10_000), st.integers(1, 255)).map(
        lambda t: t[0][:t[1] % len(t[0])] + bytes([t[0][t[1] % len(t[0])] ^ t[2]]) + t[0][t[1] % len(t[0]) + 1:])
    return st.one_of(st.binary(max_size=300), flips, st.sampled_from([raw, wrapper]).map(lambda b: b[:len(b) // 2]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_mutations())
def test_no_entry_point_raises_on_bad_bytes(relays, data: bytes) -> None:
    a, b, fwd = relays
    result = a.submit(data, principal=ALICE.did, now=NOW)
    assert result.refusal is not None or result.envelope is not None
    body, _ = b.receive_forward(data, principal=A_ID.did, now=NOW)
    assert type(loads(body)["accepted"]) is bool
    body, _ = a.receive_commit_report(data, principal=B_ID.did, now=NOW)
    assert loads(body)["accepted"] is False
    # As the answer to a pending handoff: anything but a valid receipt rolls back.
    copy = a.queue.get(fwd.seq, BOB.did)
    a.queue.set_transfer(fwd.seq, BOB.did, replace(copy.transfer, state=TransferState.TRANSFER_PENDING))
    [audit] = [x for x in a.forward_answered(fwd.seq, BOB.did, data, NOW) if isinstance(x, Audit)]
    assert audit.event == "transfer-rolled-back"
    assert a.queue.get(fwd.seq, BOB.did).transfer.state is TransferState.LOCAL_QUEUED
    a.delivery_failed(fwd.seq, BOB.did, NOW)
    try:
        decode_forward(data)
    except AmpError as exc:
        assert exc.code in (1001, 1004)
