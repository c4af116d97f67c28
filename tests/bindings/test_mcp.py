"""The MCP binding against a real MCP server written with the SDK (stdio
and streamable HTTP), end to end through an ampcap daemon and client."""

from __future__ import annotations

import sys
import logging
from pathlib import Path

import pytest
import trio

from ampcap.errors import AmpError

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import MCP_SERVER, PYTHON, build, capability, serving, stdio_server  # noqa: E402

SCAN = capability("scan", """
[capability.binding.mcp]
server = "tools"
tool = "scan"
mapping = { target = "path" }
output_mapping = { findings = "vulnerabilities", elapsed = "scan_duration_ms" }
""")
ADD = capability("add", '[capability.binding.mcp]\nserver = "tools"\ntool = "add"\n')
ECHO = capability("echo", '[capability.binding.mcp]\nserver = "tools"\ntool = "echo"\n')
ECHO_JSON = capability("echo-json", '[capability.binding.mcp]\nserver = "tools"\ntool = "echo_json"\n')
FAIL = capability("fail", """
[capability.binding.mcp]
server = "tools"
tool = "fail"
error_mapping = { NOT_FOUND = 4004 }
""")
SLOW = capability("slow", '[capability.binding.mcp]\nserver = "tools"\ntool = "slow"\ntimeout_ms = 3000\n')
# The same tool with room for 64 calls at once on a slow machine.
SLOW64 = capability("slow64", '[capability.binding.mcp]\nserver = "tools"\ntool = "slow"\ntimeout_ms = 60000\n')
CRASH = capability("crash", '[capability.binding.mcp]\nserver = "tools"\ntool = "crash"\n')


def _marks(path: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(prefix))


async def _wait_mark(path: Path, name: str, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not (path / name).exists():
            await trio.sleep(0.02)


@pytest.mark.trio
async def test_mcp_stdio_end_to_end(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    manifest = build(tmp_path, stdio_server(marks=marks) + SCAN + ADD + ECHO + ECHO_JSON + FAIL + SLOW + SLOW64 + CRASH)
    async with serving(manifest) as (server, remote):
        # Mappings both ways; fields not named pass through.
        got = await remote.invoke("org.example.scan:1.0.0", params={"target": "src", "min_severity": "high"})
        assert got == {"vulnerabilities": ["src:high"], "scan_duration_ms": 7, "path": "src"}
        assert await remote.invoke("org.example.add:1.0.0", params={"a": 2, "b": 40}) == {"total": 42}
        # Text content: a JSON object is the result, other text is {"text": ...}.
        assert await remote.invoke("org.example.echo:1.0.0", params={"text": "hi"}) == {"text": "hi"}
        assert await remote.invoke("org.example.echo-json:1.0.0", params={"value": 5}) == {"value": 5}
        # A tool error: its code mapped, or 5001.
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.fail:1.0.0", params={"code": "NOT_FOUND"})
        assert err.value.code == 4004 and "it failed on purpose" in err.value.message
        # Said once: the tool's own text, without the SDK's "Error executing tool" prefix or ours.
        assert "Error executing tool" not in err.value.message and "failed:" not in err.value.message
        assert err.value.message.startswith("NOT_FOUND")
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.fail:1.0.0", params={"code": "OTHER"})
        assert err.value.code == 5001
        # A bad argument is the server's JSON-RPC/tool error, 5001.
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.add:1.0.0", params={"a": "x"})
        assert err.value.code == 5001
        # Progress: MCP notifications/progress -> AMP PROGRESS.
        seen: list[tuple[int | None, str | None]] = []
        got = await remote.invoke("org.example.slow:1.0.0", params={"ms": 400, "tag": "p"},
                                  on_progress=lambda pct, text: seen.append((pct, text)))
        assert got == {"total": 400}
        assert [pct for pct, _ in seen] == [25, 50, 75, 100] and seen[0][1] == "step 1"
        # The binding's timeout: 5003, and the server is told to cancel.
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.slow:1.0.0", params={"ms": 20_000, "tag": "t"})
        assert err.value.code == 5003
        await _wait_mark(marks, "cancelled-t")
        assert len(_marks(marks, "pid-")) == 1  # the same server process all along
        # A crash mid-call: one terminal reply (5001), then a restart and the next call works.
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.crash:1.0.0", params={})
        assert err.value.code == 5001 and "went away" in err.value.message
        assert await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 1}) == {"total": 2}
        assert len(_marks(marks, "pid-")) == 2
        # 64 in flight share the one session (no new process).
        results: list[object] = []

        async def one(i: int) -> None:
            results.append(await remote.invoke("org.example.slow64:1.0.0", params={"ms": 200, "tag": f"m{i}"}))

        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(one, i)
        assert results == [{"total": 200}] * 64
        assert len(_marks(marks, "started-m")) == 64 and len(_marks(marks, "pid-")) == 2
        stats = server.daemon.jobs.stats
        assert stats["invokes"] == stats["completed"]


@pytest.mark.trio
async def test_mcp_over_streamable_http(tmp_path: Path, mcp_http_url: str) -> None:
    server_table = f'[mcp_server.tools]\nurl = "{mcp_http_url}"\n'
    manifest = build(tmp_path, server_table + SCAN + ADD + SLOW)
    async with serving(manifest) as (_, remote):
        got = await remote.invoke("org.example.scan:1.0.0", params={"target": "x"})
        assert got["vulnerabilities"] == ["x:low"]
        seen: list[int | None] = []
        assert await remote.invoke("org.example.slow:1.0.0", params={"ms": 200, "tag": "h"},
                                   on_progress=lambda pct, text: seen.append(pct)) == {"total": 200}
        assert seen == [25, 50, 75, 100]
        results = []

        async def one(i: int) -> None:
            results.append(await remote.invoke("org.example.add:1.0.0", params={"a": i, "b": 1}))

        async with trio.open_nursery() as nursery:
            for i in range(16):
                nursery.start_soon(one, i)
        assert sorted(r["total"] for r in results) == list(range(1, 17))


@pytest.mark.trio
async def test_a_server_that_cannot_start_does_not_stop_serve(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    text = '[mcp_server.tools]\ncommand = ["python3", "-c", "import sys; sys.exit(2)"]\n' + ADD
    manifest = build(tmp_path, text)
    async with serving(manifest) as (_, remote):
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 1})
        assert err.value.code == 5002 and "tools is not running" in err.value.message
    assert any("cannot be started or reached" in r.getMessage() for r in caplog.records)


@pytest.mark.trio
async def test_drain_ends_a_call_in_flight_with_one_reply_and_stops_the_server(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    manifest = build(tmp_path, stdio_server(marks=marks) + SLOW.replace("timeout_ms = 3000", "timeout_ms = 60000"))
    outcome: list[object] = []
    async with serving(manifest, drain_timeout=0.3) as (server, remote):
        async def call() -> None:
            try:
                outcome.append(await remote.invoke("org.example.slow:1.0.0", params={"ms": 30_000, "tag": "d"}))
            except AmpError as exc:
                outcome.append(exc.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await _wait_mark(marks, "started-d")
            await server.daemon.drain(0.3)
    assert outcome == [5002]
    await _wait_mark(marks, "cancelled-d")


@pytest.mark.trio
async def test_a_stdio_servers_env_reads_the_daemons_environment(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("AMPCAP_TEST_MARKS_DIR", str(marks))
    server = stdio_server().rstrip("\n") + '\nenv = { AMPCAP_TEST_MARKS = "${AMPCAP_TEST_MARKS_DIR}" }\n'
    async with serving(build(tmp_path, server + ADD)) as (_, remote):
        assert await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 2}) == {"total": 3}
    assert len(_marks(marks, "pid-")) == 1


@pytest.mark.trio
async def test_a_binding_whose_library_is_missing_does_not_run(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ampcap.caps.binding import tables as binding_tables

    manifest = build(tmp_path, stdio_server() + ADD)
    monkeypatch.setitem(binding_tables._LIBRARIES, "mcp", (("ampcap_no_such_library",), "mcp"))
    async with serving(manifest) as (_, remote):
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 2})
        assert err.value.code == 5002 and "pip install 'ampcap[mcp]'" in err.value.message


@pytest.mark.trio
async def test_a_server_that_keeps_crashing_is_restarted_with_backoff(tmp_path: Path) -> None:
    from ampcap.caps.binding.other_protocols import McpServer
    from ampcap.mcp.client import McpClient

    marks = tmp_path / "marks"
    marks.mkdir()
    server = McpServer(name="t", command=(PYTHON, str(MCP_SERVER), "stdio"),
                       env=(("AMPCAP_TEST_MARKS", str(marks)),))
    client = McpClient(server, first_delay_s=0.4)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        for _ in range(2):  # crash it twice in a row, right after each start
            with pytest.raises(AmpError) as err:
                await client.call_tool("crash", {})
            assert err.value.code == 5001
        # Restarted at once after the first quick crash; after the second it
        # backs off: a call now finds it down (5002, nothing sent)...
        began = trio.current_time()
        with pytest.raises(AmpError) as err:
            await client.call_tool("add", {"a": 1, "b": 1})
        assert err.value.code == 5002 and "not running" in err.value.message
        # ...until it is back, 0.4 s later.
        with trio.fail_after(20):
            while client.why_down:
                await trio.sleep(0.02)
        assert trio.current_time() - began >= 0.3
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"total": 2}
        client.close()
    assert len(_marks(marks, "pid-")) == 3


@pytest.mark.trio
async def test_an_http_server_that_goes_away_is_down_until_it_is_back(tmp_path: Path) -> None:
    import subprocess

    from binding_helpers import free_port, wait_for_port

    port = free_port()

    def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen([PYTHON, str(MCP_SERVER), "http", str(port)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        wait_for_port(port, process)
        return process

    process = await trio.to_thread.run_sync(start)
    try:
        manifest = build(tmp_path, f'[mcp_server.tools]\nurl = "http://127.0.0.1:{port}/mcp"\n' + ADD)
        async with serving(manifest) as (_, remote):
            assert await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 2}) == {"total": 3}
            process.kill()
            process.wait()
            # The call that finds it gone: one reply, 5001 when the request was
            # under way as the session broke, 5002 when the session was seen
            # gone first (nothing sent); never a retry...
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 2})
            assert err.value.code in (5001, 5002)
            # ...then it is down (5002 at once) until it is back, when the next call works.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.add:1.0.0", params={"a": 1, "b": 2})
            assert err.value.code == 5002 and "not running" in err.value.message
            process = await trio.to_thread.run_sync(start)
            with trio.fail_after(20):
                while True:
                    try:
                        assert await remote.invoke("org.example.add:1.0.0", params={"a": 2, "b": 2}) == {"total": 4}
                        break
                    except AmpError as exc:
                        assert exc.code == 5002
                        await trio.sleep(0.2)
    finally:
        process.kill()
        process.wait()
