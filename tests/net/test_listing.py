"""The two hooks the MCP gateway needs from a peer, through the Python API:
CAP_QUERY for every capability (the ampcap ``"*"`` extension), and a
CAP_DECLARE sent unasked reaching ``Remote.on_declare`` (not answered 4001)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import DECLARE, new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.caps.demo import demo_manifest  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.peer.policy import parse_policy  # noqa: E402


@pytest.mark.trio
async def test_star_lists_every_capability_over_pages() -> None:
    server_peer = Peer(new_identity(), manifest=demo_manifest())
    async with server_peer.serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity()).connect(server.url) as remote:
            first = await remote.query("*", limit=3)
            assert len(first) == 3 and first.next_cursor is not None
            seen = list(first)
            cursor = first.next_cursor
            while cursor is not None:
                page = await remote.query("*", limit=3, cursor=cursor)
                seen.extend(page)
                cursor = page.next_cursor
            # Every capability, the schema artifact service every daemon adds among them.
            assert sorted(d.id for d in seen) == sorted([*(s.id for s in demo_manifest().capabilities),
                                                         "org.ampcap.schema.artifact:1.0.0"])
            # By name, newest first within a name (the default order).
            assert [d.id for d in seen[:4]] == ["org.ampcap.demo.current_time:1.0.0", "org.ampcap.demo.echo:2.0.0",
                                               "org.ampcap.demo.echo:1.1.0", "org.ampcap.demo.echo:1.0.0"]
            ranged = await remote.query("*", range=">=2.0.0")
            assert [d.id for d in ranged] == ["org.ampcap.demo.echo:2.0.0"]


@pytest.mark.trio
async def test_star_hides_what_the_policy_refuses_the_caller() -> None:
    caller = new_identity()
    policy = parse_policy({"capability": [{"match": "org.ampcap.demo.echo", "allow": []},
                                          {"match": "org.ampcap.demo.math.*", "deny": [caller.did]}]})
    async with Peer(new_identity(), manifest=demo_manifest(), policy=policy).serve("amp://127.0.0.1:0") as server:
        async with Peer(caller).connect(server.url) as remote:
            names = {d.name for d in await remote.query("*")}
            assert names == {"org.ampcap.demo.current_time", "org.ampcap.demo.fail", "org.ampcap.demo.noop",
                             "org.ampcap.demo.sleep", "org.ampcap.schema.artifact"}
            with pytest.raises(AmpError) as info:  # one name still says 3001, as before
                await remote.query("org.ampcap.demo.echo")
            assert info.value.code == 3001


@pytest.mark.trio
async def test_an_unasked_declare_reaches_on_declare_and_is_not_answered(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ampcap")
    async with Peer(new_identity(), manifest=demo_manifest()).serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity()).connect(server.url) as remote:
            heard: list[Any] = []
            got = trio.Event()

            def listener(body: Any) -> None:
                heard.append(body)
                got.set()

            remote.on_declare(listener)
            await trio.sleep(0.05)
            (theirs,) = server.remotes()
            descriptor = demo_manifest().capabilities[0].descriptor.to_wire()
            theirs._link.driver.send_nowait(Outbound(typ=DECLARE, body={"capabilities": [descriptor]}))
            with trio.fail_after(5):
                await got.wait()
            assert heard[0]["capabilities"][0]["id"] == descriptor["id"]
            # No ERROR 4001 came back for it (the sender would log it as
            # matching no call of its own), and the connection goes on.
            assert len(await remote.query("org.ampcap.demo.noop")) == 1
            remote.on_declare(None)
    assert "unasked CAP_DECLARE" in caplog.text
    assert "matches no pending call" not in caplog.text
