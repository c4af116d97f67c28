"""Deterministic CBOR: RFC 8949 §4.2.1 ordering and the strict decoder's limits."""

from __future__ import annotations

import math

import cbor2
import pytest

from ampcap.errors import AmpError
from ampcap.wire.cbor import DEFAULT_LIMITS, CBORTag, DecodeLimits, check_well_formed, dumps, loads, plain_integers


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# ----------------------------------------------------------------- encoding


def test_integer_keys_sort_by_encoded_bytes_not_length_first() -> None:
    # 10 → 0a, 100 → 1864, -1 → 20: bytewise order is 10, 100, -1 (R1).
    assert dumps({-1: "c", 100: "b", 10: "a"}) == h("a3" "0a6161" "18646162" "206163")
    # cbor2's canonical mode would have put -1 before 100.
    assert cbor2.dumps({-1: "c", 100: "b", 10: "a"}, canonical=True) != dumps({-1: "c", 100: "b", 10: "a"})


def test_nested_maps_with_int_keys_inside_text_maps() -> None:
    value = {"outer": [{100: 1, -1: 2, 10: 3}], "a": 1}
    assert dumps(value) == h("a2" "616101" "656f75746572" "81" "a3" "0a03" "186401" "2002")


def test_mixed_key_types_sort_by_encoding() -> None:
    # 0x01 (int 1) < 0x41.. (bytes) < 0x61.. (text)
    assert dumps({"a": 0, b"a": 0, 1: 0}) == h("a3" "0100" "416100" "616100")


def test_text_keys_shorter_first_then_bytewise() -> None:
    assert dumps({"bb": 1, "a": 2, "ab": 3}) == h("a3" "616102" "62616203" "62626201")


def test_shortest_integers_and_floats() -> None:
    assert dumps(23) == h("17")
    assert dumps(24) == h("1818")
    assert dumps(-25) == h("3818")
    assert dumps(1.5) == h("f93e00")
    assert dumps(100000.0) == h("fa47c35000")
    assert dumps(0.1) == h("fb3fb999999999999a")
    # the slow path (non-text keys) shortens floats too
    assert dumps({1: 1.5, 2: math.inf, 3: float("nan")}) == h("a3" "01f93e00" "02f97c00" "03f97e00")


def test_no_indefinite_lengths_in_output() -> None:
    out = dumps({"list": list(range(30)), "s": "x" * 100, 5: b"y" * 300})
    assert check_well_formed(out, require_deterministic=True) > 0


def test_unencodable_values_raise_amp_error() -> None:
    with pytest.raises(AmpError) as info:
        dumps({"a": object()})
    assert info.value.code == 1001


# ----------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    "hex_data, why",
    [
        ("a201010102", "duplicate int key"),
        ("a2616101616102", "duplicate text key"),
        ("9f01ff", "indefinite array"),
        ("5f4101ff", "indefinite byte string"),
        ("bf616101ff", "indefinite map"),
        ("0101", "trailing bytes"),
        ("", "empty"),
        ("5b7fffffffffffffff", "huge declared byte string"),
        ("9b7fffffffffffffff00", "huge declared array"),
        ("bb7fffffffffffffff", "huge declared map"),
        ("83", "truncated array"),
        ("1c", "reserved additional info"),
        ("62ff41", "invalid utf-8"),
        ("c0c001", "bad tag content is still well-formed, but not a map" ),
    ],
)
def test_malformed_inputs_are_1001(hex_data: str, why: str) -> None:
    if why.startswith("bad tag"):
        # Tags come back as plain CBORTag values; nothing is interpreted.
        assert loads(h(hex_data)) == CBORTag(0, CBORTag(0, 1))
        return
    with pytest.raises(AmpError) as info:
        loads(h(hex_data))
    assert info.value.code == 1001, why


def test_tags_are_not_interpreted() -> None:
    assert loads(h("c074323031332d30332d32315432303a30343a30305a")) == CBORTag(0, "2013-03-21T20:04:00Z")
    assert loads(h("c249010000000000000000")) == CBORTag(2, h("010000000000000000"))
    # tags 28/29 (value sharing) must not build shared or cyclic structures
    assert loads(h("d81c81d81d00")) == CBORTag(28, [CBORTag(29, 0)])


def test_depth_limit() -> None:
    limits = DecodeLimits(max_depth=3)
    assert loads(h("81818101"), limits) == [[[1]]]
    with pytest.raises(AmpError) as info:
        loads(h("8181818101"), limits)
    assert info.value.code == 1001
    with pytest.raises(AmpError):
        loads(b"\x81" * 100_000 + b"\x01", DecodeLimits(max_bytes=1 << 20, max_items=1 << 20))


def test_items_limit() -> None:
    limits = DecodeLimits(max_items=10)
    assert loads(dumps(list(range(9))), limits) == list(range(9))  # 10 items: the array and 9 ints
    with pytest.raises(AmpError) as info:
        loads(dumps(list(range(10))), limits)
    assert info.value.code == 1001
    # maps count keys and values
    with pytest.raises(AmpError):
        loads(dumps({i: i for i in range(5)}), limits)


def test_bytes_limit() -> None:
    data = dumps(b"x" * 100)
    assert loads(data, DecodeLimits(max_bytes=len(data))) == b"x" * 100
    with pytest.raises(AmpError) as info:
        loads(data, DecodeLimits(max_bytes=len(data) - 1))
    assert info.value.code == 1001


def test_require_deterministic_rejects_non_shortest_and_unsorted() -> None:
    assert loads(h("1801")) == 1  # accepted by default
    for bad in ("1801", "190001", "a2616201616101", "fa3fc00000", "fb3ff8000000000000", "5801ff"):
        with pytest.raises(AmpError):
            loads(h(bad), require_deterministic=True)
    assert loads(h("a2616101616202"), require_deterministic=True) == {"a": 1, "b": 2}


def test_non_bytes_input() -> None:
    assert loads(bytearray(h("01"))) == 1
    assert loads(memoryview(h("01"))) == 1
    with pytest.raises(AmpError):
        loads("01")  # type: ignore[arg-type]


def test_decoder_is_reusable_after_errors() -> None:
    for _ in range(3):
        with pytest.raises(AmpError):
            loads(h("a201010102"))
        assert loads(h("a10102")) == {1: 2}


def test_round_trip_of_plain_values() -> None:
    value = {"a": [1, -2, b"\x00", None, True, False, 1.5, "é"], 7: {"x": {-3: []}}}
    assert loads(dumps(value)) == value
    assert dumps(loads(dumps(value))) == dumps(value)


def test_default_limits_are_sane() -> None:
    assert DEFAULT_LIMITS.max_bytes >= 1 << 20
    assert DEFAULT_LIMITS.max_depth >= 16


# ------------------------------------------------- bignums for application code


def test_bignums_become_ints_for_the_application() -> None:
    big, neg = 2**70, -(2**70) - 5
    decoded = loads(dumps({"a": big, "b": [1, {"c": neg}], "d": "x"}))
    assert decoded["a"] == CBORTag(2, big.to_bytes(9, "big"))  # the wire value stays tagged
    assert plain_integers(decoded) == {"a": big, "b": [1, {"c": neg}], "d": "x"}
    assert plain_integers(CBORTag(3, b"\x00")) == -1


def test_a_value_without_bignums_comes_back_as_the_same_object() -> None:
    value = loads(dumps({"a": 1, "b": [1.5, "x", b"y", None, True], "t": CBORTag(1, 10)}))
    assert plain_integers(value) is value


def test_other_tags_oversized_bignums_and_keys_stay_as_they_are() -> None:
    huge = CBORTag(2, b"\x01" + bytes(128))  # 129 bytes: its decimal form is past Python's digit limit
    inner = CBORTag(1, CBORTag(2, b"\x01\x00"))  # a bignum inside another tag is that tag's business
    odd = CBORTag(2, "not bytes")
    value = {"huge": huge, "inner": inner, "odd": odd, "ok": CBORTag(2, b"\x01\x00")}
    assert plain_integers(value) == {"huge": huge, "inner": inner, "odd": odd, "ok": 256}


# --- max_depth: what we send is what our own decoder takes -----------------

def _lists(n: int, leaf: object = 0) -> object:
    for _ in range(n):
        leaf = [leaf]
    return leaf


def _maps(n: int, leaf: object = 0) -> object:
    for _ in range(n):
        leaf = {"a": leaf}
    return leaf


def _tags(n: int, leaf: object = 0) -> object:
    for _ in range(n):
        leaf = CBORTag(1000, leaf)
    return leaf


def _mixed(n: int, leaf: object = 0) -> object:  # non-text keys: the slow path
    for _ in range(n):
        leaf = {1: leaf, "b": 2}
    return leaf


@pytest.mark.parametrize("make", [_lists, _maps, _tags, _mixed])
@pytest.mark.parametrize("leaf", [0, [], {}, [1], {"x": 1}, "s", 1.5])
@pytest.mark.parametrize("depth", [DEFAULT_LIMITS.max_depth - 2, DEFAULT_LIMITS.max_depth - 1,
                                   DEFAULT_LIMITS.max_depth, DEFAULT_LIMITS.max_depth + 1])
def test_dumps_with_max_depth_refuses_exactly_what_loads_refuses(make, leaf, depth) -> None:  # type: ignore[no-untyped-def]
    from ampcap.wire.cbor import TooDeep

    value = make(depth, leaf)
    encoded = dumps(value)  # no limit: as before
    try:
        loads(encoded)
        decodable = True
    except AmpError:
        decodable = False
    if decodable:
        assert dumps(value, max_depth=DEFAULT_LIMITS.max_depth) == encoded
    else:
        with pytest.raises(TooDeep) as info:
            dumps(value, max_depth=DEFAULT_LIMITS.max_depth)
        assert info.value.code == 1001 and "deeper than 32 levels" in info.value.message


def test_dumps_max_depth_counts_sets_as_their_tag() -> None:
    from ampcap.wire.cbor import TooDeep

    value = _lists(DEFAULT_LIMITS.max_depth - 1, frozenset({1}))  # tag 258 + array at levels 32, 33
    with pytest.raises(AmpError):
        loads(dumps(value))
    with pytest.raises(TooDeep):
        dumps(value, max_depth=DEFAULT_LIMITS.max_depth)


def test_a_body_too_deep_for_the_receiver_is_refused_when_sealed() -> None:
    # The receiver decodes the whole envelope with max_depth 32; its map is
    # the first level, so a body may nest 31. Before, a 32-deep body was sent,
    # the daemon could not decode it, and the caller heard only "connection
    # closed before the reply".
    import os

    from ampcap.wire.cbor import TooDeep
    from ampcap.wire.envelope import BODY_MAX_DEPTH, decode_envelope, seal
    from ampcap.wire.identity import Identity

    identity = Identity.generate(os.urandom)
    _, wire = seal(identity, typ=0x20, to="did:key:z6Mk", body=_maps(BODY_MAX_DEPTH), now_ms=1, entropy=os.urandom)
    assert decode_envelope(wire).body == _maps(BODY_MAX_DEPTH)
    with pytest.raises(TooDeep):
        seal(identity, typ=0x20, to="did:key:z6Mk", body=_maps(BODY_MAX_DEPTH + 1), now_ms=1, entropy=os.urandom)
