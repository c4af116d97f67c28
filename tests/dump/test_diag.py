"""CBOR diagnostic notation and the JSON view of decoded values."""

from __future__ import annotations

import json
import math

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampcap.dump.diag import diag, to_json_value
from ampcap.wire.cbor import loads


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"), (True, "true"), (False, "false"), (0, "0"), (-17, "-17"),
        (1.5, "1.5"), (1.0, "1.0"), (1e300, "1e+300"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
        (math.nan, "NaN"), ("a\"b", '"a\\"b"'), ("é", '"é"'), (b"", "h''"), (b"\x01\xff", "h'01ff'"),
        ([], "[]"), ({}, "{}"), ({"a": [1, {"b": None}]}, '{"a": [1, {"b": null}]}'),
        ({1: "x", -1: b"\x00"}, "{1: \"x\", -1: h'00'}"),
        (cbor2.CBORTag(1, 1700000000), "1(1700000000)"),
        (cbor2.CBORSimpleValue(99), "simple(99)"),
    ],
)
def test_diag(value: object, text: str) -> None:
    assert diag(value) == text


def test_long_bytes_and_text_are_shortened_with_length() -> None:
    assert diag(bytes(100), max_bytes=4) == "h'00000000…' (100 bytes)"
    assert diag(bytes(100), max_bytes=0) == "h'" + "00" * 100 + "'"
    assert diag("x" * 10, max_text=3) == '"xxx"… (10 chars)'


def test_json_view() -> None:
    value = {"b": b"\x01", 3: [1.5, math.inf], "t": cbor2.CBORTag(32, "u")}
    assert to_json_value(value) == {"b": {"$bytes": "01"}, "3": [1.5, "Infinity"],
                                    "t": {"$tag": 32, "value": "u"}}
    json.dumps(to_json_value(value), allow_nan=False)


@given(st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64) + 1, 2**64 - 1) | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20))
def test_any_decoded_value_renders(value: object) -> None:
    decoded = loads(cbor2.dumps(value))
    assert isinstance(diag(decoded), str)
    json.dumps(to_json_value(decoded), allow_nan=False)
