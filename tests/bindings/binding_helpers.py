"""Shared by the binding tests: a manifest built from TOML text, an ampcap
daemon serving it and a client connected to it, the real MCP test server
(mcp_server.py) as a stdio command or a streamable HTTP process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ampcap.caps.manifest import Manifest
from ampcap.files.manifest import load_manifest

HERE = Path(__file__).parent
MCP_SERVER = HERE / "mcp_server.py"
PYTHON = sys.executable


def stdio_server(name: str = "tools", marks: Path | None = None) -> str:
    env = f'\nenv = {{ AMPCAP_TEST_MARKS = "{marks}" }}' if marks else ""
    return f'[mcp_server.{name}]\ncommand = ["{PYTHON}", "{MCP_SERVER}", "stdio"]{env}\n'


def capability(name: str, body: str, *, input_schema: str = '{ type = "object" }',
               output_schema: str = '{ type = "object" }', extra: str = "") -> str:
    return (f'[[capability]]\nid = "org.example.{name}:1.0.0"\ninput_schema = {input_schema}\n'
            f'output_schema = {output_schema}\n{extra}{body}\n')


def build(tmp_path: Path, text: str) -> Manifest:
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    return load_manifest(path, check_bindings=True)


@asynccontextmanager
async def serving(manifest: Manifest, drain_timeout: float | None = None) -> AsyncIterator[Any]:
    """(server, remote): the daemon serving ``manifest`` and a client of it."""
    from ampcap.net.api.peer import Peer, connect
    from ampcap.wire.identity import Identity

    async with Peer(Identity.generate(os.urandom), manifest=manifest).serve(
            "amp://127.0.0.1:0", drain_timeout=drain_timeout) as server, \
            connect(server.url, identity=Identity.generate(os.urandom)) as remote:  # a caller of its own
        yield server, remote


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")
