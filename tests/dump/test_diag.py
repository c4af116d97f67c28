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


def test_json_view_keeps_every_entry_when_keys_read_alike() -> None:
    # 1 and "1", h'01' and "h'01'": distinct CBOR keys, one JSON spelling each.
    assert to_json_value({1: "int", "1": "text", "a": 0}) == {"1": "int", '"1"': "text", "a": 0}
    assert to_json_value({b"\x01": 1, "h'01'": 2}) == {"h'01'": 1, "\"h'01'\"": 2}


def test_json_view_shows_bignums_as_integers_up_to_1024_bits() -> None:
    assert to_json_value(loads(cbor2.dumps(2**70))) == 2**70
    assert to_json_value(loads(cbor2.dumps(-(2**70)))) == -(2**70)
    huge = cbor2.CBORTag(2, b"\x01" * 2000)  # would print as 4,800 digits
    assert to_json_value(huge) == {"$tag": 2, "value": {"$bytes": "01" * 2000}}


def test_text_never_carries_terminal_controls() -> None:
    # C0 is escaped by JSON itself; DEL, C1 (U+009B is a one-character CSI)
    # and bidi overrides are escaped too, so the dump cannot drive a terminal.
    shown = diag("a\x1b[2Jb\x7f\x9b31m\u202egnp.exe")
    assert shown == '"a\\u001b[2Jb\\u007f\\u009b31m\\u202egnp.exe"'
    assert json.loads(shown) == "a\x1b[2Jb\x7f\x9b31m\u202egnp.exe"


_KEYS = st.text(max_size=5) | st.integers(-(2**64) + 1, 2**64 - 1) | st.binary(max_size=3)


@given(st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20))
def test_any_decoded_value_renders(value: object) -> None:
    decoded = loads(cbor2.dumps(value))
    assert isinstance(diag(decoded), str)
    view = to_json_value(decoded)
    json.dumps(view, allow_nan=False)
    if isinstance(decoded, dict):
        assert len(view) == len(decoded)  # no entry lost to a key that reads alike
