"""The transition tables themselves (h11 test_state / h2 table style)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampcap.errors import AmpError
from ampcap.peer.state import (
    CONN_TRANSITIONS,
    HELLO_TRANSITIONS,
    ConnInput,
    ConnState,
    HelloInput,
    HelloState,
    StateViolation,
    advance,
    advance_hello,
    reachable,
    render_table,
)


def test_every_connection_state_is_reachable_from_idle() -> None:
    assert reachable(CONN_TRANSITIONS, ConnState.IDLE) == set(ConnState)


def test_every_hello_state_is_reachable() -> None:
    assert reachable(HELLO_TRANSITIONS, HelloState.UNNEGOTIATED) == set(HelloState)


def test_closed_is_terminal() -> None:
    assert {dst for (src, _), dst in CONN_TRANSITIONS.items() if src is ConnState.CLOSED} == {ConnState.CLOSED}


def test_hello_terminal_states_have_no_exits() -> None:
    sources = {src for src, _ in HELLO_TRANSITIONS}
    assert HelloState.NEGOTIATED not in sources and HelloState.FAILED not in sources


def test_canonical_sequence() -> None:
    s = ConnState.IDLE
    for event in (ConnInput.START, ConnInput.SEND_HANDSHAKE, ConnInput.RECV_HANDSHAKE_REPLY,
                  ConnInput.HELLO_MESSAGE, ConnInput.NEGOTIATED, ConnInput.SEND_MESSAGE,
                  ConnInput.SEND_GOAWAY, ConnInput.SEND_MESSAGE, ConnInput.EOF):
        s = advance(s, event)
    assert s is ConnState.CLOSED


def test_application_message_before_negotiation_is_a_violation() -> None:
    with pytest.raises(StateViolation) as info:
        advance(ConnState.HANDSHAKE, ConnInput.RECV_MESSAGE)
    assert isinstance(info.value, AmpError) and info.value.code == 1001


@given(st.sampled_from(list(ConnState)), st.sampled_from(list(ConnInput)))
def test_table_is_total_as_a_function(state: ConnState, event: ConnInput) -> None:
    # Every pair either has exactly the table's answer or raises StateViolation.
    if (state, event) in CONN_TRANSITIONS:
        assert advance(state, event) is CONN_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(StateViolation):
            advance(state, event)


@given(st.sampled_from(list(HelloState)), st.sampled_from(list(HelloInput)))
def test_hello_table_is_total_as_a_function(state: HelloState, event: HelloInput) -> None:
    if (state, event) in HELLO_TRANSITIONS:
        assert advance_hello(state, event) is HELLO_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(StateViolation):
            advance_hello(state, event)


def test_render_lists_every_row() -> None:
    text = render_table(CONN_TRANSITIONS)
    assert text.count("\n") == len(CONN_TRANSITIONS) + 1
    assert "| HANDSHAKE | NEGOTIATED | OPEN |" in text
