"""RFC 002 §4.2–§4.3 stream framing, sans-I/O.

Two framings exist (ruling R3):

* ``Framing.RFC002``: ``uint32 BE length`` covering one frame-type byte plus the
  payload. ``length`` must be at least 1.
* ``Framing.RAW``: the public Rust example relay's bare ``uint32 BE length`` +
  payload, with no type byte. Every raw frame is an AMP_MESSAGE.

``max_size`` always bounds the *payload* (RFC 002 A.5: with a 1 MiB effective
maximum a 1 MiB + 1 byte payload is refused), so an RFC 002 frame may declare
``length = max_size + 1``.

The decoder keeps one ``bytearray`` and only ever holds the bytes of the frame
being assembled: complete frames are parsed straight out of the incoming chunk
when nothing is pending, and the consumed prefix is dropped once per ``feed``,
so work stays linear in the input however it is split.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ..errors import RemoteProtocolError

__all__ = [
    "FrameType",
    "Framing",
    "Frame",
    "FramingError",
    "FrameDecoder",
    "encode_frame",
    "other_protocol",
    "DEFAULT_MAX_SIZE",
    "MIN_MAX_SIZE",
]

_INVALID = 1001
_LENGTH = struct.Struct(">I")
_UINT32_MAX = 0xFFFF_FFFF

MIN_MAX_SIZE = 1 << 20  # RFC 002 §3.2: everyone accepts at least 1 MiB
DEFAULT_MAX_SIZE = 16 << 20  # RFC 002 §3.2 recommendation for agent endpoints


class FrameType(enum.IntEnum):
    """RFC 002 §4.3 frame types."""

    AMP_MESSAGE = 0x01
    HANDSHAKE = 0x02
    PING = 0x03
    PONG = 0x04
    GOAWAY = 0x05
    ERROR = 0x06


_FRAME_TYPES = {int(t): t for t in FrameType}


class Framing(enum.Enum):
    """How a byte stream is cut into frames."""

    RFC002 = "rfc002"
    RAW = "raw"

    @property
    def header_size(self) -> int:
        """Bytes before the payload: length (+ type byte for RFC 002)."""
        return 5 if self is Framing.RFC002 else 4


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its type and its payload bytes."""

    type: FrameType
    payload: bytes


class FramingError(RemoteProtocolError):
    """A stream that cannot be framed (code 1001).

    ``frames`` holds the complete frames that the failing ``feed`` decoded
    before it met the fault, so a dump loses nothing that was well framed.
    The connection is dead either way; callers that only care about the error
    can treat this as any other ``AmpError``.
    """

    def __init__(self, message: str, *, frames: tuple[Frame, ...] = (), offset: int | None = None) -> None:
        super().__init__(_INVALID, message, path="frame")
        self.frames = frames
        self.offset = offset  # stream offset of the faulty frame, when known


def encode_frame(type: FrameType | int, payload: bytes, framing: Framing = Framing.RFC002) -> bytes:
    """The wire bytes of one frame (``type`` must be AMP_MESSAGE under RAW)."""
    frame_type = _frame_type(int(type))
    if framing is Framing.RAW:
        if frame_type is not FrameType.AMP_MESSAGE:
            raise ValueError("raw framing only carries AMP_MESSAGE frames")
        if len(payload) > _UINT32_MAX:
            raise ValueError("payload too large for a uint32 length")
        return _LENGTH.pack(len(payload)) + bytes(payload)
    if len(payload) + 1 > _UINT32_MAX:
        raise ValueError("payload too large for a uint32 length")
    return _LENGTH.pack(len(payload) + 1) + bytes((frame_type,)) + bytes(payload)


def _frame_type(value: int) -> FrameType:
    try:
        return _FRAME_TYPES[value]
    except KeyError:
        raise ValueError(f"unknown frame type 0x{value:02X}") from None


class FrameDecoder:
    """Incremental frame decoder: bytes in via :meth:`feed`, frames out.

    Call :meth:`close` at end of stream: a partial header or payload left in
    the buffer is a truncated frame (RFC 002 §3.2), never silently dropped.
    After any error the decoder is dead and every later call raises the same
    error again.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE, framing: Framing = Framing.RFC002) -> None:
        if max_size < 1:
            raise ValueError("max_size must be positive")
        self._max_size = max_size
        self._framing = framing
        self._header = framing.header_size
        self._buf = bytearray()
        self._consumed = 0  # stream offset of the first byte in _buf
        self._error: FramingError | None = None
        self._closed = False

    # ------------------------------------------------------------ settings

    @property
    def framing(self) -> Framing:
        return self._framing

    @property
    def max_size(self) -> int:
        return self._max_size

    def set_max_size(self, max_size: int) -> None:
        """Apply the effective maximum once the handshake settles it. A frame
        already half-received is checked against the new limit on the next feed."""
        if max_size < 1:
            raise ValueError("max_size must be positive")
        self._max_size = max_size

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (bounded by header + max_size)."""
        return len(self._buf)

    @property
    def error(self) -> FramingError | None:
        return self._error

    def incomplete_frame(self) -> tuple[FrameType, int] | None:
        """The type and declared payload size of the frame being assembled,
        once its header has arrived (None otherwise). The owner uses it to
        refuse or budget a large frame from its header alone, before the
        payload is buffered."""
        buf = self._buf
        if len(buf) < self._header:
            return None
        length = _LENGTH.unpack_from(buf, 0)[0]
        if self._framing is Framing.RAW:
            return FrameType.AMP_MESSAGE, length
        return _FRAME_TYPES[buf[4]], length - 1  # the type byte was checked when the header arrived

    # ------------------------------------------------------------- decoding

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Decode every complete frame that ``data`` finishes.

        Raises :class:`FramingError` (1001) on a zero length, an unknown frame
        type or a declared length over the maximum (from the header alone,
        before the payload is buffered); its ``frames`` are the frames this
        call completed before the fault.
        """
        self._raise_if_dead()
        if self._closed:
            raise ValueError("feed() after close()")
        if not data:
            return []
        frames: list[Frame] = []
        try:
            if self._buf:
                self._buf += data
                used = self._parse(self._buf, frames)
                del self._buf[:used]
            else:
                # Fast path: parse complete frames directly from the caller's
                # chunk and only keep its unfinished tail.
                view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
                used = self._parse(view, frames)
                self._buf += view[used:]
            self._consumed += used
        except FramingError as exc:
            self._buf = bytearray()  # release whatever was held
            exc.frames = tuple(frames)
            self._error = exc
            raise
        return frames

    def close(self) -> None:
        """Declare end of stream; raise :class:`FramingError` on a truncated tail."""
        self._raise_if_dead()
        self._closed = True
        if not self._buf:
            return
        have = len(self._buf)
        if have < 4 or (self._framing is Framing.RFC002 and have < self._header):
            message = f"stream ended inside a frame header ({have} of {self._header} header bytes)"
        else:
            declared = _LENGTH.unpack_from(self._buf, 0)[0]
            got = have - 4
            message = f"stream ended inside a frame: length declares {declared} bytes, only {got} arrived"
        self._fail(message, self._consumed)

    def _raise_if_dead(self) -> None:
        if self._error is not None:
            err = self._error
            raise FramingError(err.message, offset=err.offset)

    def _fail(self, message: str, offset: int) -> None:
        exc = FramingError(message, offset=offset)
        self._error = exc
        self._buf = bytearray()
        raise exc

    def _bad_frame(self, message: str, buf: bytes | bytearray | memoryview, pos: int) -> None:
        offset = self._consumed + pos
        if offset == 0:  # the peer's very first bytes: say so if they are another protocol's
            other = other_protocol(bytes(buf[pos:pos + 8]))
            if other is not None:
                message += f" (the peer seems to speak {other}, not AMP)"
        self._fail(message, offset)

    def _parse(self, buf: bytes | bytearray | memoryview, out: list[Frame]) -> int:
        """Append complete frames from ``buf`` to ``out``; return bytes used."""
        pos = 0
        end = len(buf)
        rfc = self._framing is Framing.RFC002
        max_size = self._max_size
        while end - pos >= 4:
            length = _LENGTH.unpack_from(buf, pos)[0]
            payload_size = length - 1 if rfc else length
            if rfc and length == 0:
                self._bad_frame("frame length 0 (must be at least 1 for the frame-type byte)", buf, pos)
            if payload_size > max_size:
                self._bad_frame(f"frame declares a {payload_size}-byte payload, over the {max_size}-byte maximum",
                                buf, pos)
            if rfc:
                if end - pos < 5:
                    break
                code = buf[pos + 4]
                frame_type = _FRAME_TYPES.get(code)
                if frame_type is None:
                    self._bad_frame(f"unknown frame type 0x{code:02X}", buf, pos)
            else:
                frame_type = FrameType.AMP_MESSAGE
            stop = pos + 4 + length
            if stop > end:
                break
            start = pos + self._header
            out.append(Frame(frame_type, bytes(buf[start:stop])))  # type: ignore[arg-type]
            pos = stop
        return pos


_HTTP_STARTS = (b"HTTP/", b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ",
                b"CONNECT ", b"PRI * HTTP/2")


def other_protocol(head: bytes) -> str | None:
    """Which well-known protocol a stream's first bytes belong to, if any: a
    frame header that makes no sense is far more often an HTTP server or
    proxy, a TLS endpoint (``amp://`` against an ``amps://`` port) or an SSH
    server than a broken AMP peer, and naming it saves a confused operator
    from reading "a 1213486159-byte payload" (that is "HTTP")."""
    # (A first read may hold only the 4 header bytes: "HTTP" alone counts.)
    if any(head.startswith(start) or (len(head) >= 4 and start.startswith(head)) for start in _HTTP_STARTS):
        return "HTTP"
    if len(head) >= 2 and 0x14 <= head[0] <= 0x17 and head[1] == 0x03:
        return "TLS"  # a TLS record header: content type, then major version 3
    if head.startswith(b"SSH-"):
        return "SSH"
    return None
