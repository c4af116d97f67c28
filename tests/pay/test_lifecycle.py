"""The §7 table."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.pay.lifecycle import TABLE, TERMINAL, Event, State, advance


def test_the_happy_paths_of_section_4_1() -> None:
    s = advance(State.QUOTED, Event.AUTHORIZED)
    assert advance(s, Event.CAPTURED_SETTLED) is State.SETTLED
    assert advance(advance(s, Event.CAPTURED), Event.SETTLEMENT_FINAL) is State.SETTLED
    assert advance(advance(State.SETTLED, Event.REFUND_PENDING), Event.REFUND_FINAL) is State.REFUNDED
    assert advance(State.QUOTED, Event.CANCELED) is State.CANCELED


def test_terminal_states_have_no_way_out() -> None:
    for (state, _event) in TABLE:
        assert state not in TERMINAL
    for state in TERMINAL:
        for event in Event:
            with pytest.raises(AmpError) as err:
                advance(state, event)
            assert err.value.code == 4103


def test_capture_only_from_authorized_and_cancel_only_before_capture() -> None:
    for state in State:
        assert ((state, Event.CAPTURED) in TABLE) == (state is State.AUTHORIZED)
        assert ((state, Event.CANCELED) in TABLE) == (state in (State.QUOTED, State.AUTHORIZED))
        assert ((state, Event.REFUND_PENDING) in TABLE) == (state in (State.CAPTURED, State.SETTLED))
