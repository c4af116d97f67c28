"""Captured HTTP and WebSocket traffic (RFC 002 §5–§6) → AMP messages, sans-I/O.

One direction of a TCP connection that starts like HTTP/1.1 (a request line
from the client, ``HTTP/1.x`` from the server) is read here instead of as
AMPS frames. Each AMP message found is handed on as an ``AMP_MESSAGE`` frame,
so the dump checks and shows it exactly as one read from AMPS:

* the body of ``POST /amp/v1/messages`` (one message);
* a ``200`` response body that is an AMP message (a synchronous reply);
* every message of a §6.2 polling wrapper (a ``200`` whose body is the
  ``messages`` / ``next_cursor`` / ``has_more`` map), raw bytes as carried;
* after ``101 Switching Protocols``, every binary WebSocket message (frames
  joined, client frames unmasked);
* the RFC 003 relay's bodies (``dump/relaywire.py``): a webhook delivery's
  message (its signature checked), a relay-forward wrapper's message, and
  what is wrong with a wrapper, a refused handoff, a bad receipt.

What is not AMP is reported, not dropped: a refused request (``HTTP 403``
with its ``X-AMP-Error-Code``), a text WebSocket message (1001, §5.2), a
close frame's code, a malformed wrapper. Bodies and messages over
``max_size`` end the stream with 1001, as an oversize AMPS frame does.

Bodies are framed by ``Content-Length`` or ``chunked``, as ampcap and the
usual clients send them; a body framed by the connection's end is taken at
the end.
"""

from __future__ import annotations

from ..errors import AmpError
from ..wire import cbor
from ..wire.frames import Frame, FrameType, Framing
from .streams import FramedStream, StreamEvent, Where

__all__ = ["HttpWsStream", "SniffingStream", "sniffing_stream", "looks_like_http"]

_METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ")
_MAX_HEAD = 64 * 1024


def looks_like_http(data: bytes) -> bool:
    """Do these first bytes of a direction start an HTTP/1.x message?"""
    return data.startswith(_METHODS) or data.startswith(b"HTTP/1.")


class HttpWsStream:
    """One direction of an HTTP/1.1 connection, and of the WebSocket it may become."""

    def __init__(self, where: Where, max_size: int) -> None:
        self.where = where
        self._max = max_size
        self._buf = bytearray()
        self._dead = False
        self._ws = False  # after the 101: WebSocket frames
        self._parts: list[bytes] = []  # a WebSocket message being joined
        self._part_size = 0
        self._text = False
        self._client = where.direction == "c2s"
        self._path = b""  # the request line's path (c2s) or what it answered (s2c)
        self._events: list[StreamEvent] = []
        self._at: float | None = None

    @property
    def dead(self) -> bool:
        return self._dead

    def feed(self, data: bytes, at: float | None) -> list[StreamEvent]:
        if self._dead or not data:
            return []
        self._buf += data
        self._at = at
        self._events = []
        try:
            while not self._dead and self._step():
                pass
        except AmpError as exc:
            self._fail(exc)
        return self._events

    def close(self, at: float | None) -> list[StreamEvent]:
        if self._dead:
            return []
        self._dead = True
        if self._buf:
            what = "a WebSocket frame" if self._ws else "an HTTP message"
            return [StreamEvent(self.where, at, error=AmpError(1001, f"the connection ended inside {what}",
                                                                 path="http"))]
        return []

    # ------------------------------------------------------------ parsing

    def _fail(self, err: AmpError) -> None:
        self._events.append(StreamEvent(self.where, self._at, error=err))
        self._dead = True
        self._buf = bytearray()

    def _emit(self, payload: bytes) -> None:
        self._events.append(StreamEvent(self.where, self._at, frame=Frame(FrameType.AMP_MESSAGE, payload)))

    def _note(self, code: int, message: str) -> None:
        self._events.append(StreamEvent(self.where, self._at, error=AmpError(code, message, path="http")))

    def _step(self) -> bool:
        """Consume one unit (an HTTP message or a WebSocket frame); False: need more bytes."""
        return self._ws_frame() if self._ws else self._http_message()

    def _http_message(self) -> bool:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                raise AmpError(1001, "HTTP header section too long", path="http")
            return False
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        start = head[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise AmpError(1001, "malformed HTTP header line", path="http")
            headers[name.strip().lower()] = value.strip()
        body_at = end + 4
        if self._client:
            if len(start) != 3 or not start[2].startswith("HTTP/1."):
                raise AmpError(1001, "malformed HTTP request line", path="http")
            status = None
        else:
            if len(start) < 2 or not start[0].startswith("HTTP/1.") or not start[1].isdigit():
                raise AmpError(1001, "malformed HTTP status line", path="http")
            status = int(start[1])
        body, used = self._body(headers, body_at, status)
        if body is None:
            return False
        del buf[:used]
        if self._client:
            self._on_request(start[0], start[1], headers, body)
        else:
            assert status is not None
            self._on_response(status, headers, body)
        return True

    def _body(self, headers: dict[str, str], at: int, status: int | None) -> tuple[bytes | None, int]:
        buf = self._buf
        if status is not None and (status == 101 or status == 204 or status == 304 or 100 <= status < 200):
            return b"", at
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            pos = at
            while True:
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    return None, 0
                size_text = bytes(buf[pos:line_end]).split(b";")[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise AmpError(1001, "malformed chunk size", path="http") from None
                if sum(map(len, parts)) + size > self._max:
                    raise AmpError(1001, f"HTTP body exceeds the {self._max}-byte maximum", path="http")
                if size == 0:
                    trailer_end = buf.find(b"\r\n\r\n", line_end)
                    if buf[line_end:line_end + 4] == b"\r\n\r\n":
                        return b"".join(parts), line_end + 4
                    if trailer_end < 0:
                        return None, 0
                    return b"".join(parts), trailer_end + 4
                if len(buf) < line_end + 2 + size + 2:
                    return None, 0
                parts.append(bytes(buf[line_end + 2:line_end + 2 + size]))
                pos = line_end + 2 + size + 2
        length_text = headers.get("content-length")
        if length_text is None:
            return b"", at  # a request without a body (or one only the connection's end frames)
        if not length_text.isdigit():
            raise AmpError(1001, "malformed Content-Length", path="http")
        length = int(length_text)
        if length > self._max:
            raise AmpError(1001, f"HTTP body of {length} bytes exceeds the {self._max}-byte maximum", path="http")
        if len(buf) < at + length:
            return None, 0
        return bytes(buf[at:at + length]), at + length

    def _on_request(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        path = target.split("?", 1)[0]
        if method == "POST" and path == "/amp/v1/messages":
            if body:
                self._emit(body)
        elif method == "POST" and body and self._relay_body(body, headers):
            pass  # a webhook delivery, relay-forward or commit report (dump/relaywire.py)
        elif method == "GET" and path == "/amp/v1/ws" and headers.get("upgrade", "").lower() == "websocket":
            self._ws = True  # the client's next bytes are WebSocket frames (if the server agrees)

    def _on_response(self, status: int, headers: dict[str, str], body: bytes) -> None:
        if status == 101:
            self._ws = True
            return
        if status not in (200, 202):
            code = headers.get("x-amp-error-code", "")
            text = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""
            self._note(int(code) if code.isdigit() and len(code) <= 5 else 1001,
                       f"HTTP {status}" + (f": {text[:200]}" if text else ""))
            return
        if status != 200 or not body or "cbor" not in headers.get("content-type", ""):
            return
        try:
            value = cbor.loads(body, cbor.DecodeLimits(max_bytes=self._max))
        except AmpError:
            self._emit(body)  # not even CBOR: the message checks say so
            return
        if type(value) is dict and "messages" not in value and self._relay_body(body, headers):
            return  # a relay-forward-response or commit answer
        if type(value) is dict and "messages" in value:
            messages = value.get("messages")
            if (type(messages) is not list or not all(type(m) is bytes for m in messages)
                    or set(value) != {"messages", "next_cursor", "has_more"}):
                self._note(1001, "malformed RFC 002 §6.2 polling wrapper")
                return
            for message in messages:
                self._emit(message)
        else:
            self._emit(body)

    def _relay_body(self, body: bytes, headers: dict[str, str]) -> bool:
        """An RFC 003 relay body: its messages handed on, its problems noted."""
        from .relaywire import read_relay_body

        found = read_relay_body(body, headers, max_size=self._max)
        if found is None:
            return False
        for message in found.messages:
            self._emit(message)
        for code, text in found.verdicts:
            if code is not None:
                self._note(code, f"{found.kind}: {text}")
        return True

    def _ws_frame(self) -> bool:
        buf = self._buf
        if len(buf) < 2:
            return False
        fin, opcode = buf[0] & 0x80, buf[0] & 0x0F
        masked, length = buf[1] & 0x80, buf[1] & 0x7F
        pos = 2
        if length == 126:
            if len(buf) < 4:
                return False
            length, pos = int.from_bytes(buf[2:4], "big"), 4
        elif length == 127:
            if len(buf) < 10:
                return False
            length, pos = int.from_bytes(buf[2:10], "big"), 10
        if opcode in (0, 1, 2) and self._part_size + length > self._max:
            raise AmpError(1001, f"WebSocket message exceeds the {self._max}-byte maximum (close 1009)",
                           path="ws")
        if length > self._max:
            raise AmpError(1001, "WebSocket control frame too long", path="ws")
        key = b""
        if masked:
            if len(buf) < pos + 4:
                return False
            key, pos = bytes(buf[pos:pos + 4]), pos + 4
        if len(buf) < pos + length:
            return False
        payload = bytes(buf[pos:pos + length])
        del buf[:pos + length]
        if key:
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if length < 64 else _unmask(payload, key)
        if opcode == 8:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            reason = payload[2:].decode("utf-8", "replace")
            if code not in (1000, 1001):
                self._note(1001 if code != 1008 else 3001, f"WebSocket closed with {code}"
                                                           + (f": {reason[:200]}" if reason else ""))
            self._dead = True
            return False
        if opcode in (9, 10):  # ping, pong: keepalive
            return True
        if opcode in (1, 2):
            self._text = opcode == 1
            self._parts, self._part_size = [], 0
        elif opcode != 0:
            raise AmpError(1001, f"WebSocket frame with unknown opcode {opcode}", path="ws")
        self._parts.append(payload)
        self._part_size += len(payload)
        if fin:
            message = b"".join(self._parts)
            self._parts, self._part_size = [], 0
            if self._text:
                self._note(1001, "WebSocket text message (RFC 002 §5.2 allows binary only; close 1003)")
            else:
                self._emit(message)
        return True


def _unmask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    mask = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(n, "big")


class SniffingStream:
    """Decides on the first bytes of a direction: HTTP (and WebSocket), or AMPS frames."""

    def __init__(self, where: Where, framing: Framing | None, max_size: int) -> None:
        self.where = where
        self._framing = framing
        self._max = max_size
        self._inner: FramedStream | HttpWsStream | None = None
        self._head = b""

    @property
    def dead(self) -> bool:
        return self._inner is not None and self._inner.dead

    def feed(self, data: bytes, at: float | None) -> list[StreamEvent]:
        if self._inner is None:
            self._head += data
            if len(self._head) < 8 and any(m.startswith(self._head) or self._head.startswith(m)
                                           for m in (*_METHODS, b"HTTP/1.")):
                return []  # too few bytes to tell yet
            data, self._head = self._head, b""
            self._inner = (HttpWsStream(self.where, self._max) if looks_like_http(data)
                           else FramedStream(self.where, self._framing, self._max))
        return self._inner.feed(data, at)

    def close(self, at: float | None) -> list[StreamEvent]:
        if self._inner is None:
            if not self._head:
                return []
            self._inner = FramedStream(self.where, self._framing, self._max)
            events = self._inner.feed(self._head, at)
            return events + self._inner.close(at)
        return self._inner.close(at)


def sniffing_stream(where: Where, framing: Framing | None, max_size: int) -> SniffingStream:
    """A stream for one direction of a captured connection that reads
    RFC 002 HTTP/WebSocket traffic as such and anything else as AMPS."""
    return SniffingStream(where, framing, max_size)
