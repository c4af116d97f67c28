"""Byte streams → framed events, shared by file, pcap and live-tap inputs.

A :class:`FramedStream` wraps one direction of one connection: it feeds a
:class:`FrameDecoder` and turns both frames and framing failures into
:class:`StreamEvent` values, so a bad byte on one side never stops the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AmpError
from ..wire.frames import Frame, FrameDecoder, FrameType, Framing, FramingError

__all__ = ["StreamEvent", "FramedStream", "Where"]


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


class FramedStream:
    """One direction of a connection. ``framing=None`` means the whole stream
    is one bare amp-message (``--framing none``)."""

    def __init__(self, where: Where, framing: Framing | None, max_size: int) -> None:
        self.where = where
        self._decoder = FrameDecoder(max_size, framing) if framing is not None else None
        self._bare = bytearray()
        self._max_size = max_size
        self._dead = False

    def feed(self, data: bytes, at: float | None) -> list[StreamEvent]:
        if self._dead or not data:
            return []
        if self._decoder is None:
            if len(self._bare) + len(data) > self._max_size:
                self._dead = True
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
