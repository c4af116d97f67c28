"""RFC 006 sessions end to end through the Python API and a real daemon:
open/close, pins (4003), session-scoped provisional replies, recovery after
a lost connection (the interrupted invoke runs once), and sessions that
survive a daemon restart with their pins (store/sessions.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402
from ampcap.session.state import SessionState  # noqa: E402
from ampcap.store.database import StateStore  # noqa: E402

ECHO = "org.example.echo"


def make_provider(state_dir: Path | None = None, identity=None, gate: trio.Event | None = None,
                  runs: list[str] | None = None) -> Peer:
    peer = Peer(identity or new_identity(), store=StateStore.open(state_dir) if state_dir else None)

    @peer.capability(ECHO, version="1.0.0")
    async def echo_1(message: str) -> dict:
        return {"message": message, "version": "1.0.0"}

    @peer.capability(ECHO, version="1.1.0")
    async def echo_11(message: str, ctx=None) -> dict:
        await ctx.progress(50, "half way")
        return {"message": message, "version": "1.1.0"}

    @peer.capability("org.example.slow", version="1.0.0")
    async def slow(n: int) -> dict:
        if runs is not None:
            runs.append(str(n))
        if gate is not None:
            await gate.wait()
        return {"n": n}

    return peer


@pytest.mark.trio
async def test_a_session_pins_a_version_and_closes_at_the_end() -> None:
    provider = make_provider()
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async with remote.session(pin={ECHO: f"{ECHO}:1.0.0"}) as s:
                assert s.status is SessionState.ACTIVE and s.pinned == {ECHO: f"{ECHO}:1.0.0"}
                record = server.daemon.sessions.sessions[s.session_id]
                assert record.status is SessionState.ACTIVE and record.owner == remote._daemon.identity.did
                assert (await s.invoke(ECHO, params={"message": "a"}))["version"] == "1.0.0"
                with pytest.raises(AmpError) as exc:  # another version of a pinned name: 4003
                    await s.invoke(ECHO, version="1.1.0", params={"message": "b"})
                assert exc.value.code == 4003
                with pytest.raises(ValueError, match="version='1.1'"):  # malformed: the caller's mistake
                    await s.invoke(ECHO, version="1.1", params={"message": "b"})
                assert server.daemon.sessions.record(s.session_id).checkpoint is not None
            assert server.daemon.sessions.sessions[s.session_id].status is SessionState.CLOSED


@pytest.mark.trio
async def test_progress_inside_a_session_carries_the_session_context() -> None:
    provider = make_provider()
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async with remote.session() as s:
                seen: list[tuple] = []
                out = await s.invoke(ECHO, version="1.1.0", params={"message": "b"},
                                     on_progress=lambda pct, text: seen.append((pct, text)))
                assert out["version"] == "1.1.0" and seen == [(50, "half way")]
                assert len(remote._daemon.session_calls) == 0  # tracked, then done


@pytest.mark.trio
async def test_a_pin_the_provider_cannot_serve_refuses_the_session() -> None:
    provider = make_provider()
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            with pytest.raises(AmpError) as exc:
                async with remote.session(pin={ECHO: f"{ECHO}:9.0.0"}):
                    pass
            assert exc.value.code == 4003


@pytest.mark.trio
async def test_a_lost_connection_is_resumed_and_the_invoke_runs_once() -> None:
    gate, runs = trio.Event(), []
    provider = make_provider(gate=gate, runs=runs)
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async with remote.session() as s:
                async def cut_then_open() -> None:
                    while not runs:
                        await trio.sleep(0.01)
                    for link in list(server.daemon.links):
                        link.driver.close("test: connection lost")
                    await trio.sleep(0.3)  # the client dials again and resends meanwhile
                    gate.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cut_then_open)
                    with trio.fail_after(15):
                        out = await s.invoke("org.example.slow", version="1.0.0", params={"n": 7})
                assert out == {"n": 7} and runs == ["7"] and s.resumes == 1
                assert server.daemon.sessions.sessions[s.session_id].status is SessionState.ACTIVE


@pytest.mark.trio
async def test_a_session_and_its_pins_survive_a_daemon_restart(tmp_path: Path) -> None:
    ident = new_identity()
    first = make_provider(tmp_path / "state", identity=ident)
    caller = new_identity()
    async with first.serve("amp://127.0.0.1:0") as server:
        url = server.url
        async with connect(url, identity=caller) as remote:
            # Opened and never closed: the session stays open while the daemon goes away.
            s = remote.new_session(pin={ECHO: f"{ECHO}:1.1.0"})
            await s.open()
            await s.invoke(ECHO, params={"message": "before"})
            sid = s.session_id
    # The daemon is gone (its store closed with it); a new one on the same state reads the session back.
    second = make_provider(tmp_path / "state", identity=ident)
    async with second.serve(url) as server2:
        record = server2.daemon.sessions.sessions[sid]
        assert record.status is SessionState.ACTIVE and dict(record.pinned) == {ECHO: f"{ECHO}:1.1.0"}
        async with connect(url, identity=caller) as remote:
            again = remote.existing_session(sid)
            await again.resume()
            assert again.pinned == {ECHO: f"{ECHO}:1.1.0"}
            assert (await again.invoke(ECHO, params={"message": "after"}))["version"] == "1.1.0"
            await again.close()


@pytest.mark.trio
async def test_an_independent_session_sends_no_thread_id_and_updates_a_pin() -> None:
    provider = make_provider()
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async with remote.session(independent=True, pin={ECHO: f"{ECHO}:1.0.0"}) as s:
                assert s.client.mode.value == "independent" and s.client.thread_id is None
                assert (await s.invoke(ECHO, params={"message": "a"}))["version"] == "1.0.0"
                with pytest.raises(AmpError) as exc:  # a pin change needs allow_renegotiate
                    await s.update(pin={ECHO: f"{ECHO}:1.1.0"})
                assert exc.value.code == 4001
                await s.update(pin={ECHO: f"{ECHO}:1.1.0"}, allow_renegotiate=True)
                assert s.pinned == {ECHO: f"{ECHO}:1.1.0"}
                assert (await s.invoke(ECHO, params={"message": "b"}))["version"] == "1.1.0"
                await s.suspend()
                with pytest.raises(AmpError) as exc:  # no work in a suspended session
                    await s.invoke(ECHO, params={"message": "c"})
                assert exc.value.code == 4001
                await s.resume()
                assert (await s.invoke(ECHO, params={"message": "d"}))["version"] == "1.1.0"
