"""A stand-in for the public Rust example relay (``amp002-server``), in trio.

It reproduces the behaviour recorded in ``captures/rust-example/README.md``
(ruling R3/R15), so ampcap's ``--compat rust-example`` path can be tested
without a Rust toolchain:

* raw framing: a 4-byte big-endian payload length, then one CBOR message;
* a connection is registered under the ``from`` of its first frame that
  parses as an AMP envelope; later frames with another ``from`` are dropped;
* each frame is forwarded byte for byte to every recipient in ``to`` that
  has a registered connection; anything unparsable or undeliverable is
  dropped silently. The relay never sends anything of its own;
* a declared length over 8 MiB closes the connection.

One deliberate difference: when a connection ends, its DID is unregistered
only if it still points at that connection (the example removes it even if
a newer connection registered the same DID meanwhile).

Where RFC 003 says what a relay must do in the cases its Appendix A vectors
drive from outside, the stand-in does that rather than stay silent:

* A.1: a message with ``ttl = 0`` is never queued; when a recipient is not
  online it is refused with an AMP ERROR 2003 (RELAY_REJECTED), signed by
  the relay's own identity, ``reply_to`` = the message id (§5.1). The ERROR
  is signed with the Sig_Input variant the sender's own signature verified
  under (ruling R15), when the sender is a did:key;
* A.7: a message is forwarded to a recipient once per ``(from, id,
  recipient)`` while it lives (``ts + ttl``): an exact resend is suppressed
  (§5.6.3);
* A.5/A.6: ``POST /amp/v1/relay/forward`` (RFC 002 §6.5), served on the same
  port (a request that starts with ``POST `` cannot be a frame: its length
  would be over 1 GB), checks the relay-forward wrapper, then refuses a
  ``relay_path`` that already names this relay and a ``hop_limit`` of 0 with
  ``2003`` and a reason saying which (§5.6.2), in that order. The stand-in
  accepts no custody transfer, so every handoff that passes these checks is
  refused too (2003, "no custody transfers"), never accepted without the
  transfer receipt §4.1 requires. It trusts any upstream relay (it checks
  no bearer token): it is a test fixture, not a relay to deploy.

Everything else stays as the example does it (no store-and-forward: a
message with ``ttl > 0`` to a recipient offline is dropped).

Run: ``python tools/stand_in_relay.py --listen 127.0.0.1:7002``; it prints
``stand-in relay DID listening on amp://HOST:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from typing import Any

import trio

from ampcap.errors import AmpError
from ampcap.wire.cbor import dumps, loads
from ampcap.wire.envelope import Envelope, decode_envelope, seal
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.registry import ErrorCode, MessageType
from ampcap.wire.receive import verifying_profile
from ampcap.wire.signing import Profile

MAX_FRAME = 8 << 20  # the example's MAX_FRAME_SIZE
_LENGTH = struct.Struct(">I")
RELAY_REJECTED = int(ErrorCode.RELAY_REJECTED)  # 2003
FORWARD_PATH = "/amp/v1/relay/forward"
_HTTP_HEAD_LIMIT = 16 * 1024
_MAX_DEDUPE = 100_000  # remembered (from, id, recipient) keys; the oldest go first


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Client:
    """One relay connection: its stream plus a lock, because frames from
    several senders may be forwarded to it at once."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.send_lock = trio.Lock()


class StandInRelay:
    def __init__(self, identity: Identity | None = None) -> None:
        self.identity = identity or Identity.generate(os.urandom)
        self.online: dict[str, _Client] = {}
        self.forwarded = 0
        self.dropped = 0
        self.rejected = 0  # ERROR 2003 sent (ttl = 0, recipient offline)
        self.suppressed = 0  # duplicates not forwarded again
        self._seen: dict[tuple[str, bytes, str], int] = {}  # (from, id, recipient) -> expires at
        self._resolver = DidKeyResolver()

    async def handle(self, stream: trio.SocketStream) -> None:
        me = _Client(stream)
        registered: str | None = None
        buf = bytearray()
        try:
            first = await stream.receive_some(64 * 1024)
            if not first:
                return
            if first.startswith(b"POST "):
                await self._http(stream, bytearray(first))
                return
            buf += first
            while True:
                # Cut complete frames out of the buffer; only one frame's bytes are held.
                while len(buf) >= 4:
                    length = _LENGTH.unpack_from(buf)[0]
                    if length > MAX_FRAME:
                        return  # the example closes on oversize lengths
                    if len(buf) < 4 + length:
                        break
                    frame = bytes(buf[: 4 + length])
                    del buf[: 4 + length]
                    registered = await self._route(me, registered, frame)
                data = await stream.receive_some(64 * 1024)
                if not data:
                    return
                buf += data
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            if registered is not None and self.online.get(registered) is me:
                del self.online[registered]
            await trio.aclose_forcefully(stream)

    async def _route(self, me: _Client, registered: str | None, frame: bytes) -> str | None:
        try:
            env = decode_envelope(frame[4:])
        except AmpError:
            self.dropped += 1
            return registered
        if registered is None:
            registered = env.sender
            self.online[registered] = me
        elif env.sender != registered:
            self.dropped += 1  # sender switched on one connection
            return registered
        now = _now_ms()
        if env.ttl == 0 and any(did not in self.online for did in env.recipients):
            # RFC 003 §5.1: never queued; no immediate delivery to all means 2003.
            offline = [did for did in env.recipients if did not in self.online]
            await self._refuse(me, env, f"ttl is 0 and recipient {offline[0]} is offline; not queued")
            return registered
        self._purge(now)
        for did in env.recipients:
            target = self.online.get(did)
            if target is None:
                self.dropped += 1
                continue
            key = (env.sender, env.id, did)
            if key in self._seen:  # RFC 003 §5.6.3: one delivery per (from, id, recipient)
                self.suppressed += 1
                continue
            self._seen[key] = env.ts + env.ttl
            if len(self._seen) > _MAX_DEDUPE:
                del self._seen[next(iter(self._seen))]
            try:
                async with target.send_lock:
                    await target.stream.send_all(frame)
                self.forwarded += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.dropped += 1
        return registered

    def _purge(self, now: int) -> None:
        if len(self._seen) > 1024:
            for key in [k for k, expires in self._seen.items() if expires < now]:
                del self._seen[key]

    def _profile_of(self, env: Envelope) -> Profile:
        """The Sig_Input variant the sender signed with, when it can be told."""
        return verifying_profile(env, self._resolver) or Profile.RFC

    async def _refuse(self, me: _Client, env: Envelope, reason: str) -> None:
        """An AMP ERROR 2003 from the relay to the sender, answering ``env``."""
        self.rejected += 1
        if env.typ == int(MessageType.ERROR):
            return  # never an ERROR for an ERROR
        body = {"code": RELAY_REJECTED, "message": reason, "retry": False}
        _, wire = seal(self.identity, typ=int(MessageType.ERROR), to=env.sender, body=body, now_ms=_now_ms(),
                       entropy=os.urandom, ttl=60_000, reply_to=env.id, thread_id=env.thread_id,
                       profile=self._profile_of(env))
        try:
            async with me.send_lock:
                await me.stream.send_all(_LENGTH.pack(len(wire)) + wire)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    # ------------------------------------------------ RFC 002 §6.5 relay-forward

    async def _http(self, stream: trio.SocketStream, buf: bytearray) -> None:
        """One ``POST /amp/v1/relay/forward``, answered and closed."""
        while b"\r\n\r\n" not in buf:
            if len(buf) > _HTTP_HEAD_LIMIT:
                await _http_reply(stream, 431, {"accepted": False, "error_code": 1001,
                                                "error_message": "request head too large"})
                return
            data = await stream.receive_some(16 * 1024)
            if not data:
                return
            buf += data
        head, _, body = bytes(buf).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, _, rest = lines[0].partition(" ")
        path = rest.partition(" ")[0]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if path != FORWARD_PATH:
            await _http_reply(stream, 404, {"accepted": False, "error_code": 2001, "error_message": "no such route"})
            return
        if not 0 <= length <= MAX_FRAME:
            await _http_reply(stream, 413, {"accepted": False, "error_code": 1001,
                                            "error_message": "body missing or too large"})
            return
        while len(body) < length:
            data = await stream.receive_some(64 * 1024)
            if not data:
                return
            body += data
        status, answer = self.forward(body[:length])
        await _http_reply(stream, status, answer)

    def forward(self, payload: bytes) -> tuple[int, dict[str, Any]]:
        """Judge one relay-forward wrapper: (HTTP status, relay-forward-response)."""
        def refuse(status: int, code: int, message: str) -> tuple[int, dict[str, Any]]:
            return status, {"accepted": False, "error_code": code, "error_message": message}

        try:
            wrapper = loads(payload)
        except AmpError as exc:
            return refuse(400, 1001, f"relay-forward is not CBOR: {exc.message}")
        if type(wrapper) is not dict:
            return refuse(400, 1001, "relay-forward must be a map")
        if wrapper.get("fwd_v") != 1:
            return refuse(400, 1004, "unsupported fwd_v (this relay speaks 1)")
        path, hops, message = wrapper.get("relay_path"), wrapper.get("hop_limit"), wrapper.get("message")
        if (type(path) is not list or not all(type(p) is str for p in path) or type(hops) is not int or hops < 0
                or type(message) is not bytes or type(wrapper.get("from_did")) is not str
                or type(wrapper.get("recipient_did")) is not str or type(wrapper.get("upstream_relay")) is not str
                or wrapper.get("transfer_mode") not in ("single", "dual")):
            return refuse(400, 1001, "relay-forward does not match its CDDL (RFC 002 §6.5)")
        try:
            env = decode_envelope(message)
        except AmpError as exc:
            return refuse(400, 1001, f"message is not an AMP message: {exc.message}")
        if env.sender != wrapper["from_did"] or wrapper["recipient_did"] not in env.recipients:
            return refuse(400, 1001, "from_did / recipient_did do not match the message")
        # RFC 003 §5.6.2, in this order: the path, then the hop budget.
        if self.identity.did in path:
            return refuse(429, RELAY_REJECTED, f"loop: relay_path already contains {self.identity.did}")
        if hops == 0:
            return refuse(429, RELAY_REJECTED, "hop_limit exhausted: hop_limit is 0")
        return refuse(429, RELAY_REJECTED, "no custody transfers: this stand-in relay accepts no handoffs")

    async def serve(self, host: str, port: int, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self.handle, listeners)


async def _http_reply(stream: trio.SocketStream, status: int, answer: dict[str, Any]) -> None:
    body = dumps(answer)
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large",
              429: "Too Many Requests", 431: "Request Header Fields Too Large"}.get(status, "Error")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/cbor\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
    try:
        await stream.send_all(head + body)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _main(host: str, port: int) -> None:
    relay = StandInRelay()
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(relay.serve, host, port)
        # The URL stays the line's last word (scripts read it there).
        print(f"stand-in relay {relay.identity.did} listening on amp://{host}:{bound}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Stand-in for the Rust example AMP relay (raw framing).")
    parser.add_argument("--listen", default="127.0.0.1:7002", metavar="HOST:PORT")
    args = parser.parse_args(argv)
    host, _, port_text = args.listen.rpartition(":")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        print(f"stand_in_relay: --listen must be HOST:PORT, not {args.listen!r}", file=sys.stderr)
        return 2
    try:
        trio.run(_main, host.strip("[]"), int(port_text))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"stand_in_relay: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
