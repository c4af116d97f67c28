"""The interop probe over HTTP (``ampcap interop https://…``, RFC 002 §6).

The probe speaks RFC 002 frames; this stream carries them over HTTP so the
same vectors run unchanged where the binding allows it:

* a HANDSHAKE frame is answered here (HTTP has none) with the size the
  target announces in ``X-AMP-Max-Message-Size``,
* each AMP_MESSAGE frame is one ``POST /amp/v1/messages`` with the R21
  bearer token once the target's DID is known (a HELLO goes without one),
* a ``200`` body comes back as an AMP_MESSAGE frame; after a ``202`` the
  stream polls ``GET /amp/v1/messages`` while the probe waits for more,
* a refusal (§6.4) comes back as a transport ERROR frame carrying the
  target's ``X-AMP-Error-Code`` (or the status's hint) and the message id,
  so "rejected with 1002" is judged the same way as over AMPS.

Requests are made one at a time, inside ``send_all`` and ``receive_some``:
a probe sends little and waits for each answer.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from urllib.parse import quote

import trio

from ..errors import AmpError
from ..net.transport.httppool import HttpFailure, HttpPool
from ..net.transport.url import MESSAGES_PATH, AmpUrl
from ..wire.bearer import mint
from ..wire.cbor import DEFAULT_LIMITS
from ..wire.envelope import decode_envelope
from ..wire.frames import FrameDecoder, FrameType, FramingError, encode_frame
from ..wire.httpmap import CONTENT_TYPE, MAX_SIZE_HEADER, TRANSPORT_VERSION_HEADER, code_for_status, decode_poll
from ..wire.identity import Identity
from ..wire.registry import MessageType
from ..wire.transport import HandshakeResponse, TransportError

__all__ = ["HttpFrameStream"]

_HELLO = int(MessageType.HELLO)
_POLL_S = 0.05


class HttpFrameStream(trio.abc.Stream):
    """RFC 002 frames for the probe; POSTs and polls on the wire."""

    def __init__(self, url: AmpUrl, *, ssl_context: ssl.SSLContext | None, timeout_s: float,
                 max_msg_size: int, entropy: Callable[[int], bytes]) -> None:
        self._url = url
        self._ssl = ssl_context
        self._timeout = timeout_s
        self._max = max_msg_size
        self._entropy = entropy
        self._decoder = FrameDecoder(64 << 20)
        self._in = bytearray()
        self._client: HttpPool | None = None
        self._waiting = 0  # 202'd messages whose replies may still come by polling
        self._cursor: str | None = None
        self._broken = False
        self._readable = trio.Event()
        self.identity: Identity | None = None  # the probe's, set by the probe
        self.peer_did: Callable[[], str | None] = lambda: None

    def _http(self) -> HttpPool:
        if self._client is None:
            self._client = HttpPool(self._url, ssl_context=self._ssl, max_connections=4, timeout_s=self._timeout)
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"accept": CONTENT_TYPE, TRANSPORT_VERSION_HEADER: "1", "content-type": CONTENT_TYPE}
        audience = self.peer_did()
        if audience is not None and self.identity is not None:
            import time

            token = mint(self.identity, audience, now_ms=int(time.time() * 1000), entropy=self._entropy)
            headers["authorization"] = f"Bearer {token}"
        return headers

    def _frame(self, ftype: FrameType, payload: bytes) -> None:
        self._in += encode_frame(ftype, payload)
        self._readable.set()  # a receive waiting meanwhile (the probe reads and writes at once)

    def _error(self, code: int, message: str, msg_id: bytes | None) -> None:
        self._frame(FrameType.ERROR, TransportError(code=code, message=message[:200], msg_id=msg_id).to_payload())

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken:
            raise trio.BrokenResourceError("the target refused the framing")
        try:
            frames = self._decoder.feed(bytes(data))
        except FramingError as exc:
            self._broken = True
            self._error(1001, f"not sent: {exc.message}", None)
            return
        for frame in frames:
            if frame.type is FrameType.HANDSHAKE:
                # HTTP has no handshake; every answer names the target's size limit (§5.3), so ask once.
                theirs = self._max
                try:
                    answer = await self._http().request("GET", MESSAGES_PATH, {"accept": CONTENT_TYPE})
                    text = answer.headers.get(MAX_SIZE_HEADER.lower(), "")
                    if text.isdigit() and len(text) <= 15:
                        theirs = int(text)
                except HttpFailure as exc:
                    raise trio.BrokenResourceError(f"GET failed: {exc}") from None
                self._frame(FrameType.HANDSHAKE, HandshakeResponse(accepted=True, max_msg_size=theirs).to_payload())
                continue
            if frame.type is not FrameType.AMP_MESSAGE:
                continue  # PING, GOAWAY: HTTP has no such thing
            try:
                msg_id: bytes | None = decode_envelope(frame.payload, DEFAULT_LIMITS).id
            except AmpError:
                msg_id = None
            try:
                response = await self._http().request("POST", MESSAGES_PATH, self._headers(), frame.payload)
            except HttpFailure as exc:
                raise trio.BrokenResourceError(f"POST failed: {exc}") from None
            if response.status == 200:
                if response.body:
                    self._frame(FrameType.AMP_MESSAGE, response.body)
            elif response.status == 202:
                self._waiting += 1
            else:
                code_text = response.headers.get("x-amp-error-code", "")
                code = int(code_text) if code_text.isdigit() and len(code_text) <= 5 else \
                    code_for_status(response.status) or 1001
                text = response.body.decode("utf-8", "replace").strip()[:150]
                self._error(code, f"HTTP {response.status}: {text}", msg_id)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._in:
            self._readable = trio.Event()
            if not self._waiting:
                await self._readable.wait()  # until a request's answer comes (or the probe's deadline)
                continue
            await self._poll()
            if not self._in:
                with trio.move_on_after(_POLL_S):
                    await self._readable.wait()
        size = len(self._in) if max_bytes is None else min(max_bytes, len(self._in))
        chunk = bytes(self._in[:size])
        del self._in[:size]
        return chunk

    async def _poll(self) -> None:
        target = f"{MESSAGES_PATH}?limit=50" + (f"&cursor={quote(self._cursor)}" if self._cursor else "")
        try:
            response = await self._http().request("GET", target, self._headers())
            if response.status != 200:
                return
            messages, cursor, _ = decode_poll(response.body)
        except (HttpFailure, AmpError):
            return
        self._cursor = cursor or self._cursor
        for raw in messages:
            self._frame(FrameType.AMP_MESSAGE, raw)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:  # pragma: no cover - not a HalfCloseableStream user
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._client is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self._client.aclose()
            self._client = None
