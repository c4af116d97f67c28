"""What an input that yielded not one AMP frame looks like, and which option reads it.

``ampcap dump`` reads raw RFC 002 frames by default. Given hex text, a bare
message, the Rust example's raw framing or something that is not AMP at all,
the frame decoder can only say that the first "frame header" makes no sense
("a 1177194881-byte payload": the ASCII of "FiAA"). Looking at the first
bytes tells the user far more. Sans-I/O: bytes in, one sentence out.
"""

from __future__ import annotations

import string

from ..wire.frames import Framing, other_protocol

__all__ = ["describe_undecodable", "SNIFF_BYTES"]

SNIFF_BYTES = 512  # how much of the input's start is kept to describe it

_HEX = frozenset(string.hexdigits.encode() + string.whitespace.encode())
_MAGICS = (
    (b"\x1f\x8b", "gzip-compressed data: decompress it first (zcat FILE | ampcap dump -)"),
    (b"PK\x03\x04", "a zip archive, not AMP traffic"),
    (b"\x7fELF", "an executable (ELF), not AMP traffic"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data: decompress it first (zstdcat FILE | ampcap dump -)"),
)


def _is_cbor_map_head(byte: int) -> bool:
    # Every AMP message is a CBOR map (RFC 001 §3): major type 5, any length form.
    return 0xA0 <= byte <= 0xBB or byte == 0xBF


def _raw_framed(head: bytes) -> bool:
    """A bare 4-byte big-endian length and then a CBOR map: the Rust example's framing."""
    return len(head) >= 5 and _is_cbor_map_head(head[4]) and 0 < int.from_bytes(head[:4], "big") <= 16 << 20


def _rfc002_framed(head: bytes) -> bool:
    """A 4-byte length, an AMP_MESSAGE type byte, then a CBOR map."""
    return len(head) >= 6 and head[4] == 0x01 and _is_cbor_map_head(head[5]) \
        and 1 < int.from_bytes(head[:4], "big") <= 16 << 20


def _is_text(head: bytes) -> bool:
    """Printable text in UTF-8 (not only ASCII: "café", "日本語" are text too).
    ``head`` is a cut of the input, so a character split at its end is allowed."""
    for cut in range(4):  # a UTF-8 character is at most 4 bytes: drop a partial one at the end
        try:
            text = head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(head) - 4:
                return False  # invalid before the end: not a cut, not UTF-8
            continue
        return all(ch.isprintable() or ch in "\t\n\r" for ch in text)
    return False


def describe_undecodable(head: bytes, *, framing: Framing | None, hex_given: bool = False) -> str:
    """Say what ``head`` (the first bytes read, after ``--hex`` decoding when
    given) looks like and which option reads it, for an input from which
    not one frame could be decoded with ``framing`` (``None``: one bare
    message)."""
    source = "its hex decodes to " if hex_given else "it looks like "
    if not head:
        return "it is empty"
    if not hex_given and all(b in _HEX for b in head) and sum(chr(b) in string.hexdigits for b in head) >= 8:
        return "it looks like hex text: read it with --hex"
    for magic, what in _MAGICS:
        if head.startswith(magic):
            return source + what
    if framing is not Framing.RAW and _raw_framed(head):
        return source + ("frames with a bare 4-byte length (the Rust example's framing): read it with "
                         "--framing raw, or --compat rust-example")
    if framing is not Framing.RFC002 and _rfc002_framed(head):
        return source + "RFC 002 frames: read it with --framing rfc002 (the default)"
    if framing is not None and _is_cbor_map_head(head[0]):
        return source + "one bare CBOR message without framing: read it with --framing none"
    other = other_protocol(head)
    if other is not None:
        return source + f"{other} traffic, not AMP"
    if _is_text(head):
        return source + ("text, not AMP traffic (AMP frames are binary: give raw bytes, hex text with --hex, "
                         "or a pcap/pcapng capture)")
    read_as = {Framing.RFC002: "RFC 002 frames", Framing.RAW: "raw-framed messages", None: "one bare message"}
    return source + (f"binary data that is not AMP traffic: neither {read_as[framing]} nor hex text, a pcap/pcapng "
                     f"capture or AMP in another framing")
