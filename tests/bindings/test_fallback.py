"""Fallback between a capability's bindings (R17): the next one runs only
when the one before failed before its implementation could have run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ampcap.errors import AmpError

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import PYTHON, build, capability, free_port, serving, stdio_server  # noqa: E402
from http_server import http_server  # noqa: E402

BROKEN_SERVER = '[mcp_server.tools]\ncommand = ["python3", "-c", "import sys; sys.exit(2)"]\n'


def both(base: str, *, mcp_tool: str = "add", timeout: int = 30_000, order: str = "") -> str:
    return capability("sum", f"""
[capability.binding.mcp]
server = "tools"
tool = "{mcp_tool}"
timeout_ms = {timeout}

[capability.binding.http]
method = "POST"
url = "{base}/echo/fallback"
""", extra=order)


@pytest.mark.trio
async def test_an_mcp_server_that_cannot_start_falls_back_to_http(tmp_path: Path) -> None:
    with http_server() as (base, rec):
        manifest = build(tmp_path, BROKEN_SERVER + both(base))
        async with serving(manifest) as (_, remote):
            got = await remote.invoke("org.example.sum:1.0.0", params={"a": 1, "b": 2})
            assert got["body"] == {"a": 1, "b": 2} and got["path"] == "/echo/fallback"
        assert rec.hits["echo"] == 1


@pytest.mark.trio
async def test_no_fallback_after_a_timeout_or_an_error_reply(tmp_path: Path) -> None:
    with http_server() as (base, rec):
        text = stdio_server() + both(base, mcp_tool="slow", timeout=300) + capability("fails", f"""
[capability.binding.mcp]
server = "tools"
tool = "fail"

[capability.binding.http]
method = "POST"
url = "{base}/echo/never"
""")
        manifest = build(tmp_path, text)
        async with serving(manifest) as (_, remote):
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.sum:1.0.0", params={"ms": 5000, "tag": "x"})
            assert err.value.code == 5003
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.fails:1.0.0", params={"code": "E"})
            assert err.value.code == 5001
        assert rec.hits["echo"] == 0  # the HTTP endpoint never ran


@pytest.mark.trio
async def test_binding_order_and_every_binding_down(tmp_path: Path) -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    # HTTP first by binding_order: refused, then the (working) MCP server.
    text = stdio_server() + both(refused, order='binding_order = ["http", "mcp"]\n')
    manifest = build(tmp_path, text)
    async with serving(manifest) as (_, remote):
        assert await remote.invoke("org.example.sum:1.0.0", params={"a": 2, "b": 3}) == {"total": 5}
    # Nothing can run: the last binding's 5002.
    manifest = build(tmp_path, BROKEN_SERVER + both(refused))
    async with serving(manifest) as (_, remote):
        with pytest.raises(AmpError) as err:
            await remote.invoke("org.example.sum:1.0.0", params={"a": 2, "b": 3})
        assert err.value.code == 5002 and "cannot connect" in err.value.message


@pytest.mark.trio
async def test_a_local_binding_takes_its_place_in_binding_order(tmp_path: Path) -> None:
    text = capability("cmd", """
[capability.binding]
command = ["/nonexistent/program"]
python = "ampcap.caps.demo:noop"
""")
    # python and command are one binding table: one of them only.
    with pytest.raises(AmpError):
        build(tmp_path, text)
    text = capability("cmd", f"""
binding_order = ["command", "http"]

[capability.binding]
command = ["{PYTHON}", "-c", "import json; print(json.dumps({{'via': 'command'}}))"]

[capability.binding.http]
method = "GET"
url = "http://127.0.0.1:{free_port()}/"
""")
    manifest = build(tmp_path, text)
    async with serving(manifest) as (_, remote):
        assert await remote.invoke("org.example.cmd:1.0.0", params={}) == {"via": "command"}
