"""Several processes of one identity on one store (R25), as real processes:
two daemons of one group with separate listeners (two machines), on SQLite
and on PostgreSQL; ``serve --workers N`` on shared sockets; a second daemon
that does not coordinate is refused (tests/cli/test_serve.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import PYTHON, _read_line  # noqa: E402
from processes import stop_process  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings, ReceivedKind  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.envelope import decode_envelope  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

RESULT = int(MessageType.CAP_RESULT)
ERROR = int(MessageType.ERROR)
PROCESSING = int(MessageType.PROCESSING)
SETTINGS = ProbeSettings(timeout_s=10.0, settle_s=0.0, default_ttl_ms=600_000)
CAPS = Path(__file__).parent / "soak_caps"


def manifest(tmp: Path, *, idempotent: bool = False) -> Path:
    path = tmp / ("soak-idempotent.toml" if idempotent else "soak.toml")
    path.write_text(f"""
python_path = ["{CAPS}"]

[[capability]]
name = "org.test.soak"
version = "1.0.0"
idempotent = {"true" if idempotent else "false"}
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
binding = {{ python = "soak_cap:record" }}
""")
    return path


def store_args(tmp: Path, target: str) -> list[str]:
    return ["--state-url", target] if target.startswith("postgresql://") else ["--state-dir", target]


class Serve:
    """``ampcap serve`` (one process, or a --workers parent) with its URL line read."""

    def __init__(self, tmp: Path, args: list[str], env: dict[str, str], log: Path, *,
                 idempotent: bool = False) -> None:
        self.err = tmp / f"serve-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen([PYTHON, "-m", "ampcap.cli.main", "serve", "--manifest",
                                      str(manifest(tmp, idempotent=idempotent)),
                                      "--listen", "127.0.0.1:0", *args], stdout=subprocess.PIPE,
                                     stderr=open(self.err, "w"), text=True,
                                     env=dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"),
                                              AMPCAP_SOAK_LOG=str(log), **env))
        line = _read_line(self.proc, 30.0)
        assert line, self.err.read_text()
        self.url, self.did = line.split()

    def stop(self) -> int:
        return stop_process(self.proc)


async def exchange(url: str, ident: Identity, wire: bytes, *, until: int = RESULT, timeout: float = 15.0
                   ) -> list[tuple[int, bytes]]:
    """Send ``wire`` on a new connection; the replies to it (type, raw bytes) up to one of type ``until``."""
    probe = await Probe.open(parse_url(url), SETTINGS, identity=ident)
    got: list[tuple[int, bytes]] = []
    request = decode_envelope(wire)
    try:
        await probe.open_session()
        await probe.send_bytes(probe.frame(wire))
        deadline = trio.current_time() + timeout
        while True:
            item = await probe.receive(deadline)
            if item is None or item.kind is ReceivedKind.CLOSED:
                return got
            env = item.envelope
            if env is not None and env.reply_to == request.id:
                got.append((env.typ, item.raw))
                if env.typ == until:
                    return got
    finally:
        await probe.aclose()


def sealed_invoke(did: str, ident: Identity, token: str, ms: int) -> bytes:
    """A CAP_INVOKE of the counted capability, signed once (a retry resends these bytes)."""
    probe = Probe(None, SETTINGS, identity=ident)  # type: ignore[arg-type]  # only to seal: no stream
    _, wire = probe.seal(int(MessageType.CAP_INVOKE), {"id": "org.test.soak:1.0.0",
                                                      "params": {"token": token, "ms": ms}}, to=did)
    return wire


def ran(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_two_machines_of_one_group_answer_a_duplicate_once(tmp_path: Path, store_target: str) -> None:
    # Two daemons, separate listeners, one store, one group token: a retry
    # reaching the other one while the first runs the invoke gets PROCESSING,
    # then the very bytes the first sent; the invoke ran once.
    log = tmp_path / "ran.log"
    group = {"AMPCAP_STORE_GROUP": "test-fleet"}
    a = Serve(tmp_path, store_args(tmp_path, store_target), group, log)
    try:
        b = Serve(tmp_path, store_args(tmp_path, store_target), group, log)
        try:
            ident = Identity.generate(os.urandom)
            wire = sealed_invoke(a.did, ident, "t1", 1500)

            async def both() -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
                first: list[Any] = []
                async with trio.open_nursery() as nursery:
                    async def at_a() -> None:
                        first.extend(await exchange(a.url, ident, wire))
                    nursery.start_soon(at_a)
                    await trio.sleep(0.6)  # a runs it now
                    second = await exchange(b.url, ident, wire)
                return first, second

            first, second = trio.run(both)
            assert [t for t, _ in first] == [RESULT]
            assert [t for t, _ in second] == [PROCESSING, RESULT], second
            assert second[-1][1] == first[-1][1]  # the same terminal bytes
            assert decode_envelope(first[-1][1]).body["result"] == {"token": "t1"}
            # After completion, the same bytes from either daemon, without running it again.
            again = trio.run(exchange, b.url, ident, wire)
            assert again == [(RESULT, first[-1][1])]
            assert ran(log) == ["t1"]
        finally:
            assert b.stop() == 0
    finally:
        assert a.stop() == 0


def test_a_duplicate_waiting_on_a_dead_workers_idempotent_invoke_runs_it(tmp_path: Path) -> None:
    # Two daemons of one group on one store. A runs an invoke of an
    # idempotent capability; its retry reaches B (PROCESSING: A runs it).
    # A is killed. Once A's lease lapses, B takes the row over and runs the
    # invoke again (R25: run again if idempotent), answering the waiting
    # retry with the result; later retries get those same bytes.
    log = tmp_path / "ran.log"
    env = {"AMPCAP_STORE_GROUP": "test-fleet", "AMPCAP_LEASE_MS": "1500"}
    state = ["--state-dir", str(tmp_path / "state")]
    a = Serve(tmp_path, state, env, log, idempotent=True)
    try:
        b = Serve(tmp_path, state, env, log, idempotent=True)
        try:
            ident = Identity.generate(os.urandom)
            wire = sealed_invoke(a.did, ident, "t1", 2500)

            async def kill_a_while_b_waits() -> list[tuple[int, bytes]]:
                async with trio.open_nursery() as nursery:
                    async def at_a() -> None:
                        await exchange(a.url, ident, wire, timeout=5)  # A dies under it: no answer
                    nursery.start_soon(at_a)
                    await trio.sleep(0.6)  # A runs it now
                    got: list[tuple[int, bytes]] = []

                    async def at_b() -> None:
                        got.extend(await exchange(b.url, ident, wire, timeout=20))
                    nursery.start_soon(at_b)
                    await trio.sleep(0.5)  # B has said PROCESSING, and waits
                    a.proc.send_signal(signal.SIGKILL)
                return got

            second = trio.run(kill_a_while_b_waits)
            assert [t for t, _ in second] == [PROCESSING, RESULT], (second, b.err.read_text()[-2000:])
            assert decode_envelope(second[-1][1]).body["result"] == {"token": "t1"}
            assert ran(log) == ["t1", "t1"]  # started by A, run again by B
            again = trio.run(exchange, b.url, ident, wire)
            assert again == [(RESULT, second[-1][1])]
            assert ran(log) == ["t1", "t1"]
        finally:
            assert b.stop() == 0
    finally:
        a.stop()


def test_serve_workers_share_the_sockets_and_survive_a_killed_worker(tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    parent = Serve(tmp_path, ["--workers", "2", "--state-dir", str(tmp_path / "state")], {}, log)
    try:
        ident = Identity.generate(os.urandom)
        wires = [sealed_invoke(parent.did, ident, f"w{i}", 0) for i in range(8)]

        async def send_all() -> list[list[tuple[int, bytes]]]:
            return [await exchange(parent.url, ident, wire) for wire in wires]

        answers = trio.run(send_all)
        assert all([t for t, _ in got] == [RESULT] for got in answers)
        assert sorted(ran(log)) == sorted(f"w{i}" for i in range(8))
        workers = subprocess.run(["pgrep", "-P", str(parent.proc.pid)], capture_output=True, text=True)
        pids = [int(p) for p in workers.stdout.split()
                if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(pids) >= 2, workers
        os.kill(pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 20
        while "starting it again" not in parent.err.read_text():
            assert time.monotonic() < deadline, parent.err.read_text()
            time.sleep(0.2)
        # Served on, and every earlier answer is still the same bytes from whichever worker gets the retry.
        again = trio.run(send_all)
        assert [got[-1] for got in again] == [got[-1] for got in answers]
        assert sorted(ran(log)) == sorted(f"w{i}" for i in range(8))
    finally:
        status = parent.stop()
    assert status == 0 and "Traceback" not in parent.err.read_text(), parent.err.read_text()


# ------------------------------------------------------------------ faults

INTERRUPTED_OR_DOWN = 5002


async def _drive(url: str, ident: Identity, wires: dict[bytes, bytes], got: dict[bytes, bytes], *,
                 seconds: float) -> None:
    """Send every invoke not answered yet on one connection; keep the terminal
    replies (raw, by invoke id) that come within ``seconds``; a dead
    connection (a killed worker) just ends the round. A terminal reply is a
    CAP_RESULT, or an ERROR for an invoke refused before it was accepted
    (R5: a worker that must ask the store about an invoke and cannot)."""
    try:
        probe = await Probe.open(parse_url(url), SETTINGS, identity=ident)
    except Exception:
        return
    try:
        await probe.open_session()
        pending = {i: w for i, w in wires.items() if i not in got}
        for wire in pending.values():
            await probe.send_bytes(probe.frame(wire))
        deadline = trio.current_time() + seconds
        answered = 0
        while answered < len(pending):
            item = await probe.receive(deadline)
            if item is None or item.kind is ReceivedKind.CLOSED:
                return
            env = item.envelope
            if env is not None and (env.typ == RESULT or env.typ == ERROR) and env.reply_to in pending:
                if env.reply_to in got:
                    assert got[env.reply_to] == item.raw, "two different answers to one invoke"
                got.setdefault(env.reply_to, item.raw)
                answered += 1
    except AssertionError:
        raise
    except Exception:
        pass  # the worker died under us
    finally:
        await probe.aclose()


def _error(raw: bytes) -> dict[str, Any] | None:
    """The error a terminal reply carries (a CAP_RESULT's, or an ERROR's body); None for a success."""
    env = decode_envelope(raw)
    if env.typ == ERROR:
        return dict(env.body)
    error = env.body.get("error")
    return None if error is None else dict(error)


def _outcomes(wires: dict[bytes, bytes], got: dict[bytes, bytes]) -> dict[str, int]:
    counts = {"ok": 0, "5002": 0}
    for msg_id in wires:
        error = _error(got[msg_id])
        if error is None:
            counts["ok"] += 1
        else:
            assert error["code"] == INTERRUPTED_OR_DOWN, error
            counts["5002"] += 1
    return counts


def test_a_worker_killed_under_load_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    # serve --workers 2; 12 connections with 4 invokes each (1.5 s of work
    # each); one worker is SIGKILLed while they run. Then every invoke is
    # retried with its same bytes until answered: each gets one answer (the
    # same bytes on every retry, counted by its terminal message), a success
    # or 5002 "interrupted" for those the dead worker had claimed; no token
    # ran twice, and every success's token ran.
    log = tmp_path / "ran.log"
    parent = Serve(tmp_path, ["--workers", "2", "--state-dir", str(tmp_path / "state")],
                   {"AMPCAP_LEASE_MS": "1500"}, log)
    try:
        # 12 connections: the kernel's spreading sends some to each worker (all to one: 1 in 2,048)
        idents = [Identity.generate(os.urandom) for _ in range(12)]
        wires = [{} for _ in idents]  # type: list[dict[bytes, bytes]]
        for n, ident in enumerate(idents):
            for i in range(4):
                wire = sealed_invoke(parent.did, ident, f"c{n}i{i}", 1500)
                wires[n][decode_envelope(wire).id] = wire
        got: list[dict[bytes, bytes]] = [{} for _ in idents]

        async def load() -> None:
            async with trio.open_nursery() as nursery:
                for n, ident in enumerate(idents):
                    nursery.start_soon(lambda n=n, ident=ident: _drive(parent.url, ident, wires[n], got[n],
                                                                       seconds=20))
                await trio.sleep(0.8)
                workers = subprocess.run(["pgrep", "-P", str(parent.proc.pid)], capture_output=True, text=True)
                pids = [int(p) for p in workers.stdout.split()
                        if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
                os.kill(pids[0], signal.SIGKILL)

        trio.run(load)
        first = [dict(g) for g in got]
        for _ in range(10):  # retries, until each has its answer
            if all(len(g) == len(w) for g, w in zip(got, wires)):
                break

            async def retry() -> None:
                async with trio.open_nursery() as nursery:
                    for n, ident in enumerate(idents):
                        nursery.start_soon(lambda n=n, ident=ident: _drive(parent.url, ident, wires[n], got[n],
                                                                           seconds=8))
            trio.run(retry)
        assert all(len(g) == len(w) for g, w in zip(got, wires)), ([len(g) for g in got],
                                                                   parent.err.read_text()[-3000:])
        # A retry of everything once more: the same bytes for every invoke (no second answer).
        again: list[dict[bytes, bytes]] = [{} for _ in idents]

        async def once_more() -> None:
            async with trio.open_nursery() as nursery:
                for n, ident in enumerate(idents):
                    nursery.start_soon(lambda n=n, ident=ident: _drive(parent.url, ident, wires[n], again[n],
                                                                       seconds=10))
        trio.run(once_more)
        assert again == got
        for g, f in zip(got, first):
            assert all(g[k] == v for k, v in f.items())
        runs = ran(log)
        assert len(runs) == len(set(runs)), "an invoke ran twice"
        counts = {"ok": 0, "5002": 0}
        for n in range(len(idents)):
            for k, v in _outcomes(wires[n], got[n]).items():
                counts[k] += v
            for msg_id, raw in got[n].items():
                body = decode_envelope(raw).body
                if "result" in body:
                    assert body["result"]["token"] in runs
        assert counts["ok"] + counts["5002"] == 48 and counts["ok"] > 0, counts
    finally:
        status = parent.stop()
    assert status == 0, parent.err.read_text()


def test_postgresql_stopped_under_load_then_started(tmp_path: Path, pg_cluster: Any) -> None:
    # serve --workers 2 on PostgreSQL. While the server is down, every invoke
    # gets exactly one terminal answer, 5002 (retry later), and none runs;
    # once it is up again, service resumes by itself; nothing ran twice, and
    # answers given before the outage come back byte for byte.
    log = tmp_path / "ran.log"
    url = pg_cluster.url(pg_cluster.create_database())
    parent = Serve(tmp_path, ["--workers", "2", "--state-url", url], {"AMPCAP_LEASE_MS": "1500"}, log)
    try:
        ident = Identity.generate(os.urandom)

        def batch(prefix: str, count: int) -> dict[bytes, bytes]:
            wires = [sealed_invoke(parent.did, ident, f"{prefix}{i}", 0) for i in range(count)]
            return {decode_envelope(w).id: w for w in wires}

        def send(wires: dict[bytes, bytes], seconds: float = 10, connections: int = 2) -> dict[bytes, bytes]:
            got: dict[bytes, bytes] = {}

            async def go() -> None:
                async with trio.open_nursery() as nursery:  # the kernel spreads the connections over the workers
                    items = list(wires.items())
                    for n in range(connections):
                        part = dict(items[n::connections])
                        nursery.start_soon(lambda part=part: _drive(parent.url, ident, part, got, seconds=seconds))
            trio.run(go)
            return got

        # 12 connections, all answered: both workers serve (all on one worker: 1 in 2,048).
        before = batch("a", 12)
        answered = send(before, connections=12)
        assert len(answered) == 12 and all(_error(r) is None for r in answered.values())
        pg_cluster.pause()
        try:
            down: dict[bytes, bytes] = {}
            for round_ in range(2):  # at once, and again once every worker has met the outage
                wires = batch(f"b{round_}-", 12)
                refused = send(wires, seconds=8, connections=6)
                assert len(refused) == len(wires), (len(refused), parent.err.read_text()[-3000:])
                for raw in refused.values():
                    error = _error(raw)
                    assert error is not None and error["code"] == 5002 and "state store" in error["message"], error
                down.update(wires)
                time.sleep(1.0)
        finally:
            pg_cluster.resume()
        deadline = time.monotonic() + 30
        while True:  # service resumes by itself
            after = batch(f"c{int(time.monotonic() * 1000)}-", 4)
            got = send(after, seconds=5)
            if len(got) == 4 and all(_error(r) is None for r in got.values()):
                break
            assert time.monotonic() < deadline, [_error(r) for r in got.values()]
            time.sleep(0.5)
        assert send(before, connections=12) == answered  # the same bytes as before the outage
        runs = ran(log)
        assert len(runs) == len(set(runs)) and not any(r.startswith("b") for r in runs), runs
        # What was refused while the store was down never ran: its retry runs it now, once.
        retried = send(down, connections=6)
        assert len(retried) == len(down) and all(_error(r) is None for r in retried.values()), \
            [_error(r) for r in retried.values()]
        assert send(down, connections=6) == retried
        runs = ran(log)
        assert len(runs) == len(set(runs)) and sum(r.startswith("b") for r in runs) == len(down), runs
        assert "Traceback" not in parent.err.read_text()
    finally:
        status = parent.stop()
    assert status == 0, parent.err.read_text()


def _worker_pids(parent: Serve) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(parent.proc.pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()
            if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_a_worker_that_cannot_start_while_postgresql_is_down_is_retried(tmp_path: Path, pg_cluster: Any) -> None:
    # A worker of a group that serves dies while PostgreSQL is down; its new
    # start cannot open the store. That is no bad configuration (the group
    # served): the parent starts it again, pausing longer each time, instead
    # of stopping the group; the other worker answers 5002 meanwhile, and
    # once the server is back the group serves whole again.
    log = tmp_path / "ran.log"
    url = pg_cluster.url(pg_cluster.create_database())
    parent = Serve(tmp_path, ["--workers", "2", "--state-url", url], {}, log)
    try:
        ident = Identity.generate(os.urandom)
        assert [t for t, _ in trio.run(exchange, parent.url, ident,
                                       sealed_invoke(parent.did, ident, "s0", 0))] == [RESULT]
        pg_cluster.pause()
        try:
            os.kill(_worker_pids(parent)[0], signal.SIGKILL)
            deadline = time.monotonic() + 30
            while parent.err.read_text().count("ended at start") < 2:  # it tried, and tried again
                assert time.monotonic() < deadline, parent.err.read_text()[-3000:]
                time.sleep(0.2)
            assert parent.proc.poll() is None and "stopping" not in parent.err.read_text()
            assert "starting it again in 0.5 s" in parent.err.read_text()
        finally:
            pg_cluster.resume()
        deadline = time.monotonic() + 60
        while True:  # the retried worker starts (its pause is at most RESTART_MAX_S); all answer again
            wires = [sealed_invoke(parent.did, ident, f"s{time.monotonic_ns()}", 0) for _ in range(8)]
            got: dict[bytes, bytes] = {}

            async def spread() -> None:
                async with trio.open_nursery() as nursery:
                    for wire in wires:
                        part = {decode_envelope(wire).id: wire}
                        nursery.start_soon(lambda part=part: _drive(parent.url, ident, part, got, seconds=3))
            trio.run(spread)
            if len(got) == 8 and all(_error(r) is None for r in got.values()):
                break
            assert time.monotonic() < deadline, parent.err.read_text()[-3000:]
            time.sleep(0.5)
        assert len(_worker_pids(parent)) == 2
    finally:
        status = parent.stop()
    assert status == 0, parent.err.read_text()


def _advisory_share_locks(pg_cluster: Any, database: str) -> int:
    import psycopg

    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks JOIN pg_database d ON d.oid = pg_locks.database "
                           "WHERE locktype = 'advisory' AND mode = 'ShareLock' AND d.datname = %s",
                           (database,)).fetchone()
    return int(row[0]) if row else 0


def _connections(pg_cluster: Any, database: str) -> int:
    import psycopg

    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()
    return int(row[0]) if row else 0


def test_a_retry_the_cache_cannot_place_is_read_ahead_on_postgresql(tmp_path: Path, pg_cluster: Any) -> None:
    # After a restart the journal holds the first life's invokes, and memory
    # none of them: a retry is looked up in the store. On PostgreSQL the
    # daemon reads it in a thread, on a connection of its own, before the
    # executor handles the invoke (net/daemon/lookahead.py): the same bytes
    # come back, nothing runs again, and that second connection exists.
    log = tmp_path / "ran.log"
    database = pg_cluster.create_database()
    args = ["--state-url", pg_cluster.url(database)]
    ident = Identity.generate(os.urandom)
    first = Serve(tmp_path, args, {}, log)
    try:
        wire = sealed_invoke(first.did, ident, "k1", 0)
        answer = trio.run(exchange, first.url, ident, wire)
        assert [t for t, _ in answer] == [RESULT]
    finally:
        assert first.stop() == 0
    again = Serve(tmp_path, args, {}, log)
    try:
        assert _connections(pg_cluster, database) == 1  # nothing read ahead yet
        assert trio.run(exchange, again.url, ident, wire) == answer
        assert _connections(pg_cluster, database) == 2  # the reader's connection
        fresh = sealed_invoke(again.did, ident, "k2", 0)
        assert [t for t, _ in trio.run(exchange, again.url, ident, fresh)] == [RESULT]
        assert ran(log) == ["k1", "k2"]
    finally:
        status = again.stop()
    assert status == 0 and "Traceback" not in again.err.read_text(), again.err.read_text()


def test_after_a_postgresql_restart_the_store_is_still_refused_to_an_uncoordinated_daemon(
        tmp_path: Path, pg_cluster: Any) -> None:
    # The owner lock is a session advisory lock: a restart of PostgreSQL
    # drops it with the connection. A lone daemon and a worker group each
    # take it again on their own (an idle daemon too, within a second), so a
    # second daemon started after the restart is still refused; the first
    # serves on.
    for workers in ("1", "2"):
        log = tmp_path / f"ran-{workers}.log"
        database = pg_cluster.create_database()
        url = pg_cluster.url(database)
        first = Serve(tmp_path, ["--workers", workers, "--state-url", url], {}, log)
        try:
            ident = Identity.generate(os.urandom)
            assert [t for t, _ in trio.run(exchange, first.url, ident,
                                           sealed_invoke(first.did, ident, "r0", 0))] == [RESULT]
            deadline = time.monotonic() + 20
            while _advisory_share_locks(pg_cluster, database) < int(workers):  # every worker holds it
                assert time.monotonic() < deadline, first.err.read_text()[-2000:]
                time.sleep(0.1)
            pg_cluster.pause()
            pg_cluster.resume()
            assert _advisory_share_locks(pg_cluster, database) == 0  # gone with the connections
            deadline = time.monotonic() + 20
            while _advisory_share_locks(pg_cluster, database) < int(workers):  # taken again, idle as they are
                assert time.monotonic() < deadline, first.err.read_text()[-2000:]
                time.sleep(0.1)
            second = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "serve", "--manifest", str(manifest(tmp_path)),
                                     "--listen", "127.0.0.1:0", "--state-url", url], capture_output=True, text=True,
                                    timeout=60, env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"),
                                                         AMPCAP_SOAK_LOG=str(log)))
            assert second.returncode == 1 and "does not coordinate" in second.stderr, second.stderr
            assert [t for t, _ in trio.run(exchange, first.url, ident,
                                           sealed_invoke(first.did, ident, "r1", 0))] == [RESULT]
            assert ran(log) == ["r0", "r1"]
        finally:
            status = first.stop()
        assert status == 0 and "Traceback" not in first.err.read_text(), first.err.read_text()


# ----------------------------------------------------------------- metrics

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str) -> str:
    done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "status", url], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_metrics_of_one_daemon_and_of_a_worker_group(tmp_path: Path) -> None:
    for workers in ("1", "2"):
        log = tmp_path / f"ran-{workers}.log"
        port = _free_port()
        parent = Serve(tmp_path, ["--workers", workers, "--state-dir", str(tmp_path / f"state{workers}"),
                                  "--metrics", f"127.0.0.1:{port}"], {}, log)
        try:
            ident = Identity.generate(os.urandom)
            wires = [sealed_invoke(parent.did, ident, f"m{i}", 0) for i in range(6)]

            async def send_all() -> None:
                for wire in wires:
                    assert [t for t, _ in await exchange(parent.url, ident, wire)] == [RESULT]
                # A retry, answered without running: counted under '-'.
                assert [t for t, _ in await exchange(parent.url, ident, wires[0])] == [RESULT]

            trio.run(send_all)
            deadline = time.monotonic() + 15
            while True:  # the figures are written as the invokes end; the gauges within a second
                text = _status(f"http://127.0.0.1:{port}")
                if "org.test.soak:1.0.0 ok: 6" in text and "- ok: 1" in text:
                    break
                assert time.monotonic() < deadline, text
                time.sleep(0.3)
            assert "mean" in text and "store commits:" in text and "in flight: 0" in text, text
            raw = subprocess.run([PYTHON, "-c", f"import urllib.request;print(urllib.request.urlopen("
                                  f"'http://127.0.0.1:{port}/metrics').read().decode())"],
                                 capture_output=True, text=True, timeout=30).stdout
            assert "ampcap_invoke_seconds_bucket" in raw and "ampcap_store_commit_seconds" in raw
        finally:
            status = parent.stop()
        assert status == 0, parent.err.read_text()
    bad = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "status", f"http://127.0.0.1:{_free_port()}"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "cannot read" in bad.stderr, bad.stderr
