"""What does OpenTelemetry tracing (``serve --trace``, docs/scaling.md) cost
per invoke, against a plain invoke? The protocol work alone, as
tools/bench_protocol.py measures it (daemons in this process, bytes handed
across by hand), in one run:

* a plain pair: ``serve --demo`` and a caller, neither tracing;
* a traced pair: the same two, both tracing (the real OpenTelemetry SDK, a
  TracerProvider with the BatchSpanProcessor ``serve --trace`` uses, into an
  InMemorySpanExporter emptied every round), so every invoke makes a CLIENT span, signs the
  ``ampcap.trace`` ext entry, and on the daemon verifies it and makes the
  SERVER span, named, attributed and ended with the terminal reply.

Rounds of the two pairs alternate, so a busy machine slows both alike. Each
side's CPU per invoke (this thread's CPU time: both daemons run in it) is
printed in units of one Ed25519 sign plus verify measured in the same run.
A real exporter's work (encoding, sending) runs in the SDK's batch thread
and is not counted here; the processor's hand-off is.

    python tools/bench_tracing.py [--rounds 100] [--batch 64]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
import bench_protocol  # noqa: E402
from bench_daemon import PARAMS, crypto_floor_us  # noqa: E402
from bench_protocol import CAPABILITY, Pair, _now_ms, demo_daemons, pair_args, run_with_identity, start_pair  # noqa: E402

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from ampcap.net.features.tracing import trace_daemon  # noqa: E402
from ampcap.wire.extensions import TRACE  # noqa: E402


class TracedPair(Pair):
    exporters: list[InMemorySpanExporter]

    def round(self, batch: int) -> tuple[float, float]:
        """``batch`` traced invokes there and back, as Calls.invoke makes them
        when tracing (a CLIENT span, the signed entry): (client s, server s)."""
        client, server = self.client, self.server
        clock = bench_protocol.CLOCK
        t0 = clock()
        calls = []
        for _ in range(batch):
            span, ext_for = client.tracing.calling(self.clink, CAPABILITY, None)
            handle, out = client.invoker.start_invoke(self.clink, CAPABILITY, PARAMS, timeout_ms=60_000,
                                                      to=self.cconn.peer_did, ext_for=ext_for, now_ms=_now_ms())
            calls.append((span, client.calls.register(self.clink, handle, out, None)))
        data = self.cconn.data_to_send()
        t1 = clock()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, server, self.slink)
        reply = self.sconn.data_to_send()
        t2 = clock()
        self.cconn.receive_data(reply, _now_ms())
        self._deliver(self.cconn, client, self.clink)
        for span, call in calls:
            client.tracing.ended(span, call.error)
        t3 = clock()
        for _, call in calls:
            if not call.done.is_set() or call.error is not None:
                raise SystemExit(f"an invoke failed: {call.error}")
        if data.count(TRACE.encode()) != batch:
            raise SystemExit("not one ampcap.trace entry per invoke")
        self.server.tracing.provider.force_flush()  # the batch thread's export: not this thread's CPU
        server_spans = self.exporters[0].get_finished_spans()
        if len(server_spans) != batch or any(s.parent is None for s in server_spans):
            raise SystemExit("not one server span per invoke, each parented on the caller's")
        for exporter in self.exporters:
            exporter.clear()
        return (t1 - t0) + (t3 - t2), t2 - t1


def _recorded(daemon: Any) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=4096))
    trace_daemon(daemon, provider)
    return exporter


async def run(args: Any, identity_file: Path) -> None:
    batch, rounds = args.batch, args.rounds
    bench_protocol.CLOCK = time.thread_time  # CPU of this thread: other processes do not count
    plain_server, plain_client = demo_daemons(identity_file, batch)
    traced_server, traced_client = demo_daemons(identity_file, batch)
    exporters = [_recorded(traced_server), _recorded(traced_client)]  # before the pair's HELLO: ampcap.trace agreed
    async with trio.open_nursery() as nursery:
        plain = await start_pair(nursery, plain_server, plain_client, Pair)
        traced = await start_pair(nursery, traced_server, traced_client, TracedPair)
        traced.exporters = exporters
        if TRACE not in traced.cconn.extensions or TRACE in plain.cconn.extensions:
            raise SystemExit("ampcap.trace agreed where it should not be, or not where it should")
        for _ in range(5):
            plain.round(batch)
            traced.round(batch)
        samples: dict[str, list[float]] = {"plain c": [], "plain s": [], "traced c": [], "traced s": []}
        for _ in range(rounds):
            for name, pair in (("plain", plain), ("traced", traced)):
                c, s = pair.round(batch)
                samples[f"{name} c"].append(c * 1e6 / batch)
                samples[f"{name} s"].append(s * 1e6 / batch)
        floor = crypto_floor_us()
        nursery.cancel_scope.cancel()
    m = {k: statistics.median(v) for k, v in samples.items()}
    print(f"tracing, protocol work per invoke, {batch} per batch, median of {rounds} alternating rounds "
          f"(org.ampcap.demo.echo:1.0.0, CPython {sys.version.split()[0]}, "
          f"opentelemetry-sdk {_sdk_version()})")
    print(f"Ed25519 sign + verify here: {floor:.1f} µs")
    print(f"{'':>16} | {'daemon µs':>9} | {'in Ed25519':>10} | {'client µs':>9} | {'in Ed25519':>10}")
    for name in ("plain", "traced"):
        s, c = m[f"{name} s"], m[f"{name} c"]
        print(f"{name + ' invoke':>16} | {s:>9.1f} | {s / floor:>9.2f}× | {c:>9.1f} | {c / floor:>9.2f}×")
    ds, dc = m["traced s"] - m["plain s"], m["traced c"] - m["plain c"]
    print(f"{'tracing adds':>16} | {ds:>9.1f} | {ds / floor:>9.2f}× | {dc:>9.1f} | {dc / floor:>9.2f}×")
    print(f"a traced invoke's daemon CPU / a plain one's: {m['traced s'] / m['plain s']:.2f}×")


def _sdk_version() -> str:
    from importlib.metadata import version

    try:
        return version("opentelemetry-sdk")
    except Exception:
        return "?"


def main() -> None:
    args = pair_args(__doc__, rounds=100, rounds_help="rounds of each pair measured (default 100)", batch=64,
                     batch_help="invokes per batch (default 64)", quick_rounds=5)
    run_with_identity(run, args)


if __name__ == "__main__":
    main()
