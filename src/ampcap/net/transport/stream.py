"""Run one sans-I/O :class:`~ampcap.peer.connection.Connection` over a trio Stream.

Three small tasks per connection:

* the **reader** feeds each read to the Connection (a slice at a time, so
  replies leave while the rest of a read is verified) and hands its events
  to the owner (``on_event``), in order;
* the **writer** sends everything the Connection has queued in one write per
  wakeup, so frames produced while a write is in progress leave together in
  the next one (ampcap never writes once per frame; library-notes "Sockets
  and trio");
* the **timer** sleeps until ``get_timer()`` and calls ``handle_timer``.

Plain TCP (``trio.SocketStream``, so ``amp://``) is driven *directly*: reads
and writes go to the socket's file descriptor with ``os.read``/``os.write``,
waiting through ``trio.lowlevel.wait_readable``/``wait_writable`` only when
the kernel has nothing to give or no room to take. The bytes a delivery
produced (the replies to a slice) are written by the task that delivered
them, at the end of the delivery, and the writer task only finishes writes
the kernel could not take at once. A trio ``send_all`` costs a pass of the
scheduler after every successful send, and waking the writer task another;
at one call in flight that was two of the three passes per request the
daemon made, about a tenth of its instructions. Any other stream (TLS,
memory streams in tests) uses ``receive_some``/``send_all`` from the tasks.

Clocks: the Connection has one time base, Unix milliseconds, because the same
``now_ms`` stamps envelopes (``ts``) and checks expiry. The driver reads it
from the injected ``clock_ms`` (wall clock by default) and turns a deadline
into a trio deadline as "trio now + (deadline − clock now)"
(:func:`.clock.to_trio_deadline`, as the daemon's timer does), so timers follow
trio's clock (``MockClock`` in tests: inject a ``clock_ms`` derived from
``trio.current_time()``).

Backpressure: a peer that does not read what we send cannot grow our memory
without bound. While more than ``config.max_send_buffer`` bytes are queued or
in flight, the reader stops reading from that peer (so it cannot make us
produce more replies) and ``send()`` waits; a single ``send_all`` that makes no
progress for ``write_timeout_s`` closes the connection. Every connection has
its own tasks, so a slow or silent peer never stalls another connection.
Drivers may also share a :class:`~.budget.SendBudget` (a daemon gives one to
all of its connections): while the bytes queued across all of them exceed its
limit, every connection with bytes still unsent stops reading too, so many
peers that do not read cannot add up to more memory than that limit plus one
read's replies each. A peer that keeps up has nothing unsent and is not held
back. The same goes for input with a shared :class:`~.budget.ReceiveBudget`:
before reading on into a large frame, the reader reserves its declared size
and waits while that does not fit (see net/transport/budget.py).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from ...peer.connection import Connection
from ...peer.events import ConnectionTerminated, Event
from ...peer.state import ConnState
from ...wire.envelope import Envelope
from .budget import SMALL_FRAME, ReceiveBudget, SendBudget
from .clock import to_trio_deadline, wall_clock_ms
from .tls import tls_failure
from .url import AmpUrl

if TYPE_CHECKING:
    from ...peer.outbound import Outbound

__all__ = ["ConnectionDriver", "EventHandler", "open_stream"]

EventHandler = Callable[[Event], Awaitable[None]]
# Bytes per read (allocated per call, not held by idle connections): about
# 35 pipelined invokes. A read is then handled a slice at a time (see
# ConnectionDriver._receive), so replies leave while the rest of the read is
# still being verified and the two sides work at the same time instead of
# taking turns. Measured at 64 in flight, Python API client and `serve --demo`
# in separate processes, alternating runs on one machine: slices of
# 4 KiB (~8 messages) gave 5.2k-6.6k invokes/s where whole 16 KiB reads gave
# 3.2k-4.0k in the same runs; 1, 2 and 8 KiB slices did worse than 4, and
# 64 KiB reads no better than 16.
RECEIVE_SIZE = 16 * 1024
RECEIVE_SLICE = 4 * 1024
# The slice follows the messages, not the bytes: it is sized to hold about
# this many (4 KiB of plain invokes), up to a whole read. A peer sending
# larger messages (a delegated invoke carries ~1.5 KB of credentials) would
# otherwise get a flush and a scheduler turn for every other message.
SLICE_MESSAGES = 8
_POSIX = os.name == "posix"


async def _ignore(event: Event) -> None:
    return None


class ConnectionDriver:
    """Drives one Connection over one ``trio.abc.Stream`` until it closes."""

    def __init__(self, conn: Connection, stream: trio.abc.Stream, *, on_event: EventHandler | None = None,
                 clock_ms: Callable[[], int] = wall_clock_ms, write_timeout_s: float = 30.0,
                 close_timeout_s: float = 2.0, send_budget: SendBudget | None = None,
                 receive_budget: ReceiveBudget | None = None) -> None:
        self.conn = conn
        self.stream = stream
        self.on_event: EventHandler = on_event or _ignore
        self._clock = clock_ms
        self._write_timeout = write_timeout_s
        self._close_timeout = close_timeout_s
        self._writer_kick = trio.Event()
        self._timer_kick = trio.Event()
        self._timer_armed_ms: int | None = None  # what _timer sleeps until (None: no deadline)
        # Made by a task that waits for room; set (and dropped) when a write
        # made progress or the connection ended. Events are made only when
        # someone waits: a write or a delivery with nobody waiting costs none.
        self._space: trio.Event | None = None
        self._in_flight = 0
        self._delivering = False  # a delivery loop is running (perhaps suspended in on_event)
        self._delivered: trio.Event | None = None  # made by a task waiting for that loop to end
        self.closed = trio.Event()  # set once the stream is closed
        self.terminated: ConnectionTerminated | None = None
        # Direct mode (plain TCP, see the module docstring): the socket's file
        # descriptor, -1 otherwise and once the stream is being closed (the
        # number may then be reused by another connection). POSIX only: on
        # Windows a socket is not a file descriptor os.read can use.
        self._fd = stream.socket.fileno() if type(stream) is trio.SocketStream and _POSIX else -1
        self._unsent: bytes | memoryview = b""  # direct mode: taken from the Connection, not yet by the kernel
        self._write_failed: str | None = None  # direct mode: why the socket cannot be written to
        # Direct mode: the first message queued from outside a delivery since
        # the last read is written at once (a lone call does not wait for the
        # writer task); later ones are left to the writer, which sends them
        # together, so a burst of calls is still one write, not one per call.
        self._write_next_send = True
        self._drained = False  # direct mode: the last read did not fill the buffer
        self._slice = RECEIVE_SLICE  # bytes fed per slice of a read (see _receive)
        self._events = 0  # events delivered so far (the slice follows bytes per event)
        self._send_budget = send_budget
        self._charged = 0  # what this driver's backlog adds to send_budget.used
        self._receive_budget = receive_budget
        self._reserved = 0  # what the frame being received holds of receive_budget

    # ---------------------------------------------------------------- API

    async def run(self) -> None:
        """Start the Connection (if not started) and run it to the end; the
        stream is always closed on return."""
        try:
            if self.conn.state is ConnState.IDLE:
                self.conn.start(self._clock())
            async with trio.open_nursery() as nursery:
                # Events start() queued (raw framing: Negotiated at once) go
                # out now, not on the first read: a relay never speaks first.
                nursery.start_soon(self._deliver)
                nursery.start_soon(self._reader)
                nursery.start_soon(self._timer)
                await self._writer()
                nursery.cancel_scope.cancel()
            await self._deliver()  # a final ConnectionTerminated from a close in the writer
        finally:
            self._fd = -1  # nothing may touch the descriptor once it is closed
            if self._send_budget is not None:
                self._send_budget.used -= self._charged  # whatever was unsent is dropped with the stream
                self._charged = 0
            if self._receive_budget is not None:
                self._receive_budget.release(self._reserved)  # so is a half-received frame
                self._reserved = 0
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self._close_timeout) as scope:
                    try:
                        await self.stream.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                if scope.cancelled_caught:
                    await trio.aclose_forcefully(self.stream)
                self.closed.set()

    @property
    def backlog(self) -> int:
        """Bytes queued in the Connection plus bytes handed to ``send_all``."""
        return self.conn.pending_bytes + self._in_flight

    def send_nowait(self, out: Outbound) -> Envelope | None:
        """Seal and queue ``out`` now (LocalProtocolError if not allowed); its
        envelope, or ``None`` when ``out`` came sealed (``out.wire``)."""
        env = self.conn.send(out, self._clock())
        if self._write_next_send and self._fd >= 0 and not self._delivering:
            self._write_next_send = False
            self._write_direct()
        self._kick()
        self._charge()
        return env

    async def send(self, out: Outbound) -> Envelope | None:
        """Like :meth:`send_nowait`, but first wait while the backlog is full."""
        while self.backlog > self.conn.config.max_send_buffer and self.conn.state is not ConnState.CLOSED:
            await self._wait_space()
        return self.send_nowait(out)

    def start_drain(self, reason: int = 0, message: str = "") -> None:
        """GOAWAY now; the connection closes when the owner closes it or the
        drain period ends."""
        self.conn.start_drain(self._clock(), reason, message)
        self._kick()

    def close(self, reason: str = "closed locally") -> None:
        """Close now (queued bytes are still flushed, briefly)."""
        self.conn.close(reason)
        self._kick()

    async def aclose(self, reason: int = 0, message: str = "closing") -> None:
        """Clean close while :meth:`run` is running: GOAWAY, close, and wait
        until the queued bytes are flushed and the stream is closed. (Letting
        in-flight work finish first is the owner's call: ``start_drain``,
        wait, then ``aclose``.)"""
        self.start_drain(reason, message)
        self.close()
        await self.closed.wait()

    # -------------------------------------------------------------- tasks

    async def _reader(self) -> None:
        conn = self.conn
        while conn.state is not ConnState.CLOSED:
            while self._must_pause() and conn.state is not ConnState.CLOSED:
                await self._wait_space()  # the peer is not reading: neither do we
            broken: str | None = None
            data: bytes | bytearray
            if self._fd >= 0:
                data, broken = await self._read_direct()
            else:
                try:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    data, broken = b"", _broken_reason(exc, "peer closed the connection")
            if conn.state is ConnState.CLOSED:
                break
            if data:
                await self._receive(data)
                if self._receive_budget is not None:
                    await self._reserve_incoming_frame(self._receive_budget)
                continue
            if broken is not None:
                conn.receive_eof(broken)
            else:
                # A clean EOF may be a half-close: the Connection decides
                # whether replies can still go out (it then drains).
                conn.end_of_input(self._clock())
            self._kick()
            await self._deliver()
            if conn.input_ended:
                return  # nothing more to read; the writer and timer carry on

    async def _receive(self, data: bytes | bytearray) -> None:
        """Feed one read to the Connection a slice at a time, delivering the
        events of each slice and letting the writer send what they produced
        before the next slice is verified. A read holds up to ~35 pipelined
        messages; handled in one piece, the first reply would wait for every
        signature in it to be checked, and the peer would sit idle meanwhile.
        (The decoder buffers frames cut between slices.)"""
        conn = self.conn
        self._write_next_send = True
        size = self._slice
        events = self._events
        for start in range(0, len(data), size):
            if start:
                if conn.state is ConnState.CLOSED:
                    return
                # The writer sends the replies so far (direct mode wrote them
                # already); callers woken by the slice's replies send their next
                # calls; other connections get their turn.
                await trio.lowlevel.checkpoint()
            conn.receive_data(data[start:start + size], self._clock())
            self._kick()
            await self._deliver()
        events = self._events - events
        if events:
            self._slice = min(RECEIVE_SIZE, max(RECEIVE_SLICE, len(data) * SLICE_MESSAGES // events))

    async def _reserve_incoming_frame(self, budget: ReceiveBudget) -> None:
        """Before reading on into a large frame, hold its declared size in the
        shared budget, waiting (not reading) while it does not fit; give back
        the reservation of a frame that is complete. Reading stops here at
        most one read into the frame, so a waiting connection holds little."""
        size = self.conn.incoming_frame_size
        if size <= SMALL_FRAME:
            size = 0
        if size == self._reserved:
            return  # the same frame is still arriving (or none, again)
        budget.release(self._reserved)
        self._reserved = 0
        if size and not budget.try_reserve(size):
            budget.note_wait(size, self._clock())
            while not budget.try_reserve(size):
                await budget.wait_for_room()
                if self.conn.state is ConnState.CLOSED:
                    return  # the frame timeout (or the owner) ended it while it waited
        self._reserved = size

    async def _read_direct(self) -> tuple[bytes, str | None]:
        """Direct mode: the next read, or ``(b"", reason)`` when the peer is
        gone. Yields once either way: waiting for data, or a checkpoint when
        data was already there (cancellation, and other connections' turn).
        After a read that did not fill the buffer the socket was drained, so
        it waits first instead of asking the kernel for what it just said it
        does not have (a sequential peer's every other read, and an exception)."""
        fd = self._fd
        must_wait = self._drained
        waited = False
        while True:
            if must_wait:
                try:
                    await trio.lowlevel.wait_readable(fd)
                except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                    return b"", "peer closed the connection"
                waited = True
            try:
                data = os.read(fd, RECEIVE_SIZE)
            except BlockingIOError:
                must_wait = True
                continue
            except OSError as exc:
                return b"", f"peer closed the connection ({exc.strerror or exc})"
            self._drained = len(data) < RECEIVE_SIZE
            if not waited:
                await trio.lowlevel.checkpoint()
            return data, None

    def _write_direct(self) -> None:
        """Direct mode: give the kernel what it takes now, never waiting. What
        it does not take stays in ``_unsent`` (written before anything newer)
        and the writer task waits for room. A failed write is left to the
        writer task to act on (it closes the Connection)."""
        conn = self.conn
        while self._fd >= 0 and self._write_failed is None:
            data = self._unsent or conn.data_to_send()
            if not data:
                break
            try:
                sent = os.write(self._fd, data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._write_failed = f"cannot write to the peer ({exc.strerror or exc})"
                self._unsent, self._in_flight = b"", 0
                self._writer_kick.set()
                break
            if sent:
                self._signal_space()
            if sent < len(data):
                self._unsent = memoryview(data)[sent:]
                self._in_flight = len(self._unsent)
                self._writer_kick.set()
                break
            self._unsent, self._in_flight = b"", 0
        self._charge()  # every way out of the loop changed the backlog

    async def _writer_direct(self) -> None:
        conn = self.conn
        while True:
            self._writer_kick = trio.Event()
            self._write_direct()
            if self._write_failed is not None:
                conn.close(self._write_failed)  # the peer cannot be written to: nothing more to say
                conn.data_to_send()
                return
            if not self._unsent:
                if conn.state is ConnState.CLOSED:
                    return
                await self._writer_kick.wait()
                continue
            timeout = self._write_timeout if conn.state is not ConnState.CLOSED else self._close_timeout
            with trio.move_on_after(timeout) as scope:
                try:
                    await trio.lowlevel.wait_writable(self._fd)
                except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                    self._write_failed = "cannot write to the peer"
            if scope.cancelled_caught:
                self._write_failed = f"the peer read nothing for {timeout:g} s"

    async def _writer(self) -> None:
        if self._fd >= 0:
            await self._writer_direct()
            return
        conn = self.conn
        while True:
            self._writer_kick = trio.Event()
            data = conn.data_to_send()
            if not data:
                if conn.state is ConnState.CLOSED:
                    return
                await self._writer_kick.wait()
                continue
            self._in_flight = len(data)
            self._charge()
            timeout = self._write_timeout if conn.state is not ConnState.CLOSED else self._close_timeout
            failed: str | None = None
            with trio.move_on_after(timeout) as scope:
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    failed = _broken_reason(exc, "cannot write to the peer")
            if scope.cancelled_caught:
                failed = f"the peer read nothing for {timeout:g} s"
            self._in_flight = 0
            self._charge()
            self._signal_space()
            if failed is not None:
                conn.close(failed)  # the peer cannot be written to: nothing more to say
                conn.data_to_send()
                return

    async def _timer(self) -> None:
        conn = self.conn
        while conn.state is not ConnState.CLOSED:
            self._timer_kick = trio.Event()
            self._timer_armed_ms = conn.get_timer()
            with trio.move_on_at(to_trio_deadline(self._timer_armed_ms, self._clock)):
                await self._timer_kick.wait()
                continue
            conn.handle_timer(self._clock())
            self._writer_kick.set()
            await self._deliver()

    # ------------------------------------------------------------ helpers

    def _kick(self) -> None:
        # Wake the writer only when it has something to do (bytes to send, or
        # a close to carry out): a wakeup costs a pass of trio's scheduler, and
        # a read usually queues nothing until its events have been delivered.
        # In direct mode a delivery in progress writes its own bytes when it ends.
        conn = self.conn
        if conn.state is ConnState.CLOSED or (conn.pending_bytes and (self._fd < 0 or not self._delivering)):
            self._writer_kick.set()
        # Wake the timer task only for an earlier deadline. Most traffic only
        # pushes the keepalive deadline later; the timer notices that when it
        # wakes, so waking it on every message would be pure overhead.
        deadline = self.conn.get_timer()
        if deadline is not None and (self._timer_armed_ms is None or deadline < self._timer_armed_ms):
            self._timer_kick.set()
        elif deadline is None and self.conn.state is ConnState.CLOSED:
            self._timer_kick.set()

    def _must_pause(self) -> bool:
        """Stop reading? When this peer leaves more than our own limit unread,
        or when the shared budget is spent and this peer has bytes unsent."""
        backlog = self.backlog
        if backlog > self.conn.config.max_send_buffer:
            return True
        budget = self._send_budget
        if budget is None or not backlog:
            return False
        self._charge()
        return budget.exceeded

    def _charge(self) -> None:
        """Bring the shared budget up to date with this driver's backlog
        (called wherever the backlog changes)."""
        if self._send_budget is not None:
            backlog = self.backlog
            self._send_budget.used += backlog - self._charged
            self._charged = backlog

    async def _wait_space(self) -> None:
        # Re-check the backlog after every writer step (or a close).
        if self._space is None:
            self._space = trio.Event()
        await self._space.wait()

    def _signal_space(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None

    async def _deliver(self) -> None:
        # The reader and the timer both deliver, one loop at a time so events
        # reach the owner in order. A caller that finds another task's loop
        # running (suspended inside on_event) waits for it, as it would for a
        # lock, so a slow owner also slows down reading. Uncontended (always,
        # for the daemon, whose handlers never suspend) this costs no trip
        # through the scheduler, which taking even a free trio lock does.
        while self._delivering:
            if self._delivered is None:
                self._delivered = trio.Event()
            await self._delivered.wait()
        self._delivering = True
        try:
            while (event := self.conn.next_event()) is not None:
                self._events += 1
                if isinstance(event, ConnectionTerminated):
                    self.terminated = event
                    self._signal_space()  # release anyone waiting for room
                    self._writer_kick.set()
                await self.on_event(event)
        finally:
            self._delivering = False
            if self._delivered is not None:
                self._delivered.set()
                self._delivered = None
        if self._fd >= 0:
            self._write_direct()  # the replies this delivery produced, in one write
        # Replies sent from inside on_event kicked the writer already (direct
        # mode: were just written); this catches anything the owner queued on
        # the Connection directly.
        self._kick()
        self._charge()


def _broken_reason(exc: BaseException, default: str) -> str:
    """Why a stream broke, for the ConnectionTerminated reason (a TLS failure
    says so; a stream that knows why it ended has a ``reason``)."""
    reason = getattr(exc, "reason", None)
    return tls_failure(exc) or (reason if type(reason) is str else default)


async def open_stream(url: AmpUrl, *, ssl_context: ssl.SSLContext | None = None,
                      happy_eyeballs_delay: float | None = 0.25) -> trio.abc.Stream:
    """TCP (and, for ``amps://``, TLS) connection to ``url``. An ``amps`` URL
    without a context gets a verifying default client context."""
    stream: trio.abc.Stream = await trio.open_tcp_stream(url.host, url.port,
                                                         happy_eyeballs_delay=happy_eyeballs_delay)
    if url.tls:
        from .tls import client_context, wrap_client

        stream = wrap_client(stream, ssl_context or client_context(), url.host)
    return stream
