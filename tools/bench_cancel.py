"""What does ampcap's remote cancel (R23, docs/steering.md) cost the daemon,
against a plain invoke? The protocol work alone, as tools/bench_protocol.py
measures it (two daemons in this process, bytes handed across by hand).

A round starts N invokes of ``org.ampcap.demo.sleep`` (60 s) on the calling
side and lets the serving daemon accept them and start their tasks; then
the caller gives up on all of them as ``Remote.invoke`` does when it is
cancelled (a cancel message each, the calls forgotten). What is timed on
the serving side is the cancels only: parsing and verifying them, the
executor ending each invoke with its one CAP_RESULT 5003 (sealed and signed),
cancelling the job's scope, and the tasks unwinding in the event loop.
Timed as this thread's CPU time (both daemons run in it). Printed per
invoke, next to a plain invoke's daemon CPU measured in the same run: the
demo echo (run inline, the cheapest invoke there is) and the demo sleep of
0 ms (run as a task, as every invoke that can be cancelled is); the target
is a cancel costing at most one plain invoke.

    python tools/bench_cancel.py [--rounds 100] [--batch 64]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
import bench_protocol  # noqa: E402
from bench_protocol import Pair, _now_ms, demo_daemons, measure, pair_args, run_with_identity, start_pair  # noqa: E402

from ampcap.net.daemon.calls import send_cancel  # noqa: E402

SLEEP = ("org.ampcap.demo.sleep", "1.0.0")
CANCELLED_TRUE = b"\x69cancelled\xf5"  # the CBOR of details' "cancelled": true


class CancelPair(Pair):
    async def task_round(self, batch: int) -> tuple[float, float]:
        """``batch`` plain invokes of a capability that runs as a task (the
        demo sleep, 0 ms), there and back: (client s, server s)."""
        client, server = self.client, self.server
        t0 = time.thread_time()
        calls = []
        for _ in range(batch):
            handle, out = client.invoker.start_invoke(self.clink, SLEEP, {"ms": 0}, timeout_ms=60_000,
                                                      to=self.cconn.peer_did, now_ms=_now_ms())
            calls.append(client.calls.register(self.clink, handle, out, None))
        data = self.cconn.data_to_send()
        t1 = time.thread_time()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, server, self.slink)
        await trio.testing.wait_all_tasks_blocked()  # the tasks run and complete
        reply = self.sconn.data_to_send()
        t2 = time.thread_time()
        self.cconn.receive_data(reply, _now_ms())
        self._deliver(self.cconn, client, self.clink)
        t3 = time.thread_time()
        if not all(call.done.is_set() and call.error is None for call in calls):
            raise SystemExit("a plain invoke failed")
        return (t1 - t0) + (t3 - t2), t2 - t1

    async def cancel_round(self, batch: int) -> tuple[float, float]:
        """``batch`` invokes started, then cancelled: (client s, server s) spent on the cancels."""
        client, server = self.client, self.server
        outs = []
        for _ in range(batch):
            handle, out = client.invoker.start_invoke(self.clink, SLEEP, {"ms": 60_000}, timeout_ms=120_000,
                                                      to=self.cconn.peer_did, now_ms=_now_ms())
            client.calls.register(self.clink, handle, out, None)
            outs.append(out)
        self.sconn.receive_data(self.cconn.data_to_send(), _now_ms())
        self._deliver(self.sconn, server, self.slink)
        await trio.testing.wait_all_tasks_blocked()  # every job's task has started and sleeps
        if server.jobs.stats["invokes"] - server.jobs.stats["completed"] != batch:
            raise SystemExit("the sleeps did not all start")

        t0 = time.thread_time()
        for out in outs:  # what Calls._await does when its caller is cancelled
            client.invoker.abandon(out.msg_id)
            client.calls.finish(out.msg_id)
            if not send_cancel(self.clink, out):
                raise SystemExit("the cancel extension was not agreed")
        data = self.cconn.data_to_send()
        t1 = time.thread_time()
        self.sconn.receive_data(data, _now_ms())
        self._deliver(self.sconn, server, self.slink)
        reply = self.sconn.data_to_send()
        await trio.testing.wait_all_tasks_blocked()  # the cancelled tasks unwind
        t2 = time.thread_time()
        self.cconn.receive_data(reply, _now_ms())
        self._deliver(self.cconn, client, self.clink)  # the 5003 replies, dropped as late
        t3 = time.thread_time()
        if server.jobs.stats["invokes"] != server.jobs.stats["completed"] or server.executor.running:
            raise SystemExit("not every invoke ended")
        if reply.count(CANCELLED_TRUE) != batch:
            raise SystemExit("not one cancelled CAP_RESULT per invoke")
        return (t1 - t0) + (t3 - t2), t2 - t1


async def run(args: object, identity_file: Path) -> None:
    batch, rounds = args.batch, args.rounds  # type: ignore[attr-defined]
    # CPU time of this thread (both daemons and every task run in it), so
    # that other processes on a busy machine do not count.
    bench_protocol.CLOCK = time.thread_time
    server, client = demo_daemons(identity_file, batch)
    async with trio.open_nursery() as nursery:
        pair = await start_pair(nursery, server, client, CancelPair)
        plain_client, plain_server = measure(pair, batch, rounds)
        for _ in range(3):
            await pair.task_round(batch)
        task_client, task_server = [], []
        for _ in range(rounds):
            c, s = await pair.task_round(batch)
            task_client.append(c * 1e6 / batch)
            task_server.append(s * 1e6 / batch)
        for _ in range(3):
            await pair.cancel_round(batch)
        cancel_client, cancel_server = [], []
        for _ in range(rounds):
            c, s = await pair.cancel_round(batch)
            cancel_client.append(c * 1e6 / batch)
            cancel_server.append(s * 1e6 / batch)
        nursery.cancel_scope.cancel()
    cs, cc = statistics.median(cancel_server), statistics.median(cancel_client)
    print(f"remote cancel, protocol work per invoke, {batch} per batch, median of {rounds} rounds "
          f"(CPython {sys.version.split()[0]})")
    print(f"{'':>24} | {'daemon µs':>9} | {'client µs':>9}")
    ts, tc = statistics.median(task_server), statistics.median(task_client)
    print(f"{'plain invoke (echo)':>24} | {plain_server:>9.1f} | {plain_client:>9.1f}")
    print(f"{'plain invoke (a task)':>24} | {ts:>9.1f} | {tc:>9.1f}")
    print(f"{'cancel of a running one':>24} | {cs:>9.1f} | {cc:>9.1f}")
    print(f"a cancel's daemon CPU / a plain invoke's: {cs / plain_server:.2f}× the echo (run inline, no task), "
          f"{cs / ts:.2f}× one run as a task (target ≤ 1)")


def main() -> None:
    args = pair_args(__doc__, rounds=100, rounds_help="batches measured (default 100)", batch=64,
                     batch_help="invokes per batch (default 64)", quick_rounds=5)
    run_with_identity(run, args)


if __name__ == "__main__":
    main()
