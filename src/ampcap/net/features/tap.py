"""Live tap (trio): forward each connection unchanged, decode a copy of the bytes.

For every accepted client the tap opens one upstream connection. Per
direction, one task copies bytes onward and then queues the same chunk for a
second task that decodes it. The copy never waits for the decoder: if the
decoder falls more than ``_DECODE_BACKLOG`` chunks behind, decoding of that
direction stops with a finding while forwarding carries on. A decode error on
one side likewise only ends the decoding of that side.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from ...errors import AmpError
from ...wire.frames import Framing
from ...dump.httpws import SniffingStream, sniffing_stream
from ...dump.streams import StreamEvent, Where
from ..transport.url import format_hostport
from ..transport.listener import open_listeners

__all__ = ["run_tap", "Recorder"]

log = logging.getLogger(__name__)
_CHUNK = 65536
_DECODE_BACKLOG = 256  # chunks (≤ 16 MiB) queued for decoding per direction


@dataclass(slots=True)
class _Backlog:
    """Set by the copier when the decoder could not keep up."""

    overflowed: bool = False


class Recorder(Protocol):
    """Where forwarded bytes are written as they pass (``--write-pcap``)."""

    def open(self, conn: int, client: str, server: str, ts: float) -> None: ...

    def data(self, conn: int, direction: str, payload: bytes, ts: float) -> None: ...

    def close(self, conn: int, direction: str, ts: float) -> None: ...


async def _copy(src: trio.SocketStream, dst: trio.SocketStream,
                to_decoder: trio.MemorySendChannel[bytes], backlog: _Backlog,
                record: Callable[[bytes | None], None]) -> None:
    async with to_decoder:
        try:
            while True:
                data = await src.receive_some(_CHUNK)
                if not data:
                    break
                await dst.send_all(data)
                record(data)
                if backlog.overflowed:
                    continue
                try:
                    to_decoder.send_nowait(data)
                except trio.WouldBlock:
                    backlog.overflowed = True
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("tap: stream ended: %s", exc)
        finally:
            record(None)
            # Half-close so the other side sees EOF, as it would without the tap.
            try:
                await dst.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass


async def _decode(chunks: trio.MemoryReceiveChannel[bytes], decode: SniffingStream, backlog: _Backlog,
                  on_event: Callable[[StreamEvent], None], clock: Callable[[], float]) -> None:
    async with chunks:
        async for data in chunks:
            for event in decode.feed(data, clock()):
                on_event(event)
            if backlog.overflowed:
                break
    if backlog.overflowed:
        on_event(StreamEvent(decode.where, clock(), error=AmpError(
            1001, "the dump fell behind the traffic; decoding of this direction stopped "
                  "(forwarding continues)", path="tap")))
        return
    for event in decode.close(clock()):
        on_event(event)


async def run_tap(listen: tuple[str, int], upstream: tuple[str, int], *, framing: Framing | None,
                  max_size: int, on_event: Callable[[StreamEvent], None],
                  clock: Callable[[], float], recorder: Recorder | None = None,
                  task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; ``task_status.started`` receives the bound port.
    ``recorder`` (optional) is given every forwarded chunk."""
    listeners = await open_listeners(listen[0], listen[1])
    counter = itertools.count(1)

    async def handle(client: trio.SocketStream) -> None:
        n = next(counter)
        try:
            server = await trio.open_tcp_stream(*upstream)
        except OSError as exc:
            log.warning("tap: connection %d: upstream %s:%d unreachable: %s", n, *upstream, exc)
            await client.aclose()
            return
        c_addr = format_hostport(*client.socket.getpeername()[:2])
        s_addr = format_hostport(*server.socket.getpeername()[:2])
        if recorder is not None:
            recorder.open(n, c_addr, s_addr, clock())
        async with client, server, trio.open_nursery() as nursery:
            for src, dst, direction, where in ((client, server, "c2s", Where("c2s", c_addr, s_addr)),
                                               (server, client, "s2c", Where("s2c", s_addr, c_addr))):
                send, receive = trio.open_memory_channel[bytes](_DECODE_BACKLOG)
                backlog = _Backlog()
                nursery.start_soon(_copy, src, dst, send, backlog, _recording(recorder, n, direction, clock))
                nursery.start_soon(_decode, receive, sniffing_stream(where, framing, max_size), backlog,
                                   on_event, clock)

    port = listeners[0].socket.getsockname()[1]
    task_status.started(port)
    await trio.serve_listeners(handle, listeners)


def _recording(recorder: Recorder | None, conn: int, direction: str,
               clock: Callable[[], float]) -> Callable[[bytes | None], None]:
    if recorder is None:
        return lambda data: None

    def record(data: bytes | None) -> None:
        if data is None:
            recorder.close(conn, direction, clock())
        else:
            recorder.data(conn, direction, data, clock())

    return record
