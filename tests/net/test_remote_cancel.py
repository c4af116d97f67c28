"""ampcap's remote cancel (R23) between real daemons over TCP: a caller that
gives up on ``Remote.invoke`` asks the provider to stop; the capability's
task is cancelled; the invoke's one terminal reply is CAP_RESULT 5003
``{"cancelled": true}``, which a resend of the same message gets again. A
peer that did not announce the extension in HELLO is never sent a cancel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402
from ampcap.net.daemon.config import DaemonConfig  # noqa: E402
from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.wire.extensions import CANCEL  # noqa: E402

SLOW = "org.example.slow"
WITHOUT_EXTENSIONS = DaemonConfig(connection=ConnectionConfig(extensions=()))


def slow_peer(seen: dict, config: DaemonConfig = DaemonConfig(), **options: object) -> Peer:
    peer = Peer(options.pop("identity", None) or new_identity(), config=config, **options)  # type: ignore[arg-type]

    @peer.capability(SLOW, version="1.0.0")
    async def slow(seconds: float, ctx=None) -> dict:
        seen["started"].set()
        try:
            await ctx.sleep(int(seconds * 1000))
        except trio.Cancelled:
            seen["cancelled"].set()
            raise
        return {"slept": seconds}

    return peer


def events() -> dict:
    return {"started": trio.Event(), "cancelled": trio.Event()}


@pytest.mark.trio
async def test_a_caller_that_gives_up_stops_the_capability_and_the_reply_is_the_cancel() -> None:
    seen = events()
    async with slow_peer(seen).serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            assert CANCEL in remote._link.driver.conn.extensions
            calls, link = remote._daemon.calls, remote._link
            sent: list = []
            with trio.move_on_after(5) as waited:
                async with trio.open_nursery() as nursery:
                    async def call() -> None:
                        await calls.invoke(link, f"{SLOW}:1.0.0", {"seconds": 30}, timeout_ms=60_000,
                                           sent=sent.append)

                    nursery.start_soon(call)
                    await seen["started"].wait()
                    nursery.cancel_scope.cancel()  # the caller gives up
            assert not waited.cancelled_caught
            with trio.fail_after(5):
                await seen["cancelled"].wait()  # the provider stopped the task
            # The invoke's one terminal reply: a resend of the same message gets it.
            with trio.fail_after(5), pytest.raises(AmpError) as exc:
                await calls.resend(link, sent[0], timeout_ms=5_000)
            assert exc.value.code == 5003 and exc.value.details == {"cancelled": True}
            # Remote.invoke honours trio cancellation the same way.
            seen.update(events())
            with trio.move_on_after(0.3):
                await remote.invoke(SLOW, version="1.0.0", params={"seconds": 30})
            with trio.fail_after(5):
                await seen["cancelled"].wait()
            assert await remote.invoke(SLOW, version="1.0.0", params={"seconds": 0}) == {"slept": 0}


@pytest.mark.trio
async def test_a_result_that_wins_the_race_is_the_one_reply() -> None:
    seen = events()
    async with slow_peer(seen).serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            calls, link = remote._daemon.calls, remote._link
            sent: list = []
            assert await calls.invoke(link, f"{SLOW}:1.0.0", {"seconds": 0}, timeout_ms=5_000,
                                      sent=sent.append) == {"slept": 0}
            from ampcap.net.daemon.calls import send_cancel

            assert send_cancel(link, sent[0])  # too late: nothing is sent back for it
            assert await calls.resend(link, sent[0], timeout_ms=5_000) == {"slept": 0}
            assert not seen["cancelled"].is_set()


@pytest.mark.trio
@pytest.mark.parametrize("quiet", ["caller", "provider"])
async def test_no_cancel_without_the_extension_on_both_sides(quiet: str) -> None:
    seen = events()
    provider_config = WITHOUT_EXTENSIONS if quiet == "provider" else DaemonConfig()
    caller_config = WITHOUT_EXTENSIONS if quiet == "caller" else DaemonConfig()
    async with slow_peer(seen, provider_config).serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity(), config=caller_config) as remote:
            assert remote._link.driver.conn.extensions == frozenset()
            with trio.move_on_after(0.3):
                await remote.invoke(SLOW, version="1.0.0", params={"seconds": 1.0})
            assert seen["started"].is_set()
            # The caller stopped waiting locally; the capability ran to its end.
            await trio.sleep(1.2)
            assert not seen["cancelled"].is_set()


@pytest.mark.trio
async def test_the_journal_keeps_a_cancelled_invoke_as_done_across_a_restart(tmp_path: Path) -> None:
    from ampcap.store import StateStore

    provider_identity, caller_identity = new_identity(), new_identity()
    seen = events()
    sent: list = []
    store = StateStore.open(tmp_path / "state")
    provider = slow_peer(seen, identity=provider_identity, store=store)
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=caller_identity) as remote:
            calls, link = remote._daemon.calls, remote._link
            with trio.move_on_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: calls.invoke(link, f"{SLOW}:1.0.0", {"seconds": 30},
                                                            timeout_ms=60_000, sent=sent.append))
                    await seen["started"].wait()
                    nursery.cancel_scope.cancel()
            with trio.fail_after(5):
                await seen["cancelled"].wait()
            await trio.sleep(0.2)  # the journal's tick commits
    store.close()

    again = events()
    store = StateStore.open(tmp_path / "state")
    restarted = slow_peer(again, identity=provider_identity, store=store)
    async with restarted.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=caller_identity) as remote:
            with trio.fail_after(5), pytest.raises(AmpError) as exc:
                await remote._daemon.calls.resend(remote._link, sent[0], timeout_ms=5_000)
            assert exc.value.code == 5003 and exc.value.details == {"cancelled": True}
            assert not again["started"].is_set()  # answered from the journal, not run again
    store.close()
