"""``ampcap mcp`` over stdio, driven by the MCP SDK's own ClientSession,
against a real ``ampcap serve`` process (R18)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
import mcp.types as types  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

PYTHON = sys.executable
DEMO_TOOLS = {"org.ampcap.demo.current_time", "org.ampcap.demo.echo", "org.ampcap.demo.fail",
              "org.ampcap.demo.math.add", "org.ampcap.demo.noop", "org.ampcap.demo.sleep"}


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


@asynccontextmanager
async def gateway_session(tmp: Path, *args: str, on_message: Any = None) -> AsyncIterator[ClientSession]:
    """``ampcap -v mcp ARGS`` as a stdio MCP server, and an initialized session
    with it; its stderr goes to tmp/gateway.log. The tools keep their dots
    (--tool-names dotted) unless ARGS says otherwise."""
    names = [] if "--tool-names" in args else ["--tool-names", "dotted"]
    params = StdioServerParameters(command=PYTHON, args=["-m", "ampcap.cli.main", "-v", "mcp", *names, *args],
                                   env={"XDG_CONFIG_HOME": str(tmp / "gateway-config"), "PYTHONUNBUFFERED": "1",
                                        # this tree's ampcap, not whichever one is installed
                                        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    with open(tmp / "gateway.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                yield session


@pytest.mark.trio
async def test_demo_tools_over_stdio(tmp_path: Path) -> None:
    with serve_process(tmp_path) as served:
        async with gateway_session(tmp_path, served.url, "--peer-did", served.did) as session:
            assert session.server_capabilities is not None and session.server_capabilities.tools is not None
            assert session.server_capabilities.tools.list_changed is True
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == DEMO_TOOLS
            echo = listed["org.ampcap.demo.echo"]
            assert echo.input_schema["required"] == ["message"]
            assert echo.output_schema is not None and "version" in echo.output_schema["properties"]
            assert echo.description == "Major 2: also returns the message length."  # the notes of 2.0.0
            assert listed["org.ampcap.demo.noop"].output_schema is None  # its result schema is null, not an object

            # Every demo capability, through CAP_INVOKE of the newest version.
            result = await session.call_tool("org.ampcap.demo.echo", {"message": "hi"})
            assert not result.is_error
            assert result.structured_content == {"message": "hi", "version": "2.0.0", "length": 2}
            assert json.loads(_text(result)) == result.structured_content
            result = await session.call_tool("org.ampcap.demo.math.add", {"a": 1, "b": 2.5})
            assert result.structured_content == {"sum": 3.5}
            result = await session.call_tool("org.ampcap.demo.current_time", {"format": "unix"})
            assert isinstance(result.structured_content["time"], int)  # type: ignore[index]
            result = await session.call_tool("org.ampcap.demo.noop", {})
            assert not result.is_error and result.structured_content == {"result": None} and _text(result) == "null"

            result = await session.call_tool("org.ampcap.demo.fail", {})
            assert result.is_error and _text(result).startswith("5001 INTERNAL_ERROR: ")

            seen: list[tuple[float, float | None, str | None]] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, total, message))

            result = await session.call_tool("org.ampcap.demo.sleep", {"ms": 400}, progress_callback=progress)
            assert result.structured_content == {"slept_ms": 400}
            assert len(seen) >= 2 and seen[-1][0] == 100.0 and seen[-1][1] == 100.0
            assert [v for v, _, _ in seen] == sorted(v for v, _, _ in seen)

            # Params the schema refuses: answered by the gateway, naming the field.
            result = await session.call_tool("org.ampcap.demo.math.add", {"a": "one", "b": 2})
            assert result.is_error and _text(result).startswith("4004 SCHEMA_VIOLATION: params.a")
            result = await session.call_tool("org.ampcap.demo.sleep", {"ms": 10**9})
            assert result.is_error and _text(result).startswith("4004 SCHEMA_VIOLATION: params.ms")

            result = await session.call_tool("org.example.nothing", {})
            assert result.is_error and _text(result).startswith("4002 CAPABILITY_NOT_FOUND: ")

            # Cancellation stops the wait at once; the invoke's one terminal
            # reply arrives later and is dropped.
            started = time.monotonic()
            with trio.move_on_after(0.3):
                await session.call_tool("org.ampcap.demo.sleep", {"ms": 1200})
            assert time.monotonic() - started < 1.0
            result = await session.call_tool("org.ampcap.demo.echo", {"message": "after"})
            assert result.structured_content["message"] == "after"  # type: ignore[index]
            with trio.fail_after(10):
                while "late CAP_RESULT" not in (tmp_path / "gateway.log").read_text():
                    await trio.sleep(0.1)


def _manifest(path: Path, names: list[str]) -> None:
    tables = "".join(f'''
[[capability]]
id = "org.test.gw.{name}:1.0.0"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
binding = {{ python = "ampcap.caps.demo:noop", inline = true }}
''' for name in names)
    path.write_text(f'bundle_id = "org.test.gw"\n{tables}')


class ManifestPeer:
    """``ampcap serve --demo --manifest M`` on a fixed port, the same identity
    every time it is started."""

    def __init__(self, tmp: Path, manifest: Path, port: int) -> None:
        self.env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "serve-config"), PYTHONUNBUFFERED="1")
        self.cmd = [PYTHON, "-m", "ampcap.cli.main", "serve", "--demo", "--manifest", str(manifest),
                    "--listen", f"127.0.0.1:{port}"]
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> str:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=self.env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line, "serve printed no URL line"
        return line[0]

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
            assert self.proc.stdout is not None
            self.proc.stdout.close()
            self.proc = None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.trio
async def test_peer_restarted_with_new_capabilities_under_the_gateway(tmp_path: Path) -> None:
    manifest = tmp_path / "caps.toml"
    _manifest(manifest, ["one"])
    peer = ManifestPeer(tmp_path, manifest, _free_port())
    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    try:
        url = peer.start()
        async with gateway_session(tmp_path, url, "--range", "org.ampcap.demo.echo=>=1.0.0 <2.0.0",
                                   on_message=on_message) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert names == DEMO_TOOLS | {"org.test.gw.one"}
            result = await session.call_tool("org.ampcap.demo.echo", {"message": "v"})
            assert result.structured_content == {"message": "v", "version": "1.1.0"}  # newest inside the range
            assert not (await session.call_tool("org.test.gw.one", {})).is_error

            peer.stop()
            # While the peer is down: 5002 after the call's short wait for a
            # redial (about a second), never a hang; bad params
            # are still refused locally (saying 4004 takes no round trip).
            with trio.fail_after(5):
                while not (result := await session.call_tool("org.ampcap.demo.echo", {"message": "x"})).is_error:
                    await trio.sleep(0.05)
            assert _text(result).startswith("5002 UNAVAILABLE: ")
            started = time.monotonic()
            result = await session.call_tool("org.test.gw.one", {})
            assert result.is_error and _text(result).startswith("5002 UNAVAILABLE: ")
            assert time.monotonic() - started < 10  # bounded by the redial wait, not the call timeout (60 s)
            result = await session.call_tool("org.ampcap.demo.math.add", {"a": 1})
            assert _text(result).startswith("4004 SCHEMA_VIOLATION: params")
            # The tools stay listed through the outage.
            assert {tool.name for tool in (await session.list_tools()).tools} == DEMO_TOOLS | {"org.test.gw.one"}
            assert not changed.is_set()

            # The peer comes back with one more capability: redialled, listed
            # again, and the host told that the tools changed.
            _manifest(manifest, ["one", "two"])
            peer.start()
            with trio.fail_after(15):
                await changed.wait()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert names == DEMO_TOOLS | {"org.test.gw.one", "org.test.gw.two"}
            result = await session.call_tool("org.test.gw.two", {})
            assert not result.is_error and result.structured_content == {"result": None}
    finally:
        peer.stop()


DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def test_usage_errors_exit_2_before_anything_is_dialled(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path))
    for args, words in ((["ftp://x"], "ftp"), (["http://127.0.0.1:1", "--compat", "rust-example"], "raw TCP"), (["amp://127.0.0.1:1", "--range", "nope"], "NAME=RANGE"),
                        (["amp://127.0.0.1:1", "--range", "a.b=^1.0"], "--range a.b"),
                        (["amp://127.0.0.1:1", "amp://127.0.0.1:2", "--peer-did", DID], "given 1 time for 2 URLs: "),
                        (["amp://127.0.0.1:1", "--http", "nowhere"], "--http"),
                        (["amp://127.0.0.1:1", "--poll", "0"], "--poll")):
        done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "mcp", *args], capture_output=True, text=True,
                              env=env, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "ampcap").exists()  # no identity was created


def test_a_gateway_with_the_peers_own_identity_says_so_and_exits_2(tmp_path: Path) -> None:
    """By default the gateway signs with the callers' key (caller.json), so a
    daemon and a gateway of one user no longer share a DID; given the
    daemon's own key file, the gateway would call itself: one line saying
    what to do, no traceback."""
    with serve_process(tmp_path) as served:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))  # serve_process's own identity
        daemon_key = tmp_path / "config" / "ampcap" / "identity.json"
        done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "mcp", served.url, "--identity", str(daemon_key)],
                              capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "own DID" in done.stderr and "--identity gateway.key" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.trio
async def test_the_default_gateway_identity_is_the_callers_not_the_daemons(tmp_path: Path) -> None:
    """serve_process and the gateway share one config directory, as one user's
    do: the gateway takes caller.json beside the daemon's identity.json."""
    with serve_process(tmp_path) as served:
        params = StdioServerParameters(command=PYTHON, args=["-m", "ampcap.cli.main", "mcp", served.url],
                                       env={"XDG_CONFIG_HOME": str(tmp_path / "config"),
                                            "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
        with open(tmp_path / "gateway.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    listed = {tool.name for tool in (await session.list_tools()).tools}
                    assert "org_ampcap_demo_echo" in listed  # plain names by default
                    result = await session.call_tool("org_ampcap_demo_echo", {"message": "hi"})
                    assert not result.is_error
    assert (tmp_path / "config" / "ampcap" / "caller.json").is_file()


@pytest.mark.trio
async def test_a_gateway_that_cannot_serve_tells_the_host_why(tmp_path: Path) -> None:
    """Hosts hide stderr: the reason travels in the MCP errors the host gets."""
    with serve_process(tmp_path) as served:
        daemon_key = tmp_path / "config" / "ampcap" / "identity.json"
        params = StdioServerParameters(command=PYTHON, args=["-m", "ampcap.cli.main", "mcp", served.url,
                                                             "--identity", str(daemon_key)],
                                       env={"XDG_CONFIG_HOME": str(tmp_path / "config"),
                                            "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
        with open(tmp_path / "gateway.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    assert init.instructions is not None and "own DID" in init.instructions
                    from mcp.shared.exceptions import MCPError

                    with pytest.raises(MCPError) as err:
                        await session.list_tools()
                    assert "cannot serve" in err.value.message and "own DID" in err.value.message
                    assert "--identity gateway.key" in err.value.message
                    with pytest.raises(MCPError) as err:
                        await session.call_tool("anything", {})
                    assert "own DID" in err.value.message
    assert "own DID" in (tmp_path / "gateway.log").read_text()


def test_print_config_gives_absolute_paths(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "mcp", "amp://127.0.0.1:7700", "--print-config",
                           "--exclude", "mcp.git.*"], capture_output=True, text=True, env=env, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["mcpServers"]["ampcap"]
    assert os.path.isabs(server["command"]) and os.access(server["command"], os.X_OK)
    args = server["args"]
    identity = args[args.index("--identity") + 1]
    assert identity == str(tmp_path / "config" / "ampcap" / "caller.json") and os.path.isfile(identity)
    assert args[args.index("--exclude") + 1] == "mcp.git.*" and "--print-config" not in args
    assert "amp://127.0.0.1:7700" in args
    assert server["env"]["PYTHONPATH"] == env["PYTHONPATH"]  # a source tree run in place: the host needs it too


def test_a_failed_gateway_with_a_silent_pipe_exits(tmp_path: Path) -> None:
    """stdin a pipe that sends nothing (a script, not a host): the usage
    error is printed and the gateway exits, instead of waiting for MCP."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    proc = subprocess.Popen([PYTHON, "-m", "ampcap.cli.main", "mcp", "ftp://nowhere"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.wait(timeout=60)  # stdin stays open and silent until it has exited
        err, out = proc.stderr.read(), proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert proc.returncode == 2 and "ampcap mcp:" in err and out == ""
