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

It imitates nothing of RFC 003: like the example it has no store-and-forward
queue (a message for a recipient offline is dropped), sends nothing of its
own (no ERROR for a ``ttl = 0`` message it cannot deliver), forwards an
exact resend again, and serves no federation endpoint. ``ampcap relay`` is
the RFC 003 relay (docs/relay.md); ``ampcap interop --relay`` run against
this stand-in shows what the example does not do.

Run: ``python tools/stand_in_relay.py --listen 127.0.0.1:7002``; it prints
``stand-in relay DID listening on amp://HOST:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys

import trio

from ampcap.errors import AmpError
from ampcap.wire.envelope import decode_envelope
from ampcap.wire.identity import Identity

MAX_FRAME = 8 << 20  # the example's MAX_FRAME_SIZE
_LENGTH = struct.Struct(">I")


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

    async def handle(self, stream: trio.SocketStream) -> None:
        me = _Client(stream)
        registered: str | None = None
        buf = bytearray()
        try:
            first = await stream.receive_some(64 * 1024)
            if not first:
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
        for did in env.recipients:
            target = self.online.get(did)
            if target is None:
                self.dropped += 1
                continue
            try:
                async with target.send_lock:
                    await target.stream.send_all(frame)
                self.forwarded += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.dropped += 1
        return registered

    async def serve(self, host: str, port: int, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self.handle, listeners)


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
