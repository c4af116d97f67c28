"""Params validation against input schemas (RFC 004 §7.2 step 7, A.6)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ampcap.caps.bundle import SchemaBundle, SchemaStore
from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.params import ParamsValidator, compile_schema
from ampcap.errors import AmpError

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"], "additionalProperties": False}


def setup(schema: Any, out_schema: Any = None, name: str = "org.x.add") -> tuple[ParamsValidator, Descriptor]:
    arts = {"in": json.dumps(schema).encode(), "out": json.dumps(out_schema or {}).encode()}
    refs = {k: SchemaRef(bundle_id="b", artifact_key=k, hash_alg="sha-256", hash=hashlib.sha256(v).digest())
            for k, v in arts.items()}
    desc = Descriptor.build(name, "1.0.0", refs["in"], refs["out"])
    return ParamsValidator(SchemaStore([SchemaBundle("b", artifacts=arts)])), desc


def violation(validator: ParamsValidator, desc: Descriptor, params: Any) -> AmpError:
    with pytest.raises(AmpError) as info:
        validator.validate_params(desc, params)
    return info.value


def test_valid_params_pass() -> None:
    v, d = setup(ADD_SCHEMA)
    v.validate_params(d, {"a": 1, "b": 2.5})


def test_a6_missing_required_field_is_4004() -> None:
    v, d = setup(ADD_SCHEMA)
    err = violation(v, d, {"a": 1})
    assert err.code == 4004
    assert err.message.startswith("params:")
    assert "b" in err.message


def test_wrong_type_message_is_short_and_located() -> None:
    v, d = setup(ADD_SCHEMA)
    err = violation(v, d, {"a": "1", "b": 2})
    assert err.code == 4004
    assert err.message == "params.a: must be number"
    assert err.path == "params.a"


@pytest.mark.parametrize("params", [{"a": True, "b": 1}, {"a": b"\x01", "b": 1}, [1, 2], None, {"a": 1, "b": 2, "c": 3}])
def test_other_violations(params: Any) -> None:
    v, d = setup(ADD_SCHEMA)
    assert violation(v, d, params).code == 4004


def test_message_does_not_dump_the_schema() -> None:
    big_enum = {"type": "object", "properties": {"k": {"enum": [f"value-{i}" for i in range(500)]}}}
    v, d = setup(big_enum)
    err = violation(v, d, {"k": "nope"})
    assert err.code == 4004
    assert len(err.message) <= 160


def test_compiled_once_per_id_and_hash() -> None:
    v, d = setup(ADD_SCHEMA)
    first = v.compiled(d.id, d.input_schema)
    v.validate_params(d, {"a": 1, "b": 2})
    assert v.compiled(d.id, d.input_schema) is first
    assert len(v) == 1


def test_schema_that_does_not_compile_is_5002() -> None:
    v, d = setup({"type": "object", "properties": {"a": {"type": "no-such-type"}}})
    err = violation(v, d, {"a": 1})
    assert err.code == 5002


@pytest.mark.parametrize("draft", [None, "https://json-schema.org/draft/2020-12/schema"])
def test_a_schema_that_does_not_compile_is_named_for_what_it_is(draft: str | None) -> None:
    # An output schema was reported as "input schema does not compile".
    bad = {"type": "no-such-type", **({"$schema": draft} if draft else {})}
    v, d = setup({"type": "object"}, bad)
    with pytest.raises(AmpError, match="output schema does not compile: "):
        v.validate_result(d, {})
    v, d = setup(bad)
    assert violation(v, d, {}).message.startswith("input schema does not compile: ")
    with pytest.raises(AmpError, match="output schema must be a JSON object or boolean$"):
        compile_schema([], what="output schema")


@pytest.mark.parametrize("draft", [None, "https://json-schema.org/draft/2020-12/schema"])
def test_an_unknown_type_is_named_with_where_it_is(draft: str | None) -> None:
    # Issue 38 item 12: it said only "input schema does not compile: Unknown type".
    bad = {"type": "object", "properties": {"a": {"enum": [{"type": "data"}]}, "b": {"type": ["string", "intger"]}},
           **({"$schema": draft} if draft else {})}
    with pytest.raises(AmpError) as info:
        compile_schema(bad, what="input schema")
    assert info.value.message.startswith("input schema does not compile: properties.b.type is 'intger', which is "
                                         "not a JSON Schema type (one of string, number, integer")


def test_remote_ref_is_not_fetched() -> None:
    v, d = setup({"$ref": "https://example.invalid/schema.json"})
    assert violation(v, d, {}).code == 5002


def test_draft_2020_12_keywords_are_enforced() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
              "prefixItems": [{"type": "integer"}], "items": False}
    assert compile_schema(schema).engine == "jsonschema-2020-12"
    v, d = setup(schema)
    v.validate_params(d, [1])
    err = violation(v, d, ["x"])
    assert err.code == 4004 and err.path == "params[0]"
    assert violation(v, d, [1, 2]).code == 4004


def test_output_validation_helper() -> None:
    v, d = setup(ADD_SCHEMA, {"type": "object", "required": ["sum"]})
    assert v.validate_result(d, {"sum": 3}) == []
    assert v.validate_result(d, {}) != []


def test_nested_path() -> None:
    v, d = setup({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}})
    err = violation(v, d, {"items": [1, "x"]})
    assert err.path == "params.items[1]"


def test_boolean_schemas() -> None:
    v, d = setup(True)
    v.validate_params(d, {"anything": 1})
    v2, d2 = setup(False, name="org.x.never")
    assert violation(v2, d2, {}).code == 4004


DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("draft", [None, DRAFT_2020])
@pytest.mark.parametrize(("items", "unique"), [
    ([1, 1.0], False),                                  # equal as JSON numbers
    ([1, True], True), ([0, False], True),              # a boolean is not a number
    ([{"x": 1, "y": 2}, {"y": 2, "x": 1}], False),      # member order does not matter
    ([[1, 2], [2, 1]], True),                           # element order does
    ([{"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}], False),
    (["1", 1, None, [], {}], True),
])
def test_unique_items_means_json_equality(draft: str | None, items: list[Any], unique: bool) -> None:
    schema = {"type": "array", "uniqueItems": True} | ({"$schema": draft} if draft else {})
    assert (compile_schema(schema).errors(items) == []) is unique


def test_unique_items_of_objects_is_not_pairwise(monkeypatch: pytest.MonkeyPatch) -> None:
    # jsonschema compares unsortable items pair by pair with equal(): 5,000
    # small objects (50 KB of params) held the event loop for about a minute.
    import jsonschema._utils

    calls = 0
    real = jsonschema._utils.equal

    def counting(one: Any, two: Any) -> bool:
        nonlocal calls
        calls += 1
        return real(one, two)

    monkeypatch.setattr(jsonschema._utils, "equal", counting)
    check = compile_schema({"$schema": DRAFT_2020, "type": "array", "uniqueItems": True})
    n = 2_000
    assert check.errors([{"k": i} for i in range(n)] + [1, True]) == []
    assert check.errors([{"k": i} for i in range(n)] + [{"k": 7}]) == ["result: fails 'uniqueItems'"]
    assert calls < n  # linear, not n²/2 = 2,000,000


def test_unique_items_with_values_json_cannot_compare_is_4004() -> None:
    import cbor2

    err = compile_schema({"type": "array", "uniqueItems": True}).errors([cbor2.CBORTag(1, {}), 1])
    assert err and "cannot check" in err[0]


@pytest.mark.parametrize(("schema", "good", "bad"), [
    ({"prefixItems": [{"type": "string"}], "contains": {"type": "integer"}, "unevaluatedItems": False},
     ["a", 1, 2], ["a", 1, 2.5]),
    ({"allOf": [{"patternProperties": {"^k": {}}}], "unevaluatedProperties": {"type": "integer"}},
     {"k1": "x", "z": 1}, {"k1": "x", "z": "y"}),
])
def test_unevaluated_keywords_keep_their_meaning_in_linear_time(schema: dict[str, Any], good: Any,
                                                                 bad: Any) -> None:
    import time

    check = compile_schema({"$schema": DRAFT_2020, **schema})
    assert check.errors(good) == []
    assert check.errors(bad) != []
    # A hang guard, not a speed target: jsonschema's own keywords test each
    # of n items against a list of n evaluated indexes or keys (about 30 s
    # here for 40,000); the set lookups take well under a second.
    n = 40_000
    big = ["a", *range(n)] if isinstance(good, list) else {"z": 1, **{f"k{i}": "x" for i in range(n)}}
    started = time.perf_counter()
    assert check.errors(big) == []
    assert time.perf_counter() - started < 10
