"""Deterministic CBOR for AMP (RFC 8949 §4.2.1, ruling R1) on top of cbor2.

Two halves that share nothing but cbor2:

- :mod:`.encode`: :func:`dumps` (deterministic encoding), :class:`TooDeep`,
  and the single items (:func:`head`, :func:`text_item`, ...) the envelope
  and Sig_Input are assembled from with no generic encoder call;
- :mod:`.decode`: :func:`loads` (strict decoding of exactly one item),
  :class:`DecodeLimits`, the head scanner :func:`check_well_formed`, and
  :func:`plain_integers`.

Every name is importable from here, as the rest of ampcap does; these are
the same objects, so a call through this package costs nothing extra.
"""

from __future__ import annotations

from .decode import (
    DEFAULT_LIMITS,
    MAX_BIGNUM_BYTES,
    CBORTag,
    DecodeLimits,
    check_well_formed,
    loads,
    plain_integers,
)
from .encode import (
    UINT64_MAX,
    RawCBOR,
    TooDeep,
    bytes_item,
    dumps,
    dumps_in_order,
    head,
    text_item,
    uint_item,
    write_raw,
)

__all__ = [
    "UINT64_MAX",
    "MAX_BIGNUM_BYTES",
    "DecodeLimits",
    "TooDeep",
    "DEFAULT_LIMITS",
    "dumps",
    "dumps_in_order",
    "loads",
    "check_well_formed",
    "plain_integers",
    "CBORTag",
    "RawCBOR",
    "write_raw",
    "head",
    "uint_item",
    "bytes_item",
    "text_item",
]
