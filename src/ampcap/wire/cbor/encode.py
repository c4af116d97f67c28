"""Deterministic CBOR encoding for AMP (RFC 8949 §4.2.1, ruling R1) on top
of cbor2: :func:`dumps`, and the single items the envelope and Sig_Input
are assembled from byte by byte.

RFC 8949 sorts map keys by the bytes of their encoding and wants the
shortest float that keeps the value. cbor2's ``canonical=True`` does both
but sorts length-first (RFC 7049 §3.9), which is wrong for integer and
mixed keys (``{10, -1, 100}`` must come out 10, 100, -1), and it re-encodes
every key to sort it, which makes it slow. :func:`dumps` instead walks the
value once in Python, reorders the maps that are out of order (text keys:
shorter first, then by code point, which equals UTF-8 byte order; other
keys: by their full encoding), pre-encodes floats, and hands the result to
cbor2's plain encoder. That walk is only needed for maps with non-text
keys: a cheap first pass (:func:`_classify`) sends values whose maps are
already in order and hold no floats (typically a body just decoded from a
deterministic message) to cbor2's fast plain encoder, and other all-text
values to cbor2's canonical mode, which is exact for text keys.

The decoder is :mod:`.decode`; the two share nothing but cbor2.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import cbor2

from ...errors import AmpError

__all__ = [
    "UINT64_MAX",
    "TooDeep",
    "dumps",
    "dumps_in_order",
    "RawCBOR",
    "write_raw",
    "head",
    "uint_item",
    "bytes_item",
    "text_item",
]

CBORTag = cbor2.CBORTag
_INVALID = 1001


# --------------------------------------------------------------------------
# Single items, written byte by byte
# --------------------------------------------------------------------------
# Sig_Input and the envelope are maps with fixed text keys, so their
# deterministic layout is static: they are assembled from these pieces with
# no generic encoder call on the hot path (see signing.py and envelope.py).

UINT64_MAX = (1 << 64) - 1  # the largest unsigned integer a CBOR head holds (a wire uint)
_SMALL_HEADS = [[bytes(((major << 5) | n,)) for n in range(24)] for major in range(8)]


def head(major: int, n: int) -> bytes:
    """The shortest CBOR head of ``major`` type with argument ``n``."""
    if n < 24:
        return _SMALL_HEADS[major][n]
    if n < 0x100:
        return bytes(((major << 5) | 24, n))
    if n < 0x10000:
        return bytes(((major << 5) | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes(((major << 5) | 26,)) + n.to_bytes(4, "big")
    return bytes(((major << 5) | 27,)) + n.to_bytes(8, "big")


def uint_item(n: int) -> bytes:
    """An unsigned integer (major type 0); 1001 outside 0..2**64-1."""
    if n < 24:
        if n < 0:
            raise AmpError(_INVALID, f"{n} is not an unsigned integer")
        return _SMALL_HEADS[0][n]
    if n > UINT64_MAX:
        raise AmpError(_INVALID, f"{n} does not fit in 64 bits")
    return head(0, n)


def bytes_item(value: bytes) -> bytes:
    """A byte string (major type 2)."""
    n = len(value)
    return (_SMALL_HEADS[2][n] if n < 24 else head(2, n)) + value


_TEXT_CACHE: dict[str, bytes] = {}
_TEXT_CACHE_SIZE = 1024
_TEXT_CACHE_MAX_LEN = 256  # DIDs are ~60 characters; longer text is not worth keeping


def text_item(value: str) -> bytes:
    """A text string (major type 3). DIDs repeat from message to message, so
    short encodings are remembered (a bounded cache, cleared when full)."""
    encoded = _TEXT_CACHE.get(value)
    if encoded is None:
        raw = value.encode("utf-8")
        encoded = head(3, len(raw)) + raw
        if len(value) <= _TEXT_CACHE_MAX_LEN:
            if len(_TEXT_CACHE) >= _TEXT_CACHE_SIZE:
                _TEXT_CACHE.clear()
            _TEXT_CACHE[value] = encoded
    return encoded


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


class RawCBOR:
    """Already-encoded CBOR, written verbatim by :func:`dumps` (via cbor2's
    ``default`` hook, which costs nothing for values that do not use it)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"RawCBOR({self.data.hex()})"


def write_raw(encoder: Any, value: Any) -> None:
    """cbor2 ``default`` hook that writes :class:`RawCBOR` values verbatim."""
    if type(value) is RawCBOR:
        encoder.write(value.data)
        return
    raise cbor2.CBOREncodeTypeError(f"cannot encode {type(value).__name__} as CBOR")


def _float_bytes(value: float) -> bytes:
    """Preferred serialization of a float (RFC 8949 §4.2.2): the shortest of
    half/single/double that keeps the value; NaN as the half-precision quiet NaN."""
    if value != value:
        return b"\xf9\x7e\x00"
    for fmt, head in ((">e", b"\xf9"), (">f", b"\xfa")):
        try:
            packed = struct.pack(fmt, value)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == value:
            return head + packed
    return b"\xfb" + struct.pack(">d", value)


def _prepare(obj: Any) -> Any:
    """``obj`` rewritten (only where needed) so that cbor2's plain encoder,
    which writes maps in iteration order and floats at full width, produces
    the deterministic encoding: maps reordered, floats pre-encoded.

    Values that are already in order and hold no floats come back as the very
    same objects, so a message decoded from deterministic bytes costs one walk
    and no copies when it is re-encoded for its signature.
    """
    t = type(obj)
    if t is dict:
        return _prepare_map(obj)
    if t is list or t is tuple:
        out = None
        for i, v in enumerate(obj):
            tv = type(v)
            if tv is str or tv is int or tv is bytes or v is None or tv is bool:
                continue
            nv = _prepare(v)
            if nv is not v:
                if out is None:
                    out = list(obj)
                out[i] = nv
        return obj if out is None else out
    if t is float:
        return RawCBOR(_float_bytes(obj))
    if t is CBORTag:
        inner = _prepare(obj.value)
        return obj if inner is obj.value else CBORTag(obj.tag, inner)
    if t is set or t is frozenset:
        # RFC 8949 has no set; cbor2 writes tag 258 around an array. Order the
        # elements by their encoding so the output is still deterministic.
        return CBORTag(258, sorted((_prepare(v) for v in obj), key=_encode_prepared))
    if t is cbor2.frozendict:
        return _prepare_map(dict(obj))
    return obj


def _prepare_map(obj: dict[Any, Any]) -> Any:
    in_order = True
    prev_len = -1
    prev = ""
    for k in obj:
        if type(k) is not str:
            return _prepare_mixed_map(obj)
        n = len(k) if k.isascii() else len(k.encode("utf-8", "surrogatepass"))
        # Text keys: shorter encoding first, then bytewise; UTF-8 byte order is
        # code point order, which is how Python compares str.
        if n < prev_len or (n == prev_len and k <= prev):
            in_order = False
        prev_len, prev = n, k
    changed: dict[Any, Any] | None = None
    for k, v in obj.items():
        tv = type(v)
        if tv is str or tv is int or tv is bytes or v is None or tv is bool:
            continue
        nv = _prepare(v)
        if nv is not v:
            if changed is None:
                changed = {}
            changed[k] = nv
    if in_order and changed is None:
        return obj
    keys = list(obj) if in_order else sorted(obj, key=_text_key)
    if changed is None:
        return {k: obj[k] for k in keys}
    return {k: changed[k] if k in changed else obj[k] for k in keys}


def _text_key(k: str) -> tuple[int, str]:
    return (len(k.encode("utf-8", "surrogatepass")), k)


def _prepare_mixed_map(obj: dict[Any, Any]) -> dict[Any, Any]:
    """Maps with non-text keys: sort by the full encoding of each key (R1)."""
    entries = []
    for k, v in obj.items():
        pk = _prepare(k)
        entries.append((_encode_prepared(pk), pk, _prepare(v)))
    entries.sort(key=lambda e: e[0])
    for (a, _, _), (b, _, _) in zip(entries, entries[1:]):
        if a == b:
            raise AmpError(_INVALID, "map has two keys with the same encoding")
    # Keys that were rewritten (floats) are written from their encoding.
    return {RawCBOR(enc) if type(pk) is RawCBOR else _hashable(pk, enc): v for enc, pk, v in entries}


def _hashable(key: Any, encoded: bytes) -> Any:
    # A decoded key can hold a map or array (a tag around a map, say) once
    # _prepare has rebuilt it. cbor2's CBORTag reports an unhashable value
    # with RuntimeError rather than TypeError.
    try:
        hash(key)
    except (TypeError, RuntimeError):
        return RawCBOR(encoded)
    return key


def _encode_prepared(obj: Any) -> bytes:
    return cbor2.dumps(obj, default=write_raw)


_PLAIN, _CANONICAL, _MIXED = 0, 1, 2
_SCALARS = frozenset((str, int, bytes, bool, type(None)))
_UNBOUNDED = 1 << 30  # nesting room when the caller sets no limit


class TooDeep(AmpError):
    """A value nests deeper than its receiver's decoder accepts (1001): it
    is refused before it is sent, since it could only be refused on arrival
    (and then nothing would answer the call that carried it)."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(_INVALID, f"value nests deeper than {max_depth} levels of arrays, maps and tags")
        self.max_depth = max_depth


def _classify(obj: Any, room: int = _UNBOUNDED) -> int:
    """How ``obj`` can be encoded deterministically, cheapest first:

    ``_PLAIN``: text keys only, every map already in order, no floats, so
    cbor2's plain encoder is exact (the usual case for a decoded message);
    ``_CANONICAL``: text keys only, so cbor2's canonical mode is exact (its
    length-first order agrees with RFC 8949 when all keys are text);
    ``_MIXED``: some map has non-text keys (or a set or frozendict appears):
    only :func:`_prepare` gets the order right.

    ``room`` is how many more levels of non-empty containers (tags count)
    the value may nest; :class:`TooDeep` past it. This walk runs for every
    message anyway, so the limit rides along at one comparison and one
    argument per container: measured at 0-5% of a small body's ``dumps``
    (under 0.2 µs, <1% of a ``seal``), where a second walk would cost as
    much as this one. A ``_MIXED`` answer stops the walk early; :func:`dumps`
    then checks the depth with a walk of its own (that path is slow anyway).
    """
    t = type(obj)
    if t is dict:
        if room <= 0 and obj:
            raise _TooDeepSignal
        state = _PLAIN
        prev_len = -1
        prev = ""
        for k in obj:
            if type(k) is not str:
                return _MIXED
            if state == _PLAIN:
                n = len(k) if k.isascii() else len(k.encode("utf-8", "surrogatepass"))
                if n < prev_len or (n == prev_len and k <= prev):
                    state = _CANONICAL
                prev_len, prev = n, k
        return _classify_values(obj.values(), state, room - 1)
    if t is list or t is tuple:
        if room <= 0 and obj:
            raise _TooDeepSignal
        return _classify_values(obj, _PLAIN, room - 1)
    if t in _SCALARS:
        return _PLAIN
    if t is float:
        return _CANONICAL
    if t is CBORTag:
        if room <= 0:
            raise _TooDeepSignal
        return _classify(obj.value, room - 1)
    return _MIXED


class _TooDeepSignal(Exception):
    """Raised deep inside the walk; :func:`dumps` turns it into TooDeep with the limit."""


def _nesting_fits(obj: Any, room: int) -> bool:
    """Does ``obj`` nest at most ``room`` levels of non-empty containers and
    tags (as cbor2's decoder counts them)? For the rare values
    :func:`_classify` stops early on."""
    t = type(obj)
    if t is dict or t is cbor2.frozendict:
        return not obj or (room > 0 and all(_nesting_fits(k, room - 1) and _nesting_fits(v, room - 1)
                                            for k, v in obj.items()))
    if t is list or t is tuple or t is set or t is frozenset:
        extra = 1 if (t is set or t is frozenset) else 0  # written as tag 258 around an array
        return not obj or (room > extra and all(_nesting_fits(v, room - 1 - extra) for v in obj))
    if t is CBORTag:
        return room > 0 and _nesting_fits(obj.value, room - 1)
    return True


def _classify_values(values: Iterable[Any], state: int, room: int = _UNBOUNDED) -> int:
    """The worst class among a container's values, starting from ``state``
    (what the container's own keys gave); stops early at ``_MIXED``."""
    for v in values:
        tv = type(v)
        if tv in _SCALARS:
            continue
        if tv is float:
            state = _CANONICAL
            continue
        sub = _classify(v, room)
        if sub > state:
            if sub == _MIXED:
                return _MIXED
            state = sub
    return state


def dumps_in_order(obj: Any) -> bytes:
    """``obj`` written as it stands: maps in their own order, shortest heads.
    That is :func:`dumps`'s output exactly when every map key is text, each
    map is already in deterministic order and there are no floats; a caller
    that knows so (from the value's types) skips :func:`dumps`'s walk."""
    return cbor2.dumps(obj)


def dumps(obj: Any, *, max_depth: int | None = None) -> bytes:
    """Deterministic CBOR encoding of ``obj`` (RFC 8949 §4.2.1, ruling R1).

    With ``max_depth``, :class:`TooDeep` (1001) when ``obj`` nests deeper than
    :func:`loads` with that ``DecodeLimits.max_depth`` would take: a message
    body is encoded with the envelope's limit less one (the envelope's own
    map), so what we send is what our own decoder accepts.
    """
    try:
        if max_depth is None:
            kind = _classify(obj)
        else:
            kind = _classify(obj, max_depth)
            if kind == _MIXED and not _nesting_fits(obj, max_depth):
                raise _TooDeepSignal
        if kind == _PLAIN:
            return cbor2.dumps(obj)
        if kind == _CANONICAL:
            return cbor2.dumps(obj, canonical=True)
        return cbor2.dumps(_prepare(obj), default=write_raw)
    except AmpError:
        raise
    except _TooDeepSignal:
        raise TooDeep(max_depth or 0) from None
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError, RuntimeError) as exc:
        raise AmpError(_INVALID, f"value cannot be encoded as CBOR: {exc}") from exc
