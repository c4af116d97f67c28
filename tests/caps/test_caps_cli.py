"""``ampcap caps validate|list|show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampcap.cli.main import main

DATA = Path(__file__).parent / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["caps", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(DATA / "manifest_ok.toml"))
    assert code == 0
    assert out.startswith("OK ") and "2 capabilities" in out and out.count("\n") == 1


def test_validate_lists_every_problem(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(DATA / "manifest_bad.toml"))
    assert code == 1
    lines = out.strip().splitlines()
    assert lines[-1] == "6 problems found"
    assert all("manifest_bad.toml:" in line for line in lines[:-1])
    assert any("capability[2] (org.example.nobinding:1.0.0): key 'colour'" in line for line in lines)


def _validate_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "m.toml").write_text(text)
    code, out, _ = run(capsys, "validate", str(tmp_path / "m.toml"))
    assert code == 1
    return [line.replace(str(tmp_path / "m.toml"), "m.toml") for line in out.splitlines()]


def test_validate_names_the_output_schema_as_such(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # It said "key 'output_schema': input schema does not compile".
    lines = _validate_lines(capsys, tmp_path, """bundle_id = "b"
[[capability]]
id = "org.x.a:1.0.0"
input_schema = { type = "nonsense" }
output_schema = { type = 5 }
binding = { command = ["true"] }
""")
    assert lines[0].startswith("m.toml:4: capability[0] (org.x.a:1.0.0): key 'input_schema': input schema does not "
                               "compile")
    assert lines[1].startswith("m.toml:5: capability[0] (org.x.a:1.0.0): key 'output_schema': output schema does not "
                               "compile")
    assert lines[2:] == ["2 problems found"]


def test_validate_puts_a_stray_sunset_date_on_its_own_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # It was reported as key 'stability' at line 2, the [[capability]] header.
    lines = _validate_lines(capsys, tmp_path, """bundle_id = "b"
[[capability]]
id = "org.x.a:1.0.0"
policy = "range"
supported_ranges = ["garbage", ""]
sunset_date = 1979-05-27T07:32:00Z
input_schema = {}
output_schema = {}
binding = { command = [] , timeout_ms = 0}
""")
    assert ("m.toml:6: capability[0] (org.x.a:1.0.0): key 'sunset_date': sunset_date needs stability = "
            "\"deprecated\" (found 'stable', the default)") in lines
    # The ranges are reported, once: not again as 'policy range needs supported_ranges'.
    assert [line.split(": key ")[1].split("'")[1] for line in lines[:-1]] == [
        "supported_ranges", "supported_ranges", "sunset_date", "binding"]
    assert lines[-1] == "4 problems found"


def test_validate_reports_a_duplicate_id_beside_other_problems(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    # The duplicate went unreported while either capability had another problem.
    lines = _validate_lines(capsys, tmp_path, """bundle_id = "b"
python_path = ["/nonexistent", 5]
[[capability]]
id = "org.x.a:1.0.0"
aliases = ["a"]
input_schema = {}
output_schema = {}
binding = { python = "ampcap.caps.demo:noop", timeout_ms = 99999999999999999999999 }
[[capability]]
id = "org.x.a:1.0.0"
input_schema = {}
output_schema = {}
binding = { command = ["nonexistent-cmd-xyz"] }
[[capability]]
id = "org.x.b:1.0.0"
aliases = ["a"]
input_schema = { type = 5 }
output_schema = {}
binding = { command = ["true"] }
""")
    assert lines == [
        "m.toml:2: key 'python_path': must be a list of directories (relative to the manifest)",
        "m.toml:8: capability[0] (org.x.a:1.0.0): key 'binding': timeout_ms must be an integer in 1..86400000",
        "m.toml:10: capability[1] (org.x.a:1.0.0): key 'id': duplicate id (first declared by capability[0])",
        "m.toml:13: capability[1] (org.x.a:1.0.0): key 'binding.command': no program 'nonexistent-cmd-xyz' on PATH",
        "m.toml:16: capability[2] (org.x.b:1.0.0): key 'aliases': alias 'a' already points to 'org.x.a'",
        "m.toml:17: capability[2] (org.x.b:1.0.0): key 'input_schema': input schema does not compile: type is 5, "
        "which is not a JSON Schema type (one of string, number, integer, object, array, boolean, null)",
        "6 problems found",
    ]


def test_validate_checks_imports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (DATA / "manifest_ok.toml").read_text().replace("ampcap.caps.demo:noop", "ampcap.caps.demo:missing")
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas/greet.input.json").write_bytes((DATA / "schemas/greet.input.json").read_bytes())
    (tmp_path / "m.toml").write_text(text)
    code, out, _ = run(capsys, "validate", str(tmp_path / "m.toml"))
    assert code == 1 and "no attribute" in out


def test_validate_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "--demo")
    assert code == 0 and "8 capabilities" in out


def test_list_table_is_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--demo")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "ALIASES", "POLICY", "STABILITY", "BINDING"]
    col = lines[0].index("POLICY")
    assert all(line[col - 2:col] == "  " for line in lines)
    assert any(line.startswith("org.ampcap.demo.math.add:1.0.0") and "ossa:demo/add@1.0" in line for line in lines)
    assert len(lines) == 9


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", str(DATA / "manifest_ok.toml"), "--json")
    rows = json.loads(out)
    assert code == 0
    assert rows[1]["stability"] == "deprecated" and rows[1]["binding"] == "command"
    assert rows[1]["sunset_date"] == "2027-06-30"


def test_show_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", str(DATA / "manifest_ok.toml"), "org.example.test.greet:0.9.0")
    assert code == 0
    assert "deprecated_by      org.example.test.greet:1.2.0" in out
    assert "sunset_date        2027-06-30" in out
    assert "input_schema       sha-256:" in out
    assert '"type": "object"' in out  # the pretty-printed input schema


def test_show_by_alias_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--demo", "ossa:demo/add@1.0", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["id"] == "org.ampcap.demo.math.add:1.0.0"
    assert info["input_schema"]["schema"]["required"] == ["a", "b"]
    assert len(bytes.fromhex(info["input_schema"]["hash"])) == 32


def test_show_name_lists_all_versions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--demo", "org.ampcap.demo.echo", "--json")
    assert [d["version"] for d in json.loads(out)] == ["2.0.0", "1.1.0", "1.0.0"]


def test_show_unknown_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "show", "--demo", "org.nothing")
    assert code == 1 and "no capability" in err
    with pytest.raises(SystemExit) as info:  # argparse: no operands at all
        run(capsys, "show", "--demo")
    assert info.value.code == 2
    code, _, err = run(capsys, "show", "--demo", "a", "b")
    assert code == 2 and "usage" in err
    code, _, err = run(capsys, "show", str(DATA / "manifest_ok.toml"))
    assert code == 2


def test_list_bad_manifest_is_one_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list", str(DATA / "manifest_bad.toml"))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 6 and all(line.startswith("ampcap caps: ") for line in lines)
    assert "more)" not in err


@pytest.mark.parametrize("action,says", [
    ([], "Check, list and show the capabilities a manifest declares"),
    (["validate"], "Check a manifest as 'ampcap serve --manifest' would load it"),
    (["list"], "Print a table of the capabilities a manifest declares"),
    (["show"], "Print everything about one capability"),
])
def test_every_caps_help_says_what_it_does_reads_and_exits_with(capsys: pytest.CaptureFixture[str],
                                                                action: list[str], says: str) -> None:
    # They had a usage line and options, and no description at all.
    with pytest.raises(SystemExit) as exc:
        main(["caps", *action, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert says in text
    assert "A manifest is a TOML file" in text and "--demo instead of MANIFEST" in text
    assert "Exit status: 0 " in text and "2 for a usage error" in text


def test_validate_counts_agree_with_their_nouns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Issue 38 item 12: "1 capabilities, 1 names", "1 MCP servers".
    (tmp_path / "one.toml").write_text('bundle_id = "b"\n[[capability]]\nid = "org.x.a:1.0.0"\n'
                                       'input_schema = {}\noutput_schema = {}\n'
                                       'binding = { python = "ampcap.caps.demo:noop" }\n')
    code, out, _ = run(capsys, "validate", str(tmp_path / "one.toml"))
    assert code == 0, out
    assert ": 1 capability, 1 name, bundle b" in out


def test_a_json_manifest_is_told_that_manifests_are_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Issue 38 item 12: it said only "TOML syntax: Invalid statement".
    for name, text in (("m.json", '{"bundle_id": "b", "capability": []}\n'),
                       ("m.toml", '[{"bundle_id": "b"}]\n'),
                       ("m.yaml", "bundle_id: b\n")):
        (tmp_path / name).write_text(text)
        code, out, _ = run(capsys, "validate", str(tmp_path / name))
        assert code == 1
        assert "TOML syntax: " in out and "(manifests are TOML, docs/manifest.md; this looks like" in out, out
    (tmp_path / "plain.toml").write_text("bundle_id = \n")
    code, out, _ = run(capsys, "validate", str(tmp_path / "plain.toml"))
    assert code == 1 and "TOML syntax: " in out and "manifests are TOML" not in out
