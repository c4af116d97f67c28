"""Byte streams → framed events, shared by file, pcap and live-tap inputs.

A :class:`FramedStream` wraps one direction of one connection: it feeds a
:class:`FrameDecoder` and turns both frames and framing failures into
:class:`StreamEvent` values, so a bad byte on one side never stops the rest.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import AmpError
from ..wire.frames import Frame, FrameDecoder, FrameType, Framing, FramingError

__all__ = ["StreamEvent", "FramedStream", "PrefixedReader", "Where", "read_fully"]


@dataclass(frozen=True, slots=True)
class Where:
    """Which side sent the bytes."""

    direction: str | None = None  # "c2s" | "s2c"
    src: str | None = None
    dst: str | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A frame, or the error that ended a stream, with where/when it was seen."""

    where: Where
    at: float | None
    frame: Frame | None = None
    error: AmpError | None = None


def read_fully(fp: BinaryIO | io.RawIOBase, n: int) -> bytes:
    """``n`` bytes from ``fp``, fewer only when it ends: a pipe or an
    unbuffered file may hand over less per read, and a fixed-size header
    read short would look like a cut file."""
    data = fp.read(n) or b""
    while data and len(data) < n:
        more = fp.read(n - len(data))
        if not more:
            break
        data += more
    return data


class PrefixedReader(io.RawIOBase):
    """A non-seekable input with bytes already read (to sniff its format) put
    back in front. ``read(n)`` returns ``n`` bytes unless the input ends, as a
    buffered file's does: the capture readers parse fixed-size headers."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        if n is None:
            n = -1
        if not self._head:
            return self._rest.read(n)
        if n < 0:
            data, self._head = self._head + self._rest.read(), b""
            return data
        data, self._head = self._head[:n], self._head[n:]
        if len(data) < n:
            data += self._rest.read(n - len(data))
        return data


class FramedStream:
    """One direction of a connection. ``framing=None`` means the whole stream
    is one bare amp-message (``--framing none``)."""

    def __init__(self, where: Where, framing: Framing | None, max_size: int) -> None:
        self.where = where
        self._decoder = FrameDecoder(max_size, framing) if framing is not None else None
        self._bare = bytearray()
        self._max_size = max_size
        self._dead = False

    @property
    def dead(self) -> bool:
        """Nothing more can be decoded from this stream (a framing error, an
        oversized bare message, or closed): the reader may stop reading."""
        return self._dead

    def feed(self, data: bytes, at: float | None) -> list[StreamEvent]:
        if self._dead or not data:
            return []
        if self._decoder is None:
            if len(self._bare) + len(data) > self._max_size:
                self._dead = True
                self._bare = bytearray()
                return [StreamEvent(self.where, at, error=AmpError(
                    1001, f"message exceeds the {self._max_size}-byte maximum", path="frame"))]
            self._bare += data
            return []
        try:
            return [StreamEvent(self.where, at, frame=f) for f in self._decoder.feed(data)]
        except FramingError as exc:
            self._dead = True
            return [StreamEvent(self.where, at, frame=f) for f in exc.frames] + \
                   [StreamEvent(self.where, at, error=exc)]

    def close(self, at: float | None) -> list[StreamEvent]:
        if self._dead:
            return []
        self._dead = True
        if self._decoder is None:
            if not self._bare:
                return []
            return [StreamEvent(self.where, at, frame=Frame(FrameType.AMP_MESSAGE, bytes(self._bare)))]
        try:
            self._decoder.close()
        except FramingError as exc:
            return [StreamEvent(self.where, at, error=exc)]
        return []
