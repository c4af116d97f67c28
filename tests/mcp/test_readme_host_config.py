"""The README's MCP host config, verbatim, through the MCP SDK's stdio client,
against the README's main command (``ampcap serve --demo``) on a fresh HOME:
the first thing an MCP host user does (issue 36)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # where `ampcap` is installed, as the README's venv has it


def _readme_host_config() -> dict[str, object]:
    section = (ROOT / "README.md").read_text().split("## MCP gateway", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```json\n(.+?)\n```", section, re.S)
    config: dict[str, object] = json.loads(block)
    return config


def _readme_main_command() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up on a fresh machine", 1)[1]
    first = re.findall(r"```sh\n(.+?)\n```", setup)[0]
    main = first.split("&&")[-1].split()  # ".venv/bin/ampcap serve --demo"
    assert Path(main[0]).name == "ampcap"
    return ["ampcap", *main[1:]]


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.trio
async def test_the_readme_host_config_works_as_printed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # A fresh user: HOME and nothing else of ours (no XDG_* pointing elsewhere).
    env = {"HOME": str(home), "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"),
           "PYTHONUNBUFFERED": "1"}
    command = _readme_main_command()
    config = _readme_host_config()
    server = config["mcpServers"]["ampcap"]  # type: ignore[index]
    args = list(server["args"])
    # Verbatim when the README's port is free; another test run may hold it,
    # and then only the port changes, in both places alike.
    url = "amp://127.0.0.1:7700"
    assert url in args
    if not _port_free(7700):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command += ["--listen", f"127.0.0.1:{port}"]
        args = [a.replace(url, f"amp://127.0.0.1:{port}") for a in args]
    log = open(tmp_path / "serve.log", "w")
    daemon = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True, cwd=tmp_path)
    try:
        assert daemon.stdout is not None
        line = daemon.stdout.readline()  # "amp://… did:key:…" once it listens
        assert line.startswith("amp://"), (tmp_path / "serve.log").read_text()
        params = StdioServerParameters(command=server["command"], args=args, env=env, cwd=str(tmp_path))
        with open(tmp_path / "gateway.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = {t.name: t for t in (await session.list_tools()).tools}
                    assert "org_ampcap_demo_echo" in tools, (tmp_path / "gateway.log").read_text()
                    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in tools)
                    assert tools["org_ampcap_demo_echo"].input_schema["required"] == ["message"]
                    result = await session.call_tool("org_ampcap_demo_echo", {"message": "hi"})
                    assert not result.is_error and result.structured_content is not None
                    assert result.structured_content["message"] == "hi"
        # One user, two keys: the daemon's and the callers'.
        keys = home / ".config" / "ampcap"
        assert (keys / "identity.json").is_file() and (keys / "caller.json").is_file()
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        if daemon.stdout is not None:
            daemon.stdout.close()
        log.close()
