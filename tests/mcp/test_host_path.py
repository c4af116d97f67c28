"""The path an MCP host user takes (issue 36): a real MCP server behind
``ampcap serve --mcp``, ``ampcap mcp`` in front of it, the SDK's client on
the outside. Schemas and annotations survive MCP -> AMP -> MCP, what is
exposed is chosen with globs, errors say it once, and a peer that comes
back is found by the next call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
import mcp.types as types  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import new_identity, serve_process  # noqa: E402

import ampcap.mcp  # noqa: E402
from ampcap.caps.artifacts import ARTIFACT_CAPABILITY, ArtifactFetcher  # noqa: E402
from ampcap.caps.bundle import digest  # noqa: E402
from ampcap.caps.descriptor import SchemaRef  # noqa: E402
from ampcap.errors import AmpError  # noqa: E402
from ampcap.mcp import gateway_links  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402

PYTHON = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
SERVER = str(Path(__file__).resolve().parent / "annotated_server.py")


def _env(tmp: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp / "gateway-config"), "PYTHONPATH": SRC}


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def _ampcap(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=SRC, XDG_CONFIG_HOME=str(tmp / "cli-config")))


def test_import_mcp_chooses_tools_and_keeps_annotations(tmp_path: Path) -> None:
    done = _ampcap("caps", "import-mcp", "--name", "clock", "--command", PYTHON, SERVER, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    # Destructive tools are marked; the additive and the read-only one are not.
    blocks = done.stdout.split("[[capability]]")
    wipe = next(i for i, b in enumerate(blocks) if 'name = "mcp.clock.wipe"' in b)
    assert "# DESTRUCTIVE" in blocks[wipe - 1]
    assert sum("# DESTRUCTIVE" in b for b in blocks) == 1
    assert 'annotations = { title = "Current time", readOnlyHint = true, openWorldHint = false }' in done.stdout

    done = _ampcap("caps", "import-mcp", "--name", "clock", "--read-only", "--command", PYTHON, SERVER, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mcp.clock.get_current_time" in done.stdout and "mcp.clock.wipe" not in done.stdout
    assert "mcp.clock.note" not in done.stdout  # not declared read-only

    done = _ampcap("caps", "import-mcp", "--name", "clock", "--exclude", "wipe", "--include", "mcp.clock.*",
                   "--command", PYTHON, SERVER, tmp=tmp_path)
    assert "mcp.clock.note" in done.stdout and "mcp.clock.wipe" not in done.stdout

    done = _ampcap("caps", "import-mcp", "--name", "clock", "--include", "nothing*", "--command", PYTHON, SERVER,
                   tmp=tmp_path)
    assert done.returncode == 1 and "passes --include/--exclude/--read-only" in done.stderr


@pytest.mark.trio
async def test_schemas_and_annotations_travel_mcp_amp_mcp(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--mcp", f"clock={PYTHON} {SERVER}", "--mcp-exclude", "wipe") as served:
        params = StdioServerParameters(command=PYTHON, args=["-m", "ampcap.cli.main", "mcp", served.url,
                                                             "--exclude", "org.ampcap.demo.*"], env=_env(tmp_path))
        with open(tmp_path / "gateway.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    listed = {t.name: t for t in (await session.list_tools()).tools}
                    # Plain names, no demo (excluded), no wipe (not served), no schema service.
                    assert set(listed) == {"mcp_clock_get_current_time", "mcp_clock_note"}
                    tool = listed["mcp_clock_get_current_time"]
                    assert tool.input_schema["required"] == ["timezone"]  # fetched from the peer, by hash
                    assert tool.output_schema is not None and tool.output_schema["required"] == ["timezone",
                                                                                                 "datetime"]
                    assert tool.annotations is not None and tool.annotations.read_only_hint is True
                    assert tool.annotations.open_world_hint is False and tool.title == "Current time"
                    note = listed["mcp_clock_note"]
                    assert note.annotations is not None and note.annotations.destructive_hint is False

                    result = await session.call_tool("mcp_clock_get_current_time", {"timezone": "UTC"})
                    assert not result.is_error and result.structured_content == {
                        "timezone": "UTC", "datetime": "2026-01-01T00:00:00"}
                    # Said once, with the tool's own text.
                    result = await session.call_tool("mcp_clock_get_current_time", {"timezone": "Nowhere/Land"})
                    assert result.is_error
                    assert _text(result) == "5001 INTERNAL_ERROR: Invalid timezone: Nowhere/Land"

        # query --show-schema: the same schemas, from the peer, checked by hash.
        done = _ampcap("query", served.url, "mcp.clock.get_current_time", "--show-schema", "--json", tmp=tmp_path)
        assert done.returncode == 0, done.stderr
        (entry,) = json.loads(done.stdout)["capabilities"]
        assert entry["schemas"]["params"]["required"] == ["timezone"]
        assert entry["schemas"]["result"]["title"] == "Now"
        assert entry["annotations"]["readOnlyHint"] is True
        done = _ampcap("query", served.url, "org.ampcap.demo.echo", "--show-schema", tmp=tmp_path)
        assert done.returncode == 0 and "params schema:" in done.stdout and '"message"' in done.stdout


@pytest.mark.trio
async def test_python_api_schemas_are_verified_by_hash() -> None:
    peer = Peer(new_identity())

    @peer.capability("org.test.greet", "1.0.0")
    def greet(name: str) -> dict[str, str]:
        return {"greeting": f"hi {name}"}

    async with peer.serve("amp://127.0.0.1:0") as server:
        async with ampcap.connect(server.url, identity=new_identity()) as remote:
            (descriptor,) = await remote.query("org.test.greet")
            params, _ = await remote.schemas(descriptor)
            assert params["properties"]["name"]["type"] == "string"
            # The service is an ordinary capability, listed like any other.
            assert len(await remote.query(ARTIFACT_CAPABILITY)) == 1

            # Bytes that do not match the descriptor's hash are refused (5002).
            async def lying(capability_id: str, p: Any) -> Any:
                good = await remote.invoke(capability_id, params=p)
                return {**good, "bytes": good["bytes"] + b" "}

            with pytest.raises(AmpError) as err:
                await ArtifactFetcher(lying).schema(descriptor.input_schema)
            assert err.value.code == 5002 and "verification" in err.value.message
            # An artifact no descriptor references is not handed out.
            with pytest.raises(AmpError) as err:
                await remote.invoke(f"{ARTIFACT_CAPABILITY}:1.0.0", params={"bundle_id": "x", "artifact_key": "y"})
            assert err.value.code == 4002
            fake = SchemaRef(bundle_id="x", artifact_key="y", hash_alg="sha-256", hash=digest("sha-256", b"{}"))
            fetcher = ArtifactFetcher(lambda c, p: remote.invoke(c, params=p))
            with pytest.raises(AmpError):
                await fetcher.schema(fake)


def test_caps_bundle_writes_an_offline_bundle(tmp_path: Path) -> None:
    from ampcap.caps.bundle import SchemaStore
    from ampcap.caps.demo import demo_manifest
    from ampcap.files.bundle import open_bundle

    for out in ("dir", "b.zip", "b.tar.gz"):
        done = _ampcap("caps", "bundle", "--demo", "--out", str(tmp_path / out), tmp=tmp_path)
        assert done.returncode == 0, done.stderr
        store = SchemaStore([open_bundle(tmp_path / out)], offline=True)
        for spec in demo_manifest().capabilities:
            assert store.load_json(spec.descriptor.input_schema) == spec.input_schema
    done = _ampcap("caps", "bundle", "--demo", "--out", str(tmp_path / "dir"), tmp=tmp_path)
    assert done.returncode == 1 and "not an empty directory" in done.stderr


@pytest.mark.trio
async def test_a_call_redials_a_peer_that_came_back(tmp_path: Path) -> None:
    """The peer goes down long enough for the back-off to grow past what a
    caller would wait; it comes back, and the first call redials at once:
    the dial that finds it is the call's ("call"), not the back-off's."""
    def make_peer() -> Peer:
        peer = Peer(identity)

        @peer.capability("org.test.ping", "1.0.0")
        def ping() -> dict[str, bool]:
            return {"pong": True}

        return peer

    identity = new_identity()
    async with trio.open_nursery() as nursery:
        peer_scope = trio.CancelScope()

        async def run_peer(url: str, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with peer_scope:
                async with make_peer().serve(url) as server:
                    task_status.started(server.url)
                    await trio.sleep_forever()

        url = await nursery.start(run_peer, "amp://127.0.0.1:0")
        async with ampcap.mcp.gateway(url, identity=new_identity(), poll_s=3600) as server:
            (link,) = server.gateway.links
            mcp_url = await nursery.start(ampcap.mcp.serve_http, server, "127.0.0.1", 0)
            async with streamable_http_client(mcp_url) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    assert not (await session.call_tool("org_test_ping", {})).is_error

                    peer_scope.cancel()  # down
                    with trio.fail_after(20):
                        while link.remote is not None:
                            await trio.sleep(0.01)
                    # Let the back-off grow (0.5, 1, 2, then 4 s) with no caller waiting.
                    with trio.fail_after(30):
                        while len(link.dials) < 4:
                            await trio.sleep(0.05)
                    assert all(reason == "backoff" for reason in link.dials[1:])

                    peer_scope = trio.CancelScope()
                    await nursery.start(run_peer, url)  # back, at the same address
                    dials_before = len(link.dials)
                    result = await session.call_tool("org_test_ping", {})
                    assert not result.is_error, _text(result)
                    assert result.structured_content == {"pong": True}
                    # The call's own redial found it, not the back-off's timer.
                    assert link.dials[dials_before:] == ["call"]
        peer_scope.cancel()
        nursery.cancel_scope.cancel()


def test_the_caller_back_off_is_capped_low() -> None:
    assert gateway_links.CALLER_BACKOFF_S <= 1.0 and gateway_links.REDIAL_MIN_S < gateway_links.CALLER_WAIT_S
