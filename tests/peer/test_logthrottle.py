"""LogThrottle: lines a peer can cause at will stay a few per window."""

from __future__ import annotations

import logging

from ampcap.peer.logthrottle import LogThrottle

W, D = logging.WARNING, logging.DEBUG


def test_a_burst_then_debug_with_one_notice_then_a_new_window() -> None:
    throttle = LogThrottle(burst=3, window_ms=1_000)
    got = [throttle.level("unmatched reply", W, t) for t in (0, 10, 20, 30, 40, 999)]
    assert [level for level, _ in got] == [W, W, W, D, D, D]
    notices = [notice for _, notice in got if notice is not None]
    assert len(notices) == 1 and "more than 3 'unmatched reply' lines in 1s" in notices[0]
    assert "next 1.0s" in notices[0]  # the window opened at 0 and the fourth line came at 30
    assert throttle.level("unmatched reply", W, 1_000) == (W, None)  # a new window


def test_topics_are_counted_apart_and_a_clock_going_back_opens_a_new_window() -> None:
    throttle = LogThrottle(burst=1, window_ms=1_000)
    assert throttle.level("id reuse", W, 500)[0] == W
    assert throttle.level("unmatched reply", W, 500)[0] == W
    assert throttle.level("id reuse", W, 600)[0] == D
    assert throttle.level("id reuse", W, 100) == (W, None)
