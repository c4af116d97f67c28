"""The HTTP principals' poll mailboxes (RFC 002 §6.2, ruling R21), without I/O."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.peer.mailbox import Mailboxes


def test_cursor_acknowledges_and_a_replayed_cursor_redelivers_within_the_window() -> None:
    box = Mailboxes(epoch="e1", replay_window_ms=1000)
    for i in range(3):
        assert box.put("did:a", bytes([i]), expires_ms=10_000, interim=False, now_ms=0)
    first = box.poll("did:a", None, 2, now_ms=0)
    assert first.messages == [b"\x00", b"\x01"] and first.has_more and first.next_cursor == "e1.2"
    second = box.poll("did:a", first.next_cursor, 10, now_ms=10)
    assert second.messages == [b"\x02"] and not second.has_more
    assert box.poll("did:a", second.next_cursor, 10, now_ms=20).messages == []
    assert box.poll("did:a", None, 10, now_ms=20).messages == []  # acknowledged: no cursor starts after them
    assert box.poll("did:a", first.next_cursor, 10, now_ms=30).messages == [b"\x02"]  # replay
    assert box.poll("did:a", "e1.0", 10, now_ms=2000).messages == []  # past the window: gone
    assert len(box) == 0 and box.total_bytes == 0


def test_cursors_are_per_principal_and_checked() -> None:
    box = Mailboxes(epoch="e1")
    box.put("did:a", b"a", expires_ms=10, interim=False, now_ms=0)
    box.put("did:b", b"b", expires_ms=10, interim=False, now_ms=0)
    assert box.poll("did:b", None, 10, 0).messages == [b"b"]
    with pytest.raises(AmpError) as bad:
        box.poll("did:a", "not-a-cursor", 10, 0)
    assert bad.value.code == 1001
    with pytest.raises(AmpError):
        box.poll("did:a", "e1.99", 10, 0)  # past anything issued
    assert box.poll("did:a", "old.1", 10, 0).messages == [b"a"]  # another run's cursor: from the start
    assert box.poll("did:a", None, 10, now_ms=10).messages == []  # its own lifetime ended


def test_bounds_refuse_new_work_and_drop_only_interim_replies() -> None:
    box = Mailboxes(epoch="e", max_messages=2, max_bytes=100, max_total_bytes=150)
    assert box.has_room("did:a")
    assert box.put("did:a", b"x" * 60, expires_ms=10, interim=False, now_ms=0)
    assert box.put("did:a", b"x" * 60, expires_ms=10, interim=False, now_ms=0)  # terminal: always kept
    assert not box.has_room("did:a") and box.has_room("did:b")
    assert not box.put("did:a", b"p", expires_ms=10, interim=True, now_ms=0)  # PROGRESS dropped
    assert box.put("did:b", b"x" * 40, expires_ms=10, interim=False, now_ms=0)
    assert not box.has_room("did:c")  # 160 bytes in all, over 150
