"""The R18 mapping as pure functions: names, clashes, versions, schemas, results, errors."""

from __future__ import annotations

import re

import pytest

from ampcap.caps.demo import demo_manifest
from ampcap.caps.semver import Range
from ampcap.errors import AmpError
from ampcap.mcp import tools

DEMO = [spec.descriptor for spec in demo_manifest().capabilities]


def test_tool_names_keep_dots_or_use_underscores() -> None:
    assert tools.tool_name("org.ampcap.demo.echo") == "org.ampcap.demo.echo"
    assert tools.tool_name("org.ampcap.demo.echo", underscore=True) == "org_ampcap_demo_echo"
    # Characters no MCP tool name may hold become _ in either mode.
    assert tools.tool_name("org.x/y z") == "org.x_y_z"
    assert tools.tool_name("org.x-y_z.1", underscore=True) == "org_x-y_z_1"


def test_long_names_are_cut_with_a_hash_suffix() -> None:
    long = "org." + "a" * 100
    name = tools.tool_name(long)
    assert len(name) == tools.MAX_TOOL_NAME
    assert re.fullmatch(r"org\.a+-[0-9a-f]{8}", name)
    other = tools.tool_name("org." + "a" * 99 + "b")
    assert other != name and other[:55] == name[:55]  # same prefix, told apart by the hash
    assert tools.tool_name("org." + "a" * 60) == "org." + "a" * 60  # 64 exactly: kept


def test_clashes_between_peers_go_to_the_later_peer_with_peerN() -> None:
    names = tools.assign_names([["org.x.a", "org.x.b"], ["org.x.b", "org.x.c"], ["org.x.b"]])
    assert names == {"org.x.a": (0, "org.x.a"), "org.x.b": (0, "org.x.b"), "org.x.c": (1, "org.x.c"),
                     "org.x.b.peer2": (1, "org.x.b"), "org.x.b.peer3": (2, "org.x.b")}
    under = tools.assign_names([["org.x.b"], ["org.x.b"]], underscore=True)
    assert under == {"org_x_b": (0, "org.x.b"), "org_x_b_peer2": (1, "org.x.b")}


def test_names_that_meet_after_underscoring_are_told_apart_deterministically() -> None:
    first = tools.assign_names([["org.x_y", "org.x.y"]], underscore=True)
    again = tools.assign_names([["org.x.y", "org.x_y"]], underscore=True)
    assert first == again and len(first) == 2
    assert first["org_x_y"] == (0, "org.x.y")  # by name: "." sorts before "_"
    assert all(len(n) <= tools.MAX_TOOL_NAME for n in first)


def test_newest_version_or_newest_inside_the_range() -> None:
    chosen = tools.choose(DEMO, {})
    assert str(chosen["org.ampcap.demo.echo"].version) == "2.0.0"
    ranged = tools.choose(DEMO, {"org.ampcap.demo.echo": Range.parse(">=1.0.0 <2.0.0")})
    assert str(ranged["org.ampcap.demo.echo"].version) == "1.1.0"
    none = tools.choose(DEMO, {"org.ampcap.demo.echo": Range.parse(">=3.0.0")})
    assert "org.ampcap.demo.echo" not in none and "org.ampcap.demo.sleep" in none


def test_schemas() -> None:
    params = {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}
    assert tools.input_schema_for(params) == params
    assert tools.input_schema_for({"properties": {}}) == {"properties": {}, "type": "object"}
    assert tools.input_schema_for(None) == {"type": "object"}  # not available locally: the peer validates
    assert tools.input_schema_for({"type": "array"}) == {"type": "object"}
    assert tools.output_schema_for({"type": "object"}) == {"type": "object"}
    assert tools.output_schema_for({"type": "null"}) is None
    assert tools.output_schema_for(None) is None


@pytest.mark.parametrize(("result", "structured", "text"), [
    ({"sum": 3}, {"sum": 3}, '{"sum": 3}'),
    (None, {"result": None}, "null"),
    ([1, "é"], {"result": [1, "é"]}, '[1, "é"]'),
    ({"b": b"\x01"}, {"b": {"$bytes": "01"}}, '{"b": {"$bytes": "01"}}'),
])
def test_results_are_structured_content_plus_the_same_json(result: object, structured: object, text: str) -> None:
    assert tools.result_content(result) == (structured, text)


def test_failures_read_code_name_message() -> None:
    assert tools.error_text(AmpError(4004, "params.a: must be number")) == "4004 SCHEMA_VIOLATION: params.a: must be number"
    assert tools.error_text(AmpError(5002, "down")) == "5002 UNAVAILABLE: down"
