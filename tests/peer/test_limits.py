"""In-flight caps (5004) and the deadline queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampcap.errors import AmpError
from ampcap.peer.limits import DeadlineQueue, InFlightLimits


def test_per_connection_and_global_caps() -> None:
    lim = InFlightLimits(per_connection=2, total=3)
    lim.acquire("a")
    lim.acquire("a")
    assert not lim.has_room("a") and lim.has_room("b")
    with pytest.raises(AmpError) as exc:
        lim.acquire("a")
    assert exc.value.code == 5004
    lim.acquire("b")
    with pytest.raises(AmpError):
        lim.check("c")  # global cap
    lim.release("a")
    assert lim.has_room("c") and lim.in_flight == 2 and lim.count("a") == 1
    lim.release("a")
    lim.release("b")
    assert lim.in_flight == 0 and lim._by_conn == {}  # no per-connection residue
    with pytest.raises(RuntimeError):
        lim.release("a")
    with pytest.raises(ValueError):
        InFlightLimits(per_connection=0)


def test_deadline_queue_basics() -> None:
    q = DeadlineQueue()
    assert q.next_deadline() is None and q.pop_due(10**12) == []
    q.set("a", 30)
    q.set("b", 10)
    q.set("c", 20)
    q.set("b", 40)  # moved
    q.discard("c")
    assert q.next_deadline() == 30 and len(q) == 2 and q.get("b") == 40
    assert q.pop_due(35) == ["a"] and q.pop_earliest() == "b" and q.pop_earliest() is None


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 100), st.booleans()), max_size=200),
       st.integers(0, 100))
def test_deadline_queue_agrees_with_a_dict(ops: list[tuple[str, int, bool]], now: int) -> None:
    q, model = DeadlineQueue(), {}
    for key, deadline, drop in ops:
        if drop:
            q.discard(key)
            model.pop(key, None)
        else:
            q.set(key, deadline)
            model[key] = deadline
    assert q.next_deadline() == (min(model.values()) if model else None)
    due = q.pop_due(now)
    assert sorted(due) == sorted(k for k, d in model.items() if d <= now)
    assert [model[k] for k in due] == sorted(model[k] for k in due)  # earliest first
    assert len(q) == sum(1 for d in model.values() if d > now)
    assert len(q._heap) <= 2 * len(ops) + 64
