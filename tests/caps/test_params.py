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
