"""The two hooks the MCP gateway needs from a peer, through the Python API:
CAP_QUERY for every capability (the ampcap ``"*"`` extension, R22: only
between peers that both announced ``ampcap.list-all`` in HELLO), and a
CAP_DECLARE sent unasked reaching ``Remote.on_declare`` (not answered 4001)."""

from __future__ import annotations

import logging
import os
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
from ampcap.net.api.remote import Remote  # noqa: E402
from ampcap.net.daemon.config import DaemonConfig  # noqa: E402
from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.peer.listing import NOT_OFFERED  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.peer.policy import parse_policy  # noqa: E402
from ampcap.wire.extensions import LISTING  # noqa: E402

# The tests' stand-in for another implementation: a peer announcing no extension.
WITHOUT_EXTENSIONS = DaemonConfig(connection=ConnectionConfig(extensions=()))


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


async def _raw_star_query(remote: Remote) -> Any:
    """Send CAP_QUERY "*" the way Calls.query would, minus its R22 check (a
    caller that ignores the ruling), and wait for the answer."""
    daemon, link = remote._daemon, remote._link
    handle, out = daemon.invoker.start_query(link, {"capability": "*"}, limit=None, cursor=None, order=None,
                                             timeout_ms=5000, to=link.peer_did, now_ms=daemon.clock.wall_ms())
    return await daemon.calls._await(handle, daemon.calls.register(link, handle, out, None))


@pytest.mark.trio
async def test_listing_is_agreed_between_two_ampcap_peers() -> None:
    async with Peer(new_identity(), manifest=demo_manifest()).serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity()).connect(server.url) as remote:
            assert LISTING in remote._link.driver.conn.extensions
            assert len(await remote.query("*")) > 0


@pytest.mark.trio
async def test_a_provider_without_the_extension_is_never_sent_a_star_query() -> None:
    server_peer = Peer(new_identity(), manifest=demo_manifest(), config=WITHOUT_EXTENSIONS)
    async with server_peer.serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity()).connect(server.url) as remote:
            assert not remote._link.driver.conn.extensions
            pending = len(remote._daemon.calls._pending)
            with pytest.raises(AmpError) as info:
                await remote.query("*")
            # Refused here, not answered there (a provider says "no capability named '*'").
            assert (info.value.code, info.value.message) == (4002, NOT_OFFERED)
            assert len(remote._daemon.calls._pending) == pending
            # Names still work, and so does the connection.
            assert [d.name for d in await remote.query("org.ampcap.demo.noop")] == ["org.ampcap.demo.noop"]


@pytest.mark.trio
async def test_a_caller_without_the_extension_gets_what_an_unknown_name_gets() -> None:
    async with Peer(new_identity(), manifest=demo_manifest()).serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity(), config=WITHOUT_EXTENSIONS).connect(server.url) as remote:
            with pytest.raises(AmpError) as local:  # our own side refuses first
                await remote.query("*")
            assert local.value.message == NOT_OFFERED
            with pytest.raises(AmpError) as answered:  # sent anyway: the provider does not list
                await _raw_star_query(remote)
            assert (answered.value.code, answered.value.message) == (4002, "no capability named '*'")
            with pytest.raises(AmpError) as unknown:
                await remote.query("org.example.nothing_here")
            assert unknown.value.code == 4002


@pytest.mark.trio
async def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    server_peer = Peer(new_identity(), manifest=demo_manifest(), config=WITHOUT_EXTENSIONS)
    async with server_peer.serve("amp://127.0.0.1:0") as server:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
        done = await trio.run_process([sys.executable, "-m", "ampcap.cli.main", "query", server.url, "*"],
                                      capture_stdout=True, capture_stderr=True, check=False, env=env)
    assert done.returncode == 1 and not done.stdout
    lines = [ln for ln in done.stderr.decode().splitlines() if not ln.startswith("ampcap: created identity")]
    assert len(lines) == 1 and "4002" in lines[0] and "name the capabilities to query" in lines[0], lines
