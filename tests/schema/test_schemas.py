"""The CDDL rule set: corpus, RFC vectors, type-code table, R6 codes,
load-time refusals, agreement with pycddl and property tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from corpus import CORPUS, EXTENSIONS, MID  # noqa: E402

from ampcap.schema import BODY_RULES, SchemaError, Schemas, load_schemas, schema_sources  # noqa: E402
from ampcap.schema.violations import EXTENSION_KEY, Violation  # noqa: E402
from ampcap.wire.cbor import loads  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

SCHEMAS = load_schemas()
VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "rfc001" / "appendix_a.json").read_text())


def errors(found: list[Violation]) -> list[str]:
    return sorted(v.path for v in found if v.kind != EXTENSION_KEY)


def extensions(found: list[Violation]) -> list[str]:
    return sorted(v.path for v in found if v.kind == EXTENSION_KEY)


def walk_is_clean(rule: str, value: Any) -> bool:
    """The slow path alone (``validate`` asks the fast path first)."""
    found: list[Violation] = []
    return SCHEMAS.node(rule).explain(value, "", found) and not found


# ------------------------------------------------------------------ corpus


@pytest.mark.parametrize(("rule", "value", "expected"), CORPUS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CORPUS)])
def test_corpus(rule: str, value: Any, expected: list[str]) -> None:
    found = SCHEMAS.validate(rule, value)
    assert errors(found) == expected, [str(v) for v in found]
    assert extensions(found) == []
    assert SCHEMAS.node(rule).check(value) is (not found) is walk_is_clean(rule, value)
    for v in found:  # short enough for an ERROR details field and a dump line
        assert len(str(v)) < 160 and v.expected and v.found


@pytest.mark.parametrize(("rule", "value", "expected"), EXTENSIONS)
def test_extension_keys_are_findings_not_errors(rule: str, value: Any, expected: list[str]) -> None:
    found = SCHEMAS.validate(rule, value)
    assert errors(found) == [] and extensions(found) == expected
    assert SCHEMAS.is_valid(rule, value)
    assert "extension key" in str(found[0])


def test_every_body_rule_has_valid_and_invalid_corpus_entries() -> None:
    rules_in_corpus = {r for r, _, e in CORPUS if not e} & {r for r, _, e in CORPUS if e}
    wanted = set(BODY_RULES.values()) | {"amp-message", "encrypted-payload", "handshake-request",
                                         "handshake-response", "goaway", "transport-error", "schema-ref",
                                         "capability-descriptor", "cap-session-context", "cap-negotiate-hints",
                                         "session-context", "cap-invoke-any-form"}
    assert wanted <= rules_in_corpus, sorted(wanted - rules_in_corpus)


# ------------------------------------------------------------ RFC vectors


@pytest.mark.parametrize("name", sorted(VECTORS["vectors"]))
def test_rfc001_appendix_a_messages_validate(name: str) -> None:
    vector = VECTORS["vectors"][name]
    message = loads(bytes.fromhex(vector["message"]))
    assert SCHEMAS.validate_envelope(message) == []
    if "body" in message:
        assert errors(SCHEMAS.validate_body(message["typ"], message["body"])) == []


def test_type_code_table_covers_the_capability_and_provisional_types() -> None:
    for typ in (MessageType.CAP_QUERY, MessageType.CAP_DECLARE, MessageType.CAP_INVOKE, MessageType.CAP_RESULT,
                MessageType.PROCESSING, MessageType.PROGRESS, MessageType.INPUT_REQUIRED, MessageType.ERROR,
                MessageType.HELLO, MessageType.HELLO_ACK, MessageType.HELLO_REJECT):
        assert int(typ) in SCHEMAS.body_rules
    assert SCHEMAS.validate_body(int(MessageType.MESSAGE), {"anything": 1}) == []  # no body rule: unchecked


# ------------------------------------------------------- R6: 1001 vs 4001

R6_CASES = [
    ({"id": "a.b:1.0.0", "params": 1}, []),
    ({"id": "a.b:1.0.0", "negotiate": {"range": ">=1.0.0"}, "params": 1}, [(4001, "negotiate")]),  # A.16
    ({"id": "a.b:1.0.0", "capability": "a.c", "params": 1}, [(4001, "capability")]),                 # A.8
    ({"id": "a.b:1.0.0", "version": "2.0.0", "params": 1}, [(4001, "version")]),
    ({"id": "a.b", "params": 1}, [(4001, "id")]),
    ({"params": 1}, [(4001, "")]),
    ({"capability": "a.b", "params": 1}, [(4001, "version")]),
    ({"capability": "a.b", "version": "1.0.0", "negotiate": {}, "params": 1}, [(4001, "version")]),
    ({"capability": "a.b", "version": "1.0.0"}, [(1001, "params")]),
    ({"id": 5, "negotiate": {}, "params": 1}, [(1001, "id")]),  # shape first, even with a conflict
    ({"id": "a.b:1.0.0", "params": 1, "timeout_ms": "5"}, [(1001, "timeout_ms")]),
    ([1, 2], [(1001, "")]),
]


@pytest.mark.parametrize(("body", "expected"), R6_CASES)
def test_invoke_identity_conflicts_are_4001_and_shape_faults_1001(body: Any, expected: list[tuple[int, str]]) -> None:
    found = [v for v in SCHEMAS.validate_body(int(MessageType.CAP_INVOKE), body) if v.kind != EXTENSION_KEY]
    assert [(v.code, v.path) for v in found] == expected, [str(v) for v in found]


def test_invoke_extension_keys_pass_with_a_finding() -> None:
    found = SCHEMAS.validate_body(int(MessageType.CAP_INVOKE), {"id": "a.b:1.0.0", "params": 1, "hint": 2})
    assert [(v.kind, v.path) for v in found] == [(EXTENSION_KEY, "hint")]


# ------------------------------------------------- load-time refusals


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ('a = 1\nb = tstr .regexp "x+"\n', "regexp", 2),
        ("a = {\n  x: tstr,\n  y: nosuchrule\n}\n", "nosuchrule", 3),
        ("a = uint\nb = tstr\na = bstr\n", "a", 3),
        ("a = [\n  * uint\n", "", None),  # syntax error
        ("a = #7.23\n", "", 1),
        ("a = uint\na /= tstr\n", "rule extension '/=' is not supported", 2),
        ("g = (x: uint, g)\na = { g }\n", "group 'g' includes itself", 1),
        ("pair<T> = [T, T]\na = pair<uint>\n", "generic rule 'pair<...>' is not supported", 1),
        ("a = [ uint // tstr, bstr ]\n", "group choices ('//') inside an array are not supported", 1),
        ("a = [* (x: uint)]\n", "nested groups inside an array are not supported", 1),
        ("a = (x: uint)\nb = [ a ]\n", "group 'a' inside an array is not supported", 2),
        ("a = &(x: 1)\n", "choice from a group ('&') is not supported", 1),
        ("a = ~b\nb = [uint]\n", "unwrap operator '~b' is not supported", 1),
        ("a = bytes .cbor uint\n", "control operator '.cbor' is not supported", 1),
    ],
)
def test_unsupported_or_broken_schema_is_refused_at_load_with_file_and_line(text: str, fragment: str,
                                                                             line: int | None) -> None:
    with pytest.raises(SchemaError) as info:
        Schemas.from_sources([("broken.cddl", text)])
    message = str(info.value)
    assert "broken.cddl" in message and fragment in message
    if line is not None:
        assert info.value.line == line, message


def test_packaged_schema_loads_once_and_names_every_body_rule() -> None:
    assert load_schemas() is SCHEMAS
    assert {name for name, _ in schema_sources()} >= {"rfc001.cddl", "rfc002.cddl", "rfc004.cddl", "rfc006.cddl"}
    assert set(BODY_RULES.values()) <= set(SCHEMAS.rule_names())


# -------------------------------------------- agreement with pycddl

pycddl = pytest.importorskip("pycddl")
_ALL_TEXT = "\n".join(text for _, text in schema_sources())
_PYCDDL: dict[str, Any] = {}

# pycddl gets the optional group of schema-ref-online wrong (library-notes:
# absent rejected, half present accepted, and here: present makes it miss
# an extension key elsewhere). Values holding an online ref are checked
# against our corpus expectations only.


def _pycddl_known_wrong(value: Any) -> bool:
    if isinstance(value, dict):
        if "uri" in value and "hash_alg" in value:
            return True
        return any(_pycddl_known_wrong(v) for v in value.values())
    if isinstance(value, list):
        return any(_pycddl_known_wrong(v) for v in value)
    return False


def pycddl_accepts(rule: str, value: Any) -> bool:
    schema = _PYCDDL.get(rule)
    if schema is None:
        schema = _PYCDDL[rule] = pycddl.Schema(f"ampcap-root = {rule}\n{_ALL_TEXT}")
    try:
        schema.validate_cbor(cbor2.dumps(value))
    except pycddl.ValidationError:
        return False
    return True


@pytest.mark.parametrize(("rule", "value", "expected"), CORPUS + EXTENSIONS,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CORPUS + EXTENSIONS)])
def test_pycddl_agrees(rule: str, value: Any, expected: list[str]) -> None:
    if _pycddl_known_wrong(value):
        pytest.skip("pycddl mishandles the optional bundle pair of schema-ref-online")
    if rule == "cap-declare-body" and expected == ["capabilities[0].stability"]:
        # Seen here: pycddl accepts an unknown key in a map inside `[+ rule]`
        # although it refuses the same map on its own (CDDL maps are closed).
        assert pycddl_accepts("capability-descriptor", value["capabilities"][0]) is False
        pytest.skip("pycddl does not check unknown keys of maps inside arrays")
    # pycddl's maps are closed: "valid" there means no findings at all here.
    assert pycddl_accepts(rule, value) == (SCHEMAS.validate(rule, value) == [])


# --------------------------------------------------------- properties

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64) + 1, 2**64 - 1),
                     st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=20),
                     st.sampled_from(["1.0.0", "sha-256", "success", "error", "relay", MID.hex()]),
                     st.just(MID))
_keys = st.one_of(st.sampled_from(["id", "params", "status", "result", "error", "code", "capabilities", "filter",
                                   "capability", "version", "negotiate", "hash", "hash_alg", "uri", "body", "v",
                                   "typ", "from", "to", "sig", "session", "session_id", "progress_pct"]),
                  st.text(max_size=5), st.integers(-3, 3))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(_keys, inner, max_size=6)), max_leaves=25)
_RULES = sorted(set(SCHEMAS.rule_names()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=st.sampled_from(_RULES), value=_values)
def test_random_values_only_ever_give_findings(rule: str, value: Any) -> None:
    found = SCHEMAS.validate(rule, value)
    assert all(isinstance(v, Violation) and isinstance(v.path, str) for v in found)
    assert SCHEMAS.node(rule).check(value) is walk_is_clean(rule, value)  # fast and slow paths agree


@settings(max_examples=200, deadline=None)
@given(typ=st.sampled_from(sorted(BODY_RULES)), value=_values)
def test_random_bodies_by_type_code(typ: int, value: Any) -> None:
    for v in SCHEMAS.validate_body(typ, value):
        assert v.code in (1001, 4001)


def test_deeply_nested_value_is_a_finding_not_a_crash() -> None:
    value: Any = "x"
    for _ in range(5000):
        value = [value]
    found = SCHEMAS.validate("cap-result-body", {"status": "success", "result": value})
    assert found == []  # `any` does not look inside
    assert errors(SCHEMAS.validate("hello-body", {"versions": value})) == ["versions[0]"]


# Maps with `//` group choices (cap-invoke-by-name) take a fast path built from
# their flat expansions; the backtracking walk (explain) is the reference.
# Random maps almost never come near those forms, so build near-misses from
# the real keys with plausible and implausible values.
_INVOKE_FIELDS = {
    "id": st.sampled_from(["org.example.echo:1.0.0", "org.example.echo", 7]),
    "capability": st.sampled_from(["org.example.echo", "", 1]),
    "type": st.sampled_from(["echo", 2]),
    "version": st.sampled_from(["1.0.0", "1.x", None]),
    "negotiate": st.sampled_from([{"range": "^1.0.0"}, {"preferred": ["1.0.0"]}, {}, "^1"]),
    "params": st.sampled_from([{}, {"a": 1}, None]),
    "session": st.sampled_from([{"session_id": "s1"}, {}, 3]),
    "timeout_ms": st.sampled_from([1000, -1, "5"]),
    "priority": st.just(3),
}


@settings(max_examples=400, deadline=None)
@given(rule=st.sampled_from(["cap-invoke-body", "cap-invoke-by-name", "cap-invoke-by-id"]),
       keys=st.sets(st.sampled_from(sorted(_INVOKE_FIELDS)), max_size=6), data=st.data())
def test_group_choice_fast_path_agrees_with_the_walk(rule: str, keys: set[str], data: st.DataObject) -> None:
    value = {k: data.draw(_INVOKE_FIELDS[k], label=k) for k in sorted(keys)}
    assert SCHEMAS.node(rule).check(value) is walk_is_clean(rule, value)
