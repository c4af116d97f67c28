"""Bindings to MCP, HTTP and gRPC in a manifest (R17): the tables, their
problems with locations, the fallback order, and the pure transformations
(field mappings, the injection-safe body template, URL placeholders,
${NAME} expansion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampcap.caps.binding.local import PythonBinding
from ampcap.caps.binding.other_protocols import (
    Fallback,
    GrpcBinding,
    HttpBinding,
    McpBinding,
    NotRun,
    expand_env,
    fill_template,
    fill_url,
    map_fields,
)
from ampcap.cli.main import main
from ampcap.errors import AmpError
from ampcap.files.manifest import check_manifest

HEAD = """
[mcp_server.tools]
command = ["python3", "server.py"]
env = { MODE = "test" }

[mcp_server.remote]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer ${TOKEN}" }
"""

CAP = """
[[capability]]
id = "org.example.t.scan:1.0.0"
input_schema = { type = "object" }
output_schema = { type = "object" }
"""

ALL = HEAD + CAP + """
[capability.binding]
python = "ampcap.caps.demo:noop"

[capability.binding.mcp]
server = "tools"
tool = "scan"
mapping = { target = "path" }
output_mapping = { findings = "vulnerabilities" }
error_mapping = { NOT_FOUND = 4004 }
timeout_ms = 5000

[capability.binding.http]
method = "post"
url = "https://api.example/v1/scan/{target}?key=${API_KEY}"
headers = { "X-Key" = "${API_KEY}" }
body_template = '{"target": "{target}", "label": "scan of {target}"}'
error_mapping = { 404 = 4004, 429 = 5002 }

[capability.binding.grpc]
target = "localhost:50051"
method = "scan.v1.Scanner/Scan"
mapping = { target = "path" }
"""


def load(tmp_path: Path, text: str, check: bool = False):  # type: ignore[no-untyped-def]
    path = tmp_path / "m.toml"
    path.write_text(text)
    return check_manifest(path, check_bindings=check)


def test_every_kind_parses_in_r17_order(tmp_path: Path) -> None:
    manifest, problems = load(tmp_path, ALL)
    assert problems == [] and manifest is not None
    (spec,) = manifest.capabilities
    assert isinstance(spec.binding, Fallback)
    assert spec.binding.kinds == ("mcp", "http", "grpc", "python")
    mcp, http, grpc, py = spec.binding.bindings
    assert isinstance(mcp, McpBinding) and mcp.server.name == "tools" and mcp.server.command[0] == "python3"
    assert mcp.server.cwd == tmp_path and dict(mcp.server.env) == {"MODE": "test"}
    assert dict(mcp.mapping) == {"target": "path"} and dict(mcp.error_mapping) == {"NOT_FOUND": 4004}
    assert mcp.timeout_ms == 5000
    assert isinstance(http, HttpBinding) and http.method == "POST" and http.timeout_ms == 30_000
    assert http.body_template == {"target": "{target}", "label": "scan of {target}"}
    assert dict(http.error_mapping) == {404: 4004, 429: 5002}
    assert isinstance(grpc, GrpcBinding) and grpc.service == "scan.v1.Scanner" and grpc.path == "/scan.v1.Scanner/Scan"
    assert isinstance(py, PythonBinding)
    assert set(manifest.mcp_servers) == {"tools", "remote"}
    assert manifest.mcp_servers["remote"].url == "https://mcp.example/mcp"


def test_binding_order_overrides(tmp_path: Path) -> None:
    text = ALL.replace('output_schema = { type = "object" }\n',
                       'output_schema = { type = "object" }\nbinding_order = ["python", "http", "grpc", "mcp"]\n')
    manifest, problems = load(tmp_path, text)
    assert problems == [] and manifest is not None
    assert manifest.capabilities[0].binding.kinds == ("python", "http", "grpc", "mcp")


def test_a_single_remote_binding_is_itself(tmp_path: Path) -> None:
    manifest, problems = load(tmp_path, HEAD + CAP + '[capability.binding.mcp]\nserver = "remote"\ntool = "t"\n')
    assert problems == [] and manifest is not None
    assert isinstance(manifest.capabilities[0].binding, McpBinding)


@pytest.mark.parametrize(("edit", "key", "words"), [
    (('server = "tools"', 'server = "nope"'), "binding.mcp.server", "no [mcp_server.nope]"),
    (('tool = "scan"', 'tool = ""'), "binding.mcp.tool", "tool's name"),
    (("NOT_FOUND = 4004", "NOT_FOUND = 4999"), "binding.mcp.error_mapping", "AMP error code"),
    (('method = "post"', 'method = "BREW"'), "binding.http.method", "one of GET"),
    (('url = "https://api', 'url = "ftp://api'), "binding.http.url", "http:// or https://"),
    (("'{\"target\": \"{target}\"", "'{\"target\": {target}"), "binding.http.body_template", "must be JSON"),
    (("404 = 4004", "999 = 4004"), "binding.http.error_mapping", "HTTP statuses"),
    (('target = "localhost:50051"', 'target = "localhost"'), "binding.grpc.target", "HOST:PORT"),
    (('method = "scan.v1.Scanner/Scan"', 'method = "Scan"'), "binding.grpc.method", "package.Service/Method"),
    (("timeout_ms = 5000", "timeout_ms = -1"), "binding.mcp.timeout_ms", "positive integer"),
    (("[capability.binding.grpc]", "[capability.binding.grpc]\ncolour = 1"), "binding.grpc.colour", "unknown key"),
    (('url = "https://mcp.example/mcp"', 'url = "mcp.example"'), "mcp_server.remote.url", "http:// or https://"),
    (('env = { MODE = "test" }', 'url = "http://x/"'), "mcp_server.tools", "exactly one of"),
])
def test_problems_are_located(tmp_path: Path, edit: tuple[str, str], key: str, words: str) -> None:
    text = ALL.replace(*edit)
    assert text != ALL
    _, problems = load(tmp_path, text)
    assert any(p.key == key and words in p.message for p in problems), [str(p) for p in problems]
    problem = next(p for p in problems if p.key == key)
    lines = text.splitlines()
    assert problem.line is not None
    # The line holds the key (or its table's header).
    leaf = key.split(".")[-1]
    assert leaf in lines[problem.line - 1] or key.split(".")[1] in lines[problem.line - 1], str(problem)


def test_binding_order_must_name_each_binding_once(tmp_path: Path) -> None:
    text = ALL.replace('output_schema = { type = "object" }\n',
                       'output_schema = { type = "object" }\nbinding_order = ["mcp", "http"]\n')
    _, problems = load(tmp_path, text)
    assert [p.key for p in problems] == ["binding_order"]
    assert "it has: mcp, http, grpc, python" in problems[0].message


def test_a_stdio_server_program_is_looked_up_when_checking(tmp_path: Path) -> None:
    text = HEAD.replace('"python3", "server.py"', '"ampcap-no-such-mcp-server"') + CAP + \
        '[capability.binding.mcp]\nserver = "tools"\ntool = "t"\n'
    assert load(tmp_path, text)[1] == []
    _, problems = load(tmp_path, text, check=True)
    assert [(p.key, p.line) for p in problems] == [("mcp_server.tools.command", 3)]


def test_a_secret_in_a_body_template_is_refused(tmp_path: Path) -> None:
    _, problems = load(tmp_path, ALL.replace('"label": "scan of {target}"', '"key": "${API_KEY}"'))
    assert [p.key for p in problems] == ["binding.http.body_template"]


def test_caps_list_and_show_never_show_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "sekrit-value")
    monkeypatch.setenv("TOKEN", "sekrit-token")
    (tmp_path / "m.toml").write_text(ALL)
    assert main(["caps", "list", str(tmp_path / "m.toml")]) == 0
    out = capsys.readouterr().out
    assert "mcp,http,grpc,python" in out
    assert main(["caps", "show", "--json", str(tmp_path / "m.toml"), "org.example.t.scan"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [b["kind"] for b in info["bindings"]] == ["mcp", "http", "grpc", "python"]
    assert info["bindings"][1]["target"] == "POST https://api.example/v1/scan/{target}?key=${API_KEY}"
    assert main(["caps", "show", str(tmp_path / "m.toml"), "org.example.t.scan"]) == 0
    text = capsys.readouterr().out
    assert "sekrit" not in text and "binding" in text and "tools/scan" in text


def test_existing_manifests_are_unchanged() -> None:
    manifest, problems = check_manifest(Path(__file__).parents[2] / "examples" / "manifest.toml")
    assert problems == [] and manifest is not None and manifest.mcp_servers == {}


# ------------------------------------------------------------ transformations

def test_map_fields_renames_the_named_and_passes_the_rest() -> None:
    assert map_fields({"target": "a", "x": 1}, {"target": "path"}) == {"path": "a", "x": 1}
    assert map_fields([1], {"a": "b"}) == [1] and map_fields({"a": 1}, {}) == {"a": 1}


def test_body_template_keeps_the_document_structure() -> None:
    template = json.loads('{"target": "{target}", "label": "scan of {target}", "n": "{n}", "deep": ["{obj}"]}')
    evil = 'x", "admin": true, "y": "'
    body = fill_template(template, {"target": evil, "n": 3, "obj": {"a": [1, None]}})
    assert body == {"target": evil, "label": "scan of " + evil, "n": 3, "deep": [{"a": [1, None]}]}
    assert set(json.loads(json.dumps(body))) == {"target", "label", "n", "deep"}
    assert fill_template({"a": "{p.q}"}, {"p": {"q": True}}) == {"a": True}
    assert fill_template({"{target}": 1}, {"target": "k"}) == {"{target}": 1}  # keys are never filled
    with pytest.raises(AmpError) as err:
        fill_template({"a": "{missing}"}, {})
    assert err.value.code == 4001


def test_url_placeholders_are_percent_encoded_whole() -> None:
    assert fill_url("https://h/x/{id}?q={q}&k=${KEY}", {"id": "a/../b", "q": "1&admin=1#"}) == \
        "https://h/x/a%2F..%2Fb?q=1%26admin%3D1%23&k=${KEY}"


def test_env_expansion_names_a_missing_variable_never_a_value() -> None:
    assert expand_env("Bearer ${T}", {"T": "s3cr3t"}, what="header") == "Bearer s3cr3t"
    with pytest.raises(NotRun) as err:
        expand_env("${T} ${U}", {"T": "s3cr3t"}, what="header X-K")
    assert err.value.code == 5002 and "U" in err.value.message and "s3cr3t" not in err.value.message


def test_a_library_that_is_not_installed_is_a_problem_when_checking(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ampcap.caps.binding import tables as binding_tables

    monkeypatch.setitem(binding_tables._LIBRARIES, "http", (("ampcap_no_such_library",), "http"))
    assert load(tmp_path, ALL)[1] == []  # not checked: loads
    _, problems = load(tmp_path, ALL, check=True)
    assert [(p.key, p.message) for p in problems if p.key == "binding.http"] == [
        ("binding.http", "http bindings need ampcap_no_such_library: pip install 'ampcap[http]'")]
