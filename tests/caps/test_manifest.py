"""TOML capability manifests: loading, schemas as a bundle, clear errors."""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ampcap.caps.binding.local import CommandBinding, PythonBinding
from ampcap.caps.descriptor import Stability
from ampcap.caps.manifest import ManifestError, Policy, canonical_json
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError
from ampcap.files.manifest import check_manifest, load_manifest

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parents[2] / "examples"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.toml"
    p.write_text(text)
    return p


MINIMAL = """
[[capability]]
id = "org.example.t.noop:1.0.0"
input_schema = { type = "object" }
output_schema = { type = "null" }
binding = { python = "ampcap.caps.demo:noop" }
"""


def test_ok_manifest_loads() -> None:
    m = load_manifest(DATA / "manifest_ok.toml")
    greet, old = m.capabilities
    assert greet.id == "org.example.test.greet:1.2.0"
    assert greet.aliases == ("greet", "org.example.oldgreet")
    assert greet.policy is Policy.RANGE
    assert [str(r) for r in greet.descriptor.supported_ranges or ()] == [">=1.0.0 <2.0.0"]
    assert isinstance(greet.binding, PythonBinding)
    assert old.policy is Policy.STRICT
    assert old.descriptor.stability is Stability.DEPRECATED
    assert old.descriptor.deprecated_by == "org.example.test.greet:1.2.0"
    assert old.descriptor.sunset_date == datetime.date(2027, 6, 30)
    assert isinstance(old.binding, CommandBinding)
    assert old.binding.argv == ("cat",) and old.binding.timeout_ms == 1500
    assert old.binding.cwd == DATA and dict(old.binding.env) == {"X": "1"}
    assert [c.id for c in m.find("greet")] == ["org.example.test.greet:1.2.0", "org.example.test.greet:0.9.0"]


def test_schemas_become_an_offline_bundle_with_sha256() -> None:
    m = load_manifest(DATA / "manifest_ok.toml")
    greet = m.capabilities[0]
    ref = greet.descriptor.input_schema
    assert ref.bundle_id == "test.schemas" and ref.uri is None
    assert ref.hash == hashlib.sha256((DATA / "schemas/greet.input.json").read_bytes()).digest()
    out = greet.descriptor.output_schema
    assert out.hash == hashlib.sha256(canonical_json({"type": "object", "required": ["greeting"]})).digest()
    greet.descriptor.check_offline_profile()
    validator = ParamsValidator(m.schema_store())
    validator.validate_params(greet.descriptor, {"name": "Ada"})
    with pytest.raises(AmpError) as info:
        validator.validate_params(greet.descriptor, {})
    assert info.value.code == 4004


def test_inline_schema_hash_ignores_key_order(tmp_path: Path) -> None:
    a = load_manifest(write(tmp_path, MINIMAL.replace('{ type = "object" }', '{ type = "object", minProperties = 0 }')))
    b = load_manifest(write(tmp_path, MINIMAL.replace('{ type = "object" }', '{ minProperties = 0, type = "object" }')))
    assert a.capabilities[0].descriptor.input_schema.hash == b.capabilities[0].descriptor.input_schema.hash


def test_bad_manifest_lists_every_problem_with_location() -> None:
    manifest, problems = check_manifest(DATA / "manifest_bad.toml")
    assert manifest is None
    text = [str(p) for p in problems]
    # capability[0]: bad version "1.0" on line 2
    assert any("manifest_bad.toml:2: capability[0]: key 'id'" in t and "1.0" in t for t in text), text
    # capability[1]: missing schema file, and range policy without ranges
    assert any(":10: capability[1] (org.example.ok:1.0.0): key 'input_schema'" in t and "does-not-exist" in t for t in text), text
    assert any(":9: capability[1] (org.example.ok:1.0.0): key 'policy'" in t for t in text), text
    # capability[2]: bad stability, unknown key, no binding
    assert any(":16:" in t and "key 'stability'" in t and "rock-solid" in t for t in text), text
    assert any(":17:" in t and "key 'colour'" in t for t in text), text
    assert any("capability[2]" in t and "key 'binding'" in t and "missing" in t for t in text), text
    assert len(problems) == 6
    with pytest.raises(ManifestError) as info:
        load_manifest(DATA / "manifest_bad.toml")
    assert info.value.code == 4001 and len(info.value.problems) == 6


def test_toml_syntax_error_has_a_line(tmp_path: Path) -> None:
    _, problems = check_manifest(write(tmp_path, "[[capability]]\nid = \n"))
    assert len(problems) == 1 and problems[0].line == 2
    assert str(problems[0]).startswith(f"{tmp_path / 'm.toml'}:2: TOML syntax")


def test_missing_file_and_empty_manifest(tmp_path: Path) -> None:
    _, problems = check_manifest(tmp_path / "nope.toml")
    assert "cannot read manifest" in str(problems[0])
    _, problems = check_manifest(write(tmp_path, "bundle_id = 'x'\n"))
    assert "declares no capabilities" in str(problems[0])


@pytest.mark.parametrize(
    ("snippet", "key", "fragment"),
    [
        ('id = "org.example.t.noop:1.0.0"\nname = "org.example.t.noop"', "id", "not both"),
        ('id = "noop:1.0.0"', "id", "reverse-domain"),
        ('id = "org.example.t.noop\\n:1.0.0"', "id", "reverse-domain"),
        ('id = "org.example.t.noop:1.0.0\\n"', "id", "bad version"),
        ('policy = "strict"\nsupported_ranges = [">=1.0.0"]', "supported_ranges", "strict"),
        ('supported_ranges = [">=1.0.0 || <3.0.0"]', "supported_ranges", "bad range"),
        ('policy = "fuzzy"', "policy", "strict, range, bridge"),
        ('policy = "bridge"\nsupported_ranges = [">=1.0.0 <3.0.0"]', "notes", "document"),
        ('sunset_date = "next year"', "sunset_date", "ISO 8601"),
        # Located at the key that needs stability = "deprecated", or at the stability line if there is one.
        ('deprecated_by = "org.example.t.noop:2.0.0"', "deprecated_by", 'needs stability = "deprecated"'),
        ('stability = "beta"\nsunset_date = 2027-01-01', "stability", "(found 'beta')"),
        ('aliases = ["a b"]', "aliases", "without spaces"),
        ('aliases = ["org.example.t.noop"]', "aliases", "own name"),
    ],
)
def test_field_problems(tmp_path: Path, snippet: str, key: str, fragment: str) -> None:
    text = MINIMAL.replace('id = "org.example.t.noop:1.0.0"', snippet if snippet.startswith("id") else
                           'id = "org.example.t.noop:1.0.0"\n' + snippet)
    _, problems = check_manifest(write(tmp_path, text))
    assert problems, text
    assert any(p.key == key and fragment in p.message for p in problems), [str(p) for p in problems]


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        ('{ python = "nocolon" }', "module:function"),
        ('{ python = "x:y", command = ["a"] }', "exactly one"),
        ('{ command = [] }', "non-empty"),
        ('{ command = "ls -l" }', "list of strings"),
        ('{ command = ["ls"], timeout_ms = 0 }', "timeout_ms"),
        ('{ python = "x:y", env = { A = "1" } }', "command bindings only"),
        ('{ python = "x:y", retries = 3 }', "unknown key"),
        ('{ python = "x:y", inline = "yes" }', "true or false"),
        ('{ python = "x:y", inline = true, timeout_ms = 5 }', "cannot be timed out"),
        ('{ command = ["ls"], inline = true }', "python bindings only"),
        ('{ command = ["ls", "a\\u0000b"] }', "NUL"),
        ('{ command = ["ls"], env = { A = "\\u0000" } }', "NUL"),
        ('{ command = ["ls"], cwd = "d\\u0000" }', "NUL"),
        ('{ command = ["ls"], stderr_to_caller = "yes" }', "true or false"),
        ('{ python = "x:y", stderr_to_caller = true }', "command bindings only"),
    ],
)
def test_binding_problems(tmp_path: Path, binding: str, fragment: str) -> None:
    text = MINIMAL.replace('{ python = "ampcap.caps.demo:noop" }', binding)
    # The same problems whether or not the bindings are also checked (as
    # `caps validate` and `serve` do): that check once indexed an empty command.
    for check in (False, True):
        _, problems = check_manifest(write(tmp_path, text), check_bindings=check)
        assert any(fragment in p.message for p in problems), [str(p) for p in problems]


def test_nul_in_file_names_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # Found by fuzzing: the OS refuses such names with ValueError, which is
    # not an OSError, and escaped the manifest loader as a traceback.
    text = MINIMAL.replace('input_schema = { type = "object" }', 'input_schema = "in\\u0000.json"')
    _, problems = check_manifest(write(tmp_path, 'python_path = ["lib\\u0000"]\n' + text))
    assert {p.key for p in problems if "NUL" in p.message} == {"python_path", "input_schema"}, \
        [str(p) for p in problems]


def test_import_check_is_optional(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("ampcap.caps.demo:noop", "ampcap.caps.demo:no_such_function"))
    assert check_manifest(path)[0] is not None
    _, problems = check_manifest(path, check_bindings=True)
    assert any("no attribute" in p.message for p in problems)


@pytest.mark.parametrize(("binding", "expected"), [
    ('{ command = ["/nonexistent/prog"] }', "no program at '/nonexistent/prog'"),
    ('{ command = ["./tool.sh"] }', "is not executable"),                   # there, without the x bit
    ('{ command = ["ampcap-no-such-program-xyz"] }', "no program 'ampcap-no-such-program-xyz' on PATH"),
    ('{ command = ["tool.sh"], env = { PATH = "." } }', None),             # found on the binding's own PATH
    ('{ command = ["sh", "-c", "cat"] }', None),
])
def test_binding_check_finds_the_command_program(tmp_path: Path, binding: str, expected: str | None) -> None:
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\ncat\n")
    if expected is None:
        tool.chmod(0o755)
    path = write(tmp_path, MINIMAL.replace('{ python = "ampcap.caps.demo:noop" }', binding))
    assert check_manifest(path)[0] is not None  # without the check: loads, fails at the first invoke
    _, problems = check_manifest(path, check_bindings=True)
    if expected is None:
        assert problems == [], [str(p) for p in problems]
    else:
        (problem,) = problems
        assert expected in problem.message and problem.key == "binding.command" and problem.line == 6, str(problem)


@pytest.mark.parametrize("cwd", ["nodir", "tool.sh"])
def test_binding_check_finds_a_cwd_that_is_no_directory(tmp_path: Path, cwd: str) -> None:
    (tmp_path / "tool.sh").write_text("#!/bin/sh\n")
    path = write(tmp_path, MINIMAL.replace('{ python = "ampcap.caps.demo:noop" }',
                                           f'{{ command = ["cat"], cwd = "{cwd}" }}'))
    _, problems = check_manifest(path, check_bindings=True)
    (problem,) = problems
    assert problem.key == "binding.cwd" and "is not a directory" in problem.message, str(problem)


def test_cross_capability_problems(tmp_path: Path) -> None:
    second = MINIMAL.replace('org.example.t.noop:1.0.0', 'org.example.t.other:1.0.0')
    text = (MINIMAL + MINIMAL).replace('binding =', 'aliases = ["x"]\nbinding =', 1)
    _, problems = check_manifest(write(tmp_path, text))
    assert any("duplicate id" in p.message for p in problems)
    text = MINIMAL.replace("binding =", 'aliases = ["shared"]\nbinding =') + \
        second.replace("binding =", 'aliases = ["shared"]\nbinding =')
    _, problems = check_manifest(write(tmp_path, text))
    assert any("already points to" in p.message for p in problems)


def test_schema_that_does_not_compile_is_reported(tmp_path: Path) -> None:
    text = MINIMAL.replace('input_schema = { type = "object" }', 'input_schema = { type = "thing" }')
    _, problems = check_manifest(write(tmp_path, text))
    assert any(p.key == "input_schema" and "compile" in p.message for p in problems)


def test_schema_file_not_json(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{nope")
    text = MINIMAL.replace('input_schema = { type = "object" }', 'input_schema = "s.json"')
    _, problems = check_manifest(write(tmp_path, text))
    assert any("not valid JSON" in p.message for p in problems)


def test_shipped_example_is_valid(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    m = load_manifest(tmp_path / "examples" / "manifest.toml", check_bindings=True)
    kinds = {c.binding.kind for c in m.capabilities}
    assert kinds == {"python", "command"}
    assert json.loads((EXAMPLES / "schemas/greet.input.json").read_text())["required"] == ["name"]


def test_inline_binding_is_parsed(tmp_path: Path) -> None:
    text = MINIMAL.replace('{ python = "ampcap.caps.demo:noop" }', '{ python = "ampcap.caps.demo:noop", inline = true }')
    manifest, problems = check_manifest(write(tmp_path, text))
    assert not problems and manifest is not None
    assert manifest.capabilities[0].binding == PythonBinding(target="ampcap.caps.demo:noop", inline=True)


def test_command_stderr_goes_to_the_caller_only_when_asked(tmp_path: Path) -> None:
    for flag, expected in (("", False), (", stderr_to_caller = true", True)):
        text = MINIMAL.replace('{ python = "ampcap.caps.demo:noop" }', f'{{ command = ["true"]{flag} }}')
        manifest, problems = check_manifest(write(tmp_path, text))
        assert not problems and manifest is not None
        assert manifest.capabilities[0].binding.stderr_to_caller is expected


def test_a_manifest_reads_its_files_only_through_what_it_is_given() -> None:
    # caps/manifest.py opens nothing: schema files, python_path and command
    # programs go through the ManifestFiles it is handed (the disk, or this).
    from collections.abc import Mapping

    from ampcap.caps.manifest import manifest_problems

    class FakeFiles:
        def __init__(self) -> None:
            self.base_dir = Path("/virtual")
            self.asked: list[str] = []

        def read(self, path: Path, limit: int) -> bytes:
            self.asked.append(f"read {path}")
            if path == Path("/virtual/in.json"):
                return b'{"type": "object"}'
            raise FileNotFoundError(2, "No such file or directory")

        def resolve(self, path: Path) -> Path:
            return path

        def is_dir(self, path: Path) -> bool:
            return path == Path("/virtual/work")

        def missing_program(self, program: str, workdir: Path | None, env: Mapping[str, str]) -> str | None:
            self.asked.append(f"program {program} in {workdir}")
            return None if program == "good" else f"no program {program!r} on PATH"

    files = FakeFiles()
    data = {"capability": [
        {"id": "org.example.a:1.0.0", "input_schema": "in.json", "output_schema": {},
         "binding": {"command": ["good"], "cwd": "work"}},
        {"id": "org.example.b:1.0.0", "input_schema": "missing.json", "output_schema": {},
         "binding": {"command": ["bad"]}},
    ]}
    manifest, problems = manifest_problems(data, source="virtual.toml", files=files, check_bindings=True)
    assert manifest is None
    assert [(p.key, p.message) for p in problems] == [
        ("input_schema", "cannot read schema file 'missing.json': No such file or directory"),
        ("binding.command", "no program 'bad' on PATH"),
    ]
    assert files.asked == ["read /virtual/in.json", "program good in /virtual/work",
                           "read /virtual/missing.json", "program bad in /virtual"]
    # Without a file system, a schema file has nothing to be relative to.
    _, problems = manifest_problems(data, source="<data>")
    assert {p.message for p in problems} == {"schema files need a manifest file to be relative to"}
