"""A light load generator: N independent connections, each writing every
message on its own, as most callers do (not ampcap's own batching client).

Each connection is an :class:`~ampcap.interop.probe.Probe` with an identity
of its own: it opens the session (HANDSHAKE, HELLO), then pre-signs its
CAP_INVOKEs before the clock starts (``prepare``), so what the client does
per call during the run is one ``write`` of one ready frame, a read, and a
look at the reply's type; the client stays light, like ``wrk``, and the
daemon's CPU per invoke is what gets measured. One invoke is in flight per
connection at a time: the next frame is written once the previous one's
terminal reply has arrived.

The API, for the benchmarks that build on it (``bench_daemon.py`` here,
a scale benchmark with several daemon workers later):

* :func:`prepare` (async): open ``connections`` sessions to ``url`` and
  pre-sign ``per_connection`` frames on each: a :class:`Prepared`;
* :func:`warm_up` (async): a few untimed calls on every connection;
* :func:`run_load` (async): drive a :class:`Prepared` for ``duration``
  seconds: a :class:`LoadResult` (calls, errors, elapsed, latencies,
  this process's CPU);
* :func:`run` (sync): both, in a fresh trio run, for a caller without one;
* :func:`run_processes` (sync): the same load split over several client
  processes (``connections`` spread across them), results merged, for when
  one client process would be the bottleneck.

    python tools/loadgen.py URL [--connections 64] [--seconds 3] [--processes 1]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from ampcap.interop.probe import Probe, ProbeSettings  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.peer.invoker import invoke_body  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

__all__ = ["Prepared", "LoadResult", "prepare", "run_load", "run", "run_processes", "DEFAULT_CAPABILITY",
           "DEFAULT_PARAMS"]

DEFAULT_CAPABILITY = "org.ampcap.demo.echo:1.0.0"
DEFAULT_PARAMS: dict[str, Any] = {"message": "x" * 160}  # a CAP_INVOKE of ~450 bytes once signed
# How many calls per second one connection might make at most here, to size
# the pre-signed pool (a connection that runs out signs more as it goes).
MAX_RATE_PER_CONNECTION = 4000
_LENGTH = struct.Struct(">I")
_AMP_MESSAGE = 0x01  # RFC 002 frame type of an AMP message
_CAP_RESULT = int(MessageType.CAP_RESULT)
_ERROR = int(MessageType.ERROR)
_INTERIM = frozenset(int(t) for t in (MessageType.ACK, MessageType.PROCESSING, MessageType.PROGRESS))
_EXPECTED = _INTERIM | {_CAP_RESULT, _ERROR}
_READ = 64 * 1024


@dataclass
class Prepared:
    """Open sessions, each with the frames it will send (signed, framed)."""

    probes: list[Probe]
    frames: list[list[bytes]]
    capability: str
    params: Any

    async def aclose(self) -> None:
        for probe in self.probes:
            await probe.aclose()


@dataclass
class LoadResult:
    connections: int
    calls: int = 0  # terminal replies that were CAP_RESULTs
    errors: int = 0  # terminal replies that were ERRORs
    elapsed_s: float = 0.0
    latencies_us: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    signed_during_run: int = 0  # frames signed after the clock started (the pool ran out)

    def merge(self, other: LoadResult) -> None:
        self.connections += other.connections
        self.calls += other.calls
        self.errors += other.errors
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        self.latencies_us += other.latencies_us
        self.client_cpu_s += other.client_cpu_s
        self.signed_during_run += other.signed_during_run

    @property
    def rate(self) -> float:
        return self.calls / self.elapsed_s if self.elapsed_s else 0.0


def _sign_invokes(probe: Probe, count: int, capability: str, params: Any) -> list[bytes]:
    body = invoke_body(capability, params)
    return [probe.frame(probe.seal(int(MessageType.CAP_INVOKE), body)[1]) for _ in range(count)]


async def prepare(url: str, connections: int, per_connection: int, *, capability: str = DEFAULT_CAPABILITY,
                  params: Any = None, make_frames: Callable[[Probe, int], list[bytes]] | None = None) -> Prepared:
    """Open ``connections`` sessions to ``url`` (HANDSHAKE + HELLO each, a
    fresh identity each) and pre-sign ``per_connection`` invokes on each:
    plain invokes of ``capability`` with ``params``, or whatever
    ``make_frames(probe, count)`` returns (frames ready to write, sealed
    with ``probe.seal`` and framed with ``probe.frame``; each must get
    exactly one terminal reply). A connection that runs out of frames signs
    plain invokes of ``capability`` as it goes."""
    params = DEFAULT_PARAMS if params is None else params
    amp_url = parse_url(url)
    settings = ProbeSettings()
    probes: list[Probe] = []
    try:
        for _ in range(connections):
            probe = await Probe.open(amp_url, settings)
            probes.append(probe)
            await probe.open_session()
    except BaseException:
        for probe in probes:
            await probe.aclose()
        raise
    if make_frames is None:
        frames = [_sign_invokes(probe, per_connection, capability, params) for probe in probes]
    else:
        frames = [list(make_frames(probe, per_connection)) for probe in probes]
    return Prepared(probes, frames, capability, params)


async def _one_connection(prepared: Prepared, index: int, deadline: float, result: LoadResult,
                          warmup: int) -> None:
    probe = prepared.probes[index]
    frames = prepared.frames[index]
    # Plain TCP: the socket's descriptor, written and read directly (a trio
    # send_all/receive_some costs scheduler passes of its own; the client
    # should cost as little as it can). Any other stream: its own methods.
    stream = probe.stream
    fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
    buffer = bytearray()
    perf = time.perf_counter
    sent = 0
    while True:
        t0 = perf()
        if t0 >= deadline and sent >= warmup:
            return
        if sent < len(frames):
            frame = frames[sent]
        else:  # the pool ran out: sign as we go (counted, so a report can say so)
            frame = _sign_invokes(probe, 1, prepared.capability, prepared.params)[0]
            result.signed_during_run += 1
            t0 = perf()
        sent += 1
        if fd >= 0:
            await _write_all(fd, frame)
        else:
            await stream.send_all(frame)
        while True:  # until this invoke's terminal reply (interim ones are skipped)
            while len(buffer) < 4 or len(buffer) < 4 + _LENGTH.unpack_from(buffer)[0]:
                if fd >= 0:
                    await trio.lowlevel.wait_readable(fd)
                    try:
                        data = os.read(fd, _READ)
                    except BlockingIOError:
                        continue
                else:
                    data = await stream.receive_some(_READ)
                if not data:
                    raise RuntimeError("the daemon closed a load connection")
                buffer += data
            size = _LENGTH.unpack_from(buffer)[0]
            ftype, payload = buffer[4], bytes(buffer[5:4 + size])
            del buffer[:4 + size]
            if ftype != _AMP_MESSAGE:
                continue  # PING/PONG and the like
            typ = _message_type(payload)
            if typ in _INTERIM:
                continue
            break
        if sent <= warmup:
            continue
        result.latencies_us.append((perf() - t0) * 1e6)
        if typ == _CAP_RESULT:
            result.calls += 1
        else:
            result.errors += 1


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)


_TYP_KEY = b"\x63typ"  # the text key "typ" in CBOR


def _message_type(payload: bytes) -> int:
    """The ``typ`` of an envelope, without decoding or verifying it: the
    client is a load, not a judge (the daemon's replies are checked by the
    test suite). Deterministic CBOR puts the 3-letter header keys before the
    body, so the first "typ" key is the header's; anything unexpected falls
    back to a full decode."""
    at = payload.find(_TYP_KEY) + 4
    if at >= 4 and at < len(payload):
        head = payload[at]
        typ = head if head < 24 else payload[at + 1] if head == 24 and at + 1 < len(payload) else -1
        if typ in _EXPECTED:
            return typ
    from ampcap.wire.cbor import loads

    envelope = loads(payload)
    typ = envelope.get("typ") if type(envelope) is dict else None
    return typ if type(typ) is int else -1


async def warm_up(prepared: Prepared, calls: int = 20) -> None:
    """``calls`` untimed invokes on every connection at once (imports, caches,
    the daemon's first-use work), taken from the front of each pool."""
    async with trio.open_nursery() as nursery:
        for i in range(len(prepared.probes)):
            nursery.start_soon(_one_connection, prepared, i, 0.0, LoadResult(0), calls)
    for frames in prepared.frames:
        del frames[:calls]


async def run_load(prepared: Prepared, duration: float) -> LoadResult:
    """Every connection of ``prepared`` writes its invokes one at a time (one
    write per message, the next after the previous one's terminal reply)
    for ``duration`` seconds. Warm up first (:func:`warm_up`)."""
    result = LoadResult(connections=len(prepared.probes))
    cpu0, start = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(len(prepared.probes)):
            nursery.start_soon(_one_connection, prepared, i, start + duration, result, 0)
    result.elapsed_s = time.perf_counter() - start
    result.client_cpu_s = time.process_time() - cpu0
    return result


def pool_size(connections: int, duration: float, warmup: int = 20) -> int:
    """Frames to pre-sign per connection for ``duration`` seconds."""
    total = MAX_RATE_PER_CONNECTION * duration
    return warmup + int(max(50, total / connections if connections > 1 else total))


async def _prepare_and_run(url: str, connections: int, duration: float, capability: str, params: Any
                           ) -> LoadResult:
    prepared = await prepare(url, connections, pool_size(connections, duration), capability=capability,
                             params=params)
    try:
        await warm_up(prepared)
        return await run_load(prepared, duration)
    finally:
        await prepared.aclose()


def run(url: str, connections: int, duration: float, *, capability: str = DEFAULT_CAPABILITY,
        params: Any = None) -> LoadResult:
    """Prepare and run the load in a fresh trio run of this process."""
    return trio.run(_prepare_and_run, url, connections, duration, capability, params)


def _child(url: str, connections: int, duration: float, capability: str, params: Any, start_at: float
           ) -> LoadResult:
    async def main() -> LoadResult:
        prepared = await prepare(url, connections, pool_size(connections, duration), capability=capability,
                                 params=params)
        try:
            await warm_up(prepared)
            await trio.sleep(max(0.0, start_at - time.time()))  # every process starts its clock together
            return await run_load(prepared, duration)
        finally:
            await prepared.aclose()

    return trio.run(main)


def run_processes(url: str, connections: int, duration: float, processes: int, *,
                  capability: str = DEFAULT_CAPABILITY, params: Any = None, ready_s: float = 5.0,
                  on_start: Callable[[], None] | None = None) -> LoadResult:
    """The load split over ``processes`` client processes (connections spread
    evenly), each preparing and warming up, then starting its timed run
    ``ready_s`` from now, all at once; merged. ``on_start`` is called here
    at that moment (e.g. to read the server's CPU time)."""
    shares = [connections // processes + (1 if i < connections % processes else 0) for i in range(processes)]
    shares = [s for s in shares if s]
    start_at = time.time() + ready_s
    merged = LoadResult(connections=0)
    with ProcessPoolExecutor(len(shares)) as pool:
        futures = [pool.submit(_child, url, share, duration, capability, params, start_at) for share in shares]
        if on_start is not None:
            time.sleep(max(0.0, start_at - time.time()))
            on_start()
        for future in futures:
            merged.merge(future.result())
    return merged


def _percentile(data: Sequence[float], q: float) -> float:
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--capability", default=DEFAULT_CAPABILITY)
    args = parser.parse_args()
    if args.connections < 1 or args.seconds <= 0 or args.processes < 1:
        parser.error("--connections, --seconds and --processes must be positive")
    if args.processes > 1:
        result = run_processes(args.url, args.connections, args.seconds, args.processes, capability=args.capability)
    else:
        result = run(args.url, args.connections, args.seconds, capability=args.capability)
    print(f"{result.connections} connections, {result.calls:,} calls ({result.errors} errors) in "
          f"{result.elapsed_s:.2f} s: {result.rate:,.0f}/s, p50 {_percentile(result.latencies_us, 0.5):,.0f} µs, "
          f"p99 {_percentile(result.latencies_us, 0.99):,.0f} µs, client CPU "
          f"{1e6 * result.client_cpu_s / max(1, result.calls):,.0f} µs/call"
          + (f", {result.signed_during_run} signed during the run" if result.signed_during_run else ""))


if __name__ == "__main__":
    main()
