"""Strict CBOR decoding for AMP: :func:`loads`, the head scanner
:func:`check_well_formed`, and :func:`plain_integers` for what crosses into
application code.

cbor2 6 already refuses indefinite lengths and duplicate keys when asked,
bounds nesting, and never allocates a declared length up front. What it does
not do is refuse trailing bytes or count items; :func:`loads` decodes through
a reused :class:`cbor2.CBORDecoder` so the stream position tells us whether
bytes are left over, and runs a small pure-Python head scanner only when the
input is long enough to hold more items than allowed (each item needs at
least one byte) or when the caller asks for strict deterministic form.
Semantic tags come back as plain :class:`cbor2.CBORTag` values: cbor2's own
tag decoders would turn bytes into datetimes or, worse, build shared (cyclic)
structures from tags 28/29.

The encoder is :mod:`.encode`; the two share nothing but cbor2.
"""

from __future__ import annotations

import io
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import cbor2

from ...errors import AmpError

__all__ = [
    "MAX_BIGNUM_BYTES",
    "DecodeLimits",
    "DEFAULT_LIMITS",
    "loads",
    "check_well_formed",
    "plain_integers",
    "CBORTag",
]

CBORTag = cbor2.CBORTag
_INVALID = 1001


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Bounds on what :func:`loads` accepts.

    ``max_depth`` counts nested containers (a top-level map is depth 1),
    ``max_items`` counts every data item including map keys, and ``max_bytes``
    bounds the input length.
    """

    max_depth: int = 32
    max_items: int = 65_536
    # RFC 002 §3.2's recommended frame maximum, which a daemon offers by
    # default: a message the transport admits must not fail here.
    max_bytes: int = 16 << 20


DEFAULT_LIMITS = DecodeLimits()


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


def _plain_tag(tag: int) -> Any:
    def decode(value: Any, immutable: bool) -> CBORTag:
        return CBORTag(tag, value)

    return decode


# Every tag cbor2 knows how to interpret, mapped back to a plain CBORTag.
_CBOR2_SEMANTIC_TAGS = (
    0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261,
    1004, 55799,
)
_SEMANTIC_DECODERS = {tag: _plain_tag(tag) for tag in _CBOR2_SEMANTIC_TAGS}
_local = threading.local()


def _decoder(max_depth: int) -> Any:
    """A cbor2 decoder for this thread, reused between calls (creating one costs
    about as much as decoding a small envelope)."""
    cache: dict[int, Any] | None = getattr(_local, "decoders", None)
    if cache is None:
        cache = _local.decoders = {}
    dec = cache.get(max_depth)
    if dec is None:
        dec = cbor2.CBORDecoder(
            io.BytesIO(b""),
            semantic_decoders=_SEMANTIC_DECODERS,
            max_depth=max_depth,
            allow_indefinite=False,
            allow_duplicate_keys=False,
        )
        cache[max_depth] = dec
    return dec


def loads(data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS, *,
          require_deterministic: bool = False) -> Any:
    """Strictly decode exactly one CBOR data item; every fault is ``AmpError(1001)``.

    With ``require_deterministic`` the input must also use shortest integer,
    length and float forms and sorted map keys (RFC 8949 §4.2.1).
    """
    if not isinstance(data, bytes):
        if not isinstance(data, (bytearray, memoryview)):
            raise AmpError(_INVALID, f"CBOR input must be bytes, not {type(data).__name__}")
        data = bytes(data)
    size = len(data)
    if size > limits.max_bytes:
        raise AmpError(_INVALID, f"CBOR data is {size} bytes, limit is {limits.max_bytes}")
    if size == 0:
        raise AmpError(_INVALID, "empty input where a CBOR item was expected")
    if require_deterministic or size > limits.max_items:
        check_well_formed(data, limits, require_deterministic=require_deterministic)
    stream = io.BytesIO(data)
    dec = _decoder(limits.max_depth)
    dec.fp = stream
    try:
        value = dec.decode()
    except RecursionError as exc:  # pragma: no cover - cbor2 bounds depth itself
        raise AmpError(_INVALID, "CBOR nesting too deep") from exc
    except Exception as exc:  # cbor2 raises CBORDecodeError, but also ValueError/TypeError on odd input
        raise AmpError(_INVALID, f"malformed CBOR: {_reason(exc)}") from exc
    finally:
        dec.fp = _EMPTY_STREAM
    if stream.tell() != size:
        raise AmpError(_INVALID, f"{size - stream.tell()} trailing bytes after the CBOR item")
    return value


_EMPTY_STREAM = io.BytesIO(b"")


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "maximum recursion" in text or "depth" in text:
        return "nesting deeper than allowed"
    return text or type(exc).__name__


# --------------------------------------------------------------------------
# Bignums for the application
# --------------------------------------------------------------------------
# loads() keeps tags 2 and 3 as CBORTag so a message re-encodes to exactly the
# bytes that were signed. In the CBOR data model a bignum *is* an integer
# (RFC 8949 §3.4.3), and cbor2 writes any Python int beyond 64 bits as one, so
# what crosses into application code (a capability's params, the result a
# caller gets) turns them back into ints: 2**70 sent is 2**70 received, and a
# JSON Schema "integer" accepts it. Bignums over 128 bytes (1024 bits) stay
# tagged, as in the dump's diagnostic view: their decimal form alone would
# pass Python's int-to-str digit limit.

MAX_BIGNUM_BYTES = 128
_LEAVES = frozenset((str, int, bytes, bool, type(None), float))


def plain_integers(value: Any) -> Any:
    """``value`` with every bignum (tag 2 or 3 over at most 128 bytes) inside
    maps and arrays as a Python ``int``. Without one, ``value`` itself comes
    back, not a copy (the usual case costs one walk and no allocation). Map
    keys and other tags' contents are left as they are."""
    return _with_ints(value) if _has_bignum(value) else value


def _is_bignum(value: Any) -> bool:
    return (type(value) is CBORTag and value.tag in (2, 3) and type(value.value) is bytes
            and len(value.value) <= MAX_BIGNUM_BYTES)


def _has_bignum(value: Any) -> bool:
    t = type(value)
    if t is dict:
        items: Iterable[Any] = value.values()
    elif t is list or t is tuple:
        items = value
    else:
        return _is_bignum(value)
    for item in items:
        if type(item) not in _LEAVES and _has_bignum(item):
            return True
    return False


def _with_ints(value: Any) -> Any:
    t = type(value)
    if t is dict:
        return {k: _with_ints(v) for k, v in value.items()}
    if t is list:
        return [_with_ints(v) for v in value]
    if t is tuple:
        return tuple(_with_ints(v) for v in value)
    if _is_bignum(value):
        n = int.from_bytes(value.value, "big")
        return n if value.tag == 2 else -1 - n
    return value


# --------------------------------------------------------------------------
# Head scanner: well-formedness, limits and (optionally) deterministic form,
# without building any Python values.
# --------------------------------------------------------------------------

# Smallest argument that needs each head width; anything below fits a shorter head.
_SHORTEST_LIMIT = {24: 24, 25: 0x100, 26: 0x10000, 27: 0x100000000}


def check_well_formed(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS, *,
                      require_deterministic: bool = False) -> int:
    """Walk the item heads of ``data``; return the number of items.

    Raises ``AmpError(1001)`` for truncation, indefinite lengths, reserved
    additional-info values, trailing bytes, and anything over ``limits``; with
    ``require_deterministic`` also for non-shortest heads and floats, and map
    keys out of RFC 8949 order. Byte and text strings are skipped in O(1).
    """
    size = len(data)
    max_items = limits.max_items
    max_depth = limits.max_depth
    items = 0
    pos = 0
    # Stack of remaining-item counters for open containers; map entries count twice.
    # For deterministic checks we also keep, per open map, the previous key span.
    stack: list[list[Any]] = []
    remaining_top = 1
    while True:
        if stack:
            frame = stack[-1]
            if frame[0] == 0:
                stack.pop()
                continue
            frame[0] -= 1
            key_start = pos if (frame[1] and frame[0] % 2 == 1) else -1
        else:
            if remaining_top == 0:
                break
            remaining_top -= 1
            frame = None
            key_start = -1
        if pos >= size:
            raise AmpError(_INVALID, "truncated CBOR item")
        initial = data[pos]
        major = initial >> 5
        info = initial & 0x1F
        pos += 1
        items += 1
        if items > max_items:
            raise AmpError(_INVALID, f"more than {max_items} CBOR items")
        if info < 24:
            arg = info
        elif info <= 27:
            width = 1 << (info - 24)
            if pos + width > size:
                raise AmpError(_INVALID, "truncated CBOR head")
            arg = int.from_bytes(data[pos:pos + width], "big")
            pos += width
            # (major 7 heads are floats and simple values, checked below)
            if require_deterministic and major != 7 and arg < _SHORTEST_LIMIT[info]:
                raise AmpError(_INVALID, "non-shortest CBOR integer or length encoding")
        elif info == 31:
            raise AmpError(_INVALID, "indefinite-length CBOR item")
        else:
            raise AmpError(_INVALID, f"reserved CBOR additional information {info}")
        if major == 2 or major == 3:
            if arg > size - pos:
                raise AmpError(_INVALID, "CBOR string length exceeds the data")
            pos += arg
        elif major == 4 or major == 5:
            count = arg if major == 4 else arg * 2
            if count > size - pos:  # every item needs at least one byte
                raise AmpError(_INVALID, "CBOR container length exceeds the data")
            if len(stack) + 1 > max_depth:
                raise AmpError(_INVALID, f"CBOR nesting deeper than {max_depth}")
            if count:
                stack.append([count, major == 5 and require_deterministic, None])
        elif major == 6:
            # A tag is followed by exactly one item: model it as a 1-item container.
            if len(stack) + 1 > max_depth:
                raise AmpError(_INVALID, f"CBOR nesting deeper than {max_depth}")
            stack.append([1, False, None])
        elif major == 7:
            if info == 24 and arg < 32:
                raise AmpError(_INVALID, "invalid two-byte CBOR simple value")
            if require_deterministic and info in (25, 26, 27):
                width = 1 << (info - 24)
                raw = data[pos - width:pos]
                if not _float_is_shortest(info, raw):
                    raise AmpError(_INVALID, "non-shortest CBOR float encoding")
        if key_start >= 0 and frame is not None:
            # Finish skipping the key item so its full encoding can be compared.
            key_end = _skip_item(data, key_start, size)
            previous = frame[2]
            key_bytes = data[key_start:key_end]
            if previous is not None and key_bytes <= previous:
                raise AmpError(_INVALID, "CBOR map keys out of deterministic order or duplicated")
            frame[2] = key_bytes
    if pos != size:
        raise AmpError(_INVALID, f"{size - pos} trailing bytes after the CBOR item")
    return items


def _skip_item(data: bytes, pos: int, size: int) -> int:
    """End offset of the (already well-formed-so-far) item at ``pos``."""
    pending = 1
    while pending:
        pending -= 1
        if pos >= size:
            raise AmpError(_INVALID, "truncated CBOR item")
        initial = data[pos]
        major = initial >> 5
        info = initial & 0x1F
        pos += 1
        if info < 24:
            arg = info
        elif info <= 27:
            width = 1 << (info - 24)
            if pos + width > size:
                raise AmpError(_INVALID, "truncated CBOR head")
            arg = int.from_bytes(data[pos:pos + width], "big")
            pos += width
        else:
            raise AmpError(_INVALID, "indefinite or reserved CBOR item")
        if major == 2 or major == 3:
            pos += arg
        elif major == 4:
            pending += arg
        elif major == 5:
            pending += 2 * arg
        elif major == 6:
            pending += 1
        if pos > size or pending > size - pos + 1:
            raise AmpError(_INVALID, "CBOR length exceeds the data")
    return pos


def _float_is_shortest(info: int, raw: bytes) -> bool:
    if info == 25:
        return True
    value = struct.unpack(">f" if info == 26 else ">d", raw)[0]
    if value != value:
        return False  # NaN must be the half-precision form
    try:
        if struct.unpack(">e", struct.pack(">e", value))[0] == value:
            return False
    except OverflowError:
        pass
    if info == 27:
        try:
            if struct.unpack(">f", struct.pack(">f", value))[0] == value:
                return False
        except OverflowError:
            pass
    return True
