"""serve's --connect/--relay redial loop (cli.serve._keep_linked), on trio's
MockClock with a fake dial: how often it dials a peer that accepts and then
drops the link, and what it logs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from ampcap.cli.serve import _keep_linked
from ampcap.errors import Unreachable


@dataclass
class FakeDriver:
    closed: trio.Event = field(default_factory=trio.Event)


@dataclass
class FakeLink:
    driver: FakeDriver = field(default_factory=FakeDriver)


@dataclass
class FakeDaemon:
    closing: bool = False


class Peer:
    """Accepts every dial; each link lasts ``up_for[i]`` seconds (the last
    value repeats), or fails to connect when that value is None."""

    def __init__(self, nursery: trio.Nursery, up_for: list[float | None]) -> None:
        self.nursery, self.up_for, self.dials = nursery, up_for, []  # type: ignore[var-annotated]

    def link(self, lasts: float) -> FakeLink:
        link = FakeLink()

        async def drop() -> None:
            await trio.sleep(lasts)
            link.driver.closed.set()

        self.nursery.start_soon(drop)
        return link

    async def dial(self) -> FakeLink:
        self.dials.append(trio.current_time())
        lasts = self.up_for[min(len(self.dials), len(self.up_for) - 1)]
        if lasts is None:
            raise Unreachable("amp://peer:1", "Connection refused")
        return self.link(lasts)


async def _run_for(seconds: float, up_for: list[float | None]) -> Peer:
    async with trio.open_nursery() as nursery:
        peer = Peer(nursery, up_for)
        first = peer.link(up_for[0] or 0.0)
        nursery.start_soon(lambda: _keep_linked(FakeDaemon(), "--relay amp://peer:1", peer.dial, first,
                                                jitter=lambda: 1.0))
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return peer


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(times, times[1:])]


def test_a_peer_that_drops_every_link_at_once_is_dialled_with_growing_backoff(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap.serve")
    # Each link lasts 0.1 s. Before: the backoff restarted at 1 s after every
    # dial that connected, so one dial (and two WARNINGs) every ~1.1 s for ever.
    peer = trio.run(_run_for, 600.0, [0.1], clock=trio.testing.MockClock(autojump_threshold=0))
    gaps = _gaps(peer.dials)
    # 1, 2, 4, ... 60 s of backoff, each after a 0.1 s link.
    assert gaps[:6] == [2.1, 4.1, 8.1, 16.1, 32.1, 60.1]
    assert all(gap == 60.1 for gap in gaps[5:])
    assert len(peer.dials) == 14  # 600 s: 1 + 2 + ... + 32 + 60 * 8 ≈ 600
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["--relay amp://peer:1: link lost; dialling again", "--relay amp://peer:1: link restored"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == len(peer.dials)  # one line per redial
    assert infos[0] == "--relay amp://peer:1: link lost again after 0.1s; redial 2 within 2s"


def test_the_backoff_starts_again_once_a_link_has_stayed_up(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap.serve")
    # Lost at once twice (1 s, then 2 s of backoff), then a link that lasts
    # 100 s: it counts as stable after 30 s, and when it drops the next dial
    # waits 1 s again.
    peer = trio.run(_run_for, 110.0, [0.1, 0.1, 100.0, 0.1], clock=trio.testing.MockClock(autojump_threshold=0))
    assert _gaps(peer.dials)[:2] == [2.1, 100.0 + 1.0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["--relay amp://peer:1: link lost; dialling again", "--relay amp://peer:1: link restored"] * 2


def test_a_peer_that_cannot_be_reached_says_why_once_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap.serve")
    peer = trio.run(_run_for, 300.0, [0.1, None], clock=trio.testing.MockClock(autojump_threshold=0))
    assert _gaps(peer.dials)[:5] == [2.0, 4.0, 8.0, 16.0, 32.0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["--relay amp://peer:1: link lost; dialling again",
                        "--relay amp://peer:1: cannot reach it (Connection refused); next try within 2s"]


def test_no_redial_once_the_daemon_drains() -> None:
    async def main() -> list[float]:
        async with trio.open_nursery() as nursery:
            daemon = FakeDaemon()
            peer = Peer(nursery, [0.1])
            nursery.start_soon(_keep_linked, daemon, "--connect amp://peer:1", peer.dial, peer.link(5.0))
            await trio.sleep(1.0)
            daemon.closing = True
            await trio.sleep(100.0)
            nursery.cancel_scope.cancel()
        return peer.dials

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == []


