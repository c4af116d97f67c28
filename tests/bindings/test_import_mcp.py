"""``ampcap caps import-mcp`` and ``ampcap serve --mcp NAME=COMMAND``."""

from __future__ import annotations

import sys
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from ampcap.cli.import_mcp import to_toml
from ampcap.cli.main import main
from ampcap.decoders import toml_loads
from ampcap.files.manifest import load_manifest
from ampcap.mcp.sdk import capability_name

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402
from binding_helpers import MCP_SERVER, PYTHON, serving  # noqa: E402


def test_import_mcp_prints_a_manifest_that_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["caps", "import-mcp", "--name", "tools", "--command", PYTHON, str(MCP_SERVER), "stdio"])
    out = capsys.readouterr().out
    assert code == 0
    path = tmp_path / "tools.toml"
    path.write_text(out)
    manifest = load_manifest(path, check_bindings=True)
    by_name = {c.name: c for c in manifest.capabilities}
    add = by_name["mcp.tools.add"]
    assert str(add.version) == "1.0.0" and add.aliases == ("mcp:tools/add@1.0",)
    assert add.descriptor.notes == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"] and add.output_schema["properties"]["total"]["type"] == "integer"
    assert by_name["mcp.tools.echo"].output_schema == {}  # declares none: anything
    assert add.binding.tool == "add" and add.binding.server.command == (PYTHON, str(MCP_SERVER), "stdio")


def test_import_mcp_takes_the_name_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["caps", "import-mcp", "--command", PYTHON, str(MCP_SERVER), "stdio", "--name", "t2"]) == 0
    assert "[mcp_server.t2]" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "code", "words"), [
    (["--command", "python3"], 2, "--name NAME is required"),
    (["--name", "bad name", "--command", "python3"], 2, "letters, digits"),
    (["--name", "x", "--url", "ftp://x"], 2, "http:// or https://"),
    (["--name", "x", "--timeout", "3", "--command", "python3", "-c", "import sys; sys.exit(1)"], 1,
     "cannot be started or reached"),
])
def test_import_mcp_errors(capsys: pytest.CaptureFixture[str], argv: list[str], code: int, words: str) -> None:
    assert main(["caps", "import-mcp", *argv]) == code
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and err.count("\n") == 1, err


@pytest.mark.trio
async def test_import_mcp_over_http(tmp_path: Path, mcp_http_url: str) -> None:
    import trio

    done = await trio.to_thread.run_sync(lambda: subprocess.run(
        [PYTHON, "-m", "ampcap.cli.main", "caps", "import-mcp", "--name", "web", "--url", mcp_http_url],
        capture_output=True, text=True, timeout=60))
    assert done.returncode == 0, done.stderr
    (tmp_path / "web.toml").write_text(done.stdout)
    manifest = load_manifest(tmp_path / "web.toml")
    assert manifest.mcp_servers["web"].url == mcp_http_url
    async with serving(manifest) as (_, remote):
        assert await remote.invoke("mcp:web/add@1.0", version="1.0.0", params={"a": 2, "b": 2}) == {"total": 4}


def test_toml_output_round_trips_odd_schemas() -> None:
    data = {"bundle_id": "mcp.x", "mcp_server": {"x": {"command": ["a b", 'q"uote']}},
            "capability": [{"name": "mcp.x.t", "version": "1.0.0", "notes": "line\nnext \x7f \u202e",
                            "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                             "properties": {"a b": {"default": None, "enum": [1, 2.5, True],
                                                                    "description": "tab\t"}}},
                            "output_schema": {}, "binding": {"mcp": {"server": "x", "tool": "t"}}}]}
    back = toml_loads(to_toml(data))
    expected = dict(data)
    del expected["capability"][0]["input_schema"]["properties"]["a b"]["default"]  # TOML has no null
    assert back == expected


def test_capability_names_from_odd_tool_names() -> None:
    assert capability_name("fs", "read_file") == "mcp.fs.read_file"
    assert capability_name("fs", "git/status") == "mcp.fs.git-status"
    assert capability_name("fs", "a.b") == "mcp.fs.a.b"
    assert capability_name("fs", "_hidden") == "mcp.fs.x_hidden"


def test_serve_mcp_offers_every_tool(tmp_path: Path) -> None:
    command = f"{shlex.quote(PYTHON)} {shlex.quote(str(MCP_SERVER))} stdio"
    with serve_process(tmp_path, "--mcp", f"tools={command}") as served:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "caller-config"))  # a caller of its own
        done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "invoke", served.url, "mcp.tools.add",
                               "--version", "1.0.0", "--params", '{"a": 20, "b": 22}'],
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        assert '"total": 42' in done.stdout or "'total': 42" in done.stdout, done.stdout


def test_serve_mcp_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--mcp", "nothing", "--listen", "127.0.0.1:0"]) == 2
    assert "NAME=COMMAND" in capsys.readouterr().err


def test_validate_starts_mcp_servers_and_checks_their_tools(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    good = f'[mcp_server.tools]\ncommand = ["{PYTHON}", "{MCP_SERVER}", "stdio"]\n'
    broken = '\n[mcp_server.broken]\ncommand = ["python3", "-c", "import sys; sys.exit(1)"]\n'
    caps = ""
    for i, (server, tool) in enumerate([("tools", "add"), ("tools", "nope"), ("broken", "x")]):
        caps += (f'\n[[capability]]\nid = "org.example.c{i}:1.0.0"\ninput_schema = {{ type = "object" }}\n'
                 f'output_schema = {{ type = "object" }}\n[capability.binding.mcp]\nserver = "{server}"\n'
                 f'tool = "{tool}"\n')
    path = tmp_path / "m.toml"
    path.write_text(good + broken + caps)
    assert main(["caps", "validate", str(path)]) == 1
    lines = capsys.readouterr().out.replace(str(path), "m.toml").splitlines()
    assert lines[0].startswith("m.toml:1: key 'mcp_server.tools': server tools has no tool 'nope' (it has: add,")
    assert lines[1].startswith("m.toml:4: key 'mcp_server.broken': MCP server broken (stdio: python3 -c ")
    assert "cannot be started or reached: the process exited" in lines[1] and lines[2] == "2 problems found"
    assert main(["caps", "validate", "--no-connect", str(path)]) == 0
    assert "2 MCP servers" in capsys.readouterr().out
