"""The COSE_Sign1 reader's shortcut for the usual shape must agree with the
CBOR decoder on every input it takes, and leave every other input to it;
the hand-written Sig_structure must be the bytes dumps() writes."""

from __future__ import annotations

import os
import random

import pytest

from ampcap.deleg.cose import _decoded_sign1, _sig_structure, _usual_sign1, decode_sign1, sign1
from ampcap.errors import AmpError
from ampcap.wire.cbor import CBORTag, dumps
from ampcap.wire.identity import Identity

SIGNER = Identity.generate(os.urandom)
USUAL = sign1(SIGNER, dumps({"cred_v": 1, "delegation_id": "x"}))


def _same(data: bytes) -> None:
    """Whatever the shortcut returns, the decoder returns too."""
    fast = _usual_sign1(data)
    if fast is None:
        return
    assert fast == _decoded_sign1(data, "credential")


def _head(major: int, n: int, width: int) -> bytes:
    # a head of the given width (0: in the first byte), shortest or not
    if width == 0:
        return bytes([(major << 5) | n])
    return bytes([(major << 5) | {1: 24, 2: 25, 4: 26, 8: 27}[width]]) + n.to_bytes(width, "big")


def test_usual_shape_is_read_directly() -> None:
    parts = _usual_sign1(USUAL)
    assert parts is not None and parts == _decoded_sign1(USUAL, "credential")


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_longer_heads_read_as_the_decoder_reads_them(width: int) -> None:
    protected, payload, signature = _decoded_sign1(USUAL, "credential")
    data = (b"\xd2\x84" + _head(2, len(protected), width) + protected + b"\xa0"
            + _head(2, len(payload), width) + payload + _head(2, 64, width) + signature)
    assert _usual_sign1(data) == (protected, payload, signature)
    _same(data)


@pytest.mark.parametrize("data", [
    dumps([b"\xa1\x01\x27", {}, b"p", b"s" * 64]),  # untagged
    dumps(CBORTag(18, [b"\xa1\x01\x27", {4: b"k"}, b"p", b"s" * 64])),  # unprotected header not empty
    dumps(CBORTag(18, [b"\xa1\x01\x27", {}, None, b"s" * 64])),  # detached payload
    dumps(CBORTag(17, [b"\xa1\x01\x27", {}, b"p", b"s" * 64])),  # another tag
    USUAL + b"\x00",  # trailing bytes
    b"\xd2\x84\x5f\x41\x00\xff\xa0\x41p\x41s",  # indefinite byte string
    b"\xd2\x84\x5c\x00",  # reserved additional information
    b"\xd2\x84\x5b" + b"\xff" * 8,  # a length past the end
])
def test_other_shapes_go_to_the_decoder(data: bytes) -> None:
    assert _usual_sign1(data) is None


def test_truncations_and_mutations_agree_with_the_decoder() -> None:
    rng = random.Random(5)
    for cut in range(len(USUAL)):
        _same(USUAL[:cut])
    for _ in range(3000):
        data = bytearray(USUAL)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        _same(bytes(data))


def test_decode_sign1_outcome_does_not_depend_on_the_shortcut() -> None:
    # An input the shortcut refuses gets the decoder's error, unchanged.
    with pytest.raises(AmpError) as err:
        decode_sign1(USUAL + b"\x00")
    assert err.value.code == 1001


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 65535, 65536])
def test_sig_structure_is_what_dumps_writes(n: int) -> None:
    protected, payload = os.urandom(n % 300), os.urandom(n)
    assert _sig_structure(protected, payload) == dumps(["Signature1", protected, b"", payload])
