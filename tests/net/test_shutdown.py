"""SIGTERM on ``ampcap serve`` with invokes in flight: every invoke gets
exactly one terminal reply and the process exits 0 (ruling R5).

Sized by ``AMPCAP_SOAK_SCALE``: ``small`` (CI) 200 invokes, ``full`` 1,000.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import INVOKE, PROGRESS, RESULT, RawPeer, raw_peer, serve_process, soak_scale  # noqa: E402
from amp_scenarios import error_code  # noqa: E402

CONNECTIONS = 10


async def _flood_then_sigterm(url: str, total: int, ms: int, proc: object) -> list[list[object]]:
    """Send ``total`` sleep invokes over CONNECTIONS connections, wait until
    each has reported progress (so it is really running), SIGTERM the
    daemon, and collect every reply until the connections close."""
    per_conn = total // CONNECTIONS
    outcome: list[list[object]] = []
    async with trio.open_nursery() as nursery:
        peers: list[RawPeer] = []
        ids: list[list[bytes]] = []
        ready = trio.Semaphore(0)

        async def one(index: int) -> None:
            async with raw_peer(url) as peer:
                peers.append(peer)
                mine = [peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": ms}}).id
                        for _ in range(per_conn)]
                ids.append(mine)
                await peer.wait_for(lambda: all(peer.replies(i, PROGRESS) for i in mine), timeout=60)
                ready.release()
                with trio.fail_after(60):
                    while peer.terminated is None:
                        await trio.sleep(0.05)
                outcome.append([peer.terminals(i) for i in mine])

        for index in range(CONNECTIONS):
            nursery.start_soon(one, index)
        for _ in range(CONNECTIONS):
            await ready.acquire()
        proc.proc.send_signal(15)  # type: ignore[attr-defined]
    return outcome


@pytest.mark.slow
def test_sigterm_drains_in_flight_invokes(tmp_path: Path) -> None:
    total = soak_scale(200, 1000)
    # Invokes of 1.5 s, drain budget 10 s: all finish during the drain → success.
    with serve_process(tmp_path, "--max-in-flight", "5000", "--max-in-flight-per-connection", "5000",
                       "--drain-timeout", "10") as proc:
        outcome = trio.run(_flood_then_sigterm, proc.url, total, 1500, proc)
        assert proc.proc.wait(30) == 0
    flat = [t for conn in outcome for t in conn]
    assert len(flat) == total
    assert all(len(t) == 1 for t in flat), [len(t) for t in flat if len(t) != 1][:5]
    assert all(t[0].envelope.typ == RESULT and t[0].body["status"] == "success" for t in flat)


@pytest.mark.slow
def test_sigterm_past_drain_timeout_ends_each_invoke_once_with_5002(tmp_path: Path) -> None:
    total = soak_scale(200, 1000)
    with serve_process(tmp_path, "--max-in-flight", "5000", "--max-in-flight-per-connection", "5000",
                       "--drain-timeout", "0.5") as proc:
        outcome = trio.run(_flood_then_sigterm, proc.url, total, 60_000, proc)
        assert proc.proc.wait(30) == 0
    flat = [t for conn in outcome for t in conn]
    assert len(flat) == total
    assert all(len(t) == 1 for t in flat)
    assert all(t[0].envelope.typ == RESULT and error_code(t[0]) == 5002 for t in flat)


def test_sigterm_when_idle_exits_zero_quickly(tmp_path: Path) -> None:
    import time

    with serve_process(tmp_path) as proc:
        start = time.monotonic()
        assert proc.terminate(10) == 0
        assert time.monotonic() - start < 5


async def _one_long_invoke_then(url: str, signals: list[int], proc: object) -> list[object]:
    """One 60 s sleep invoke; once it runs, send ``signals`` 0.3 s apart;
    return the invoke's terminal replies once the connection closes."""
    async with raw_peer(url) as peer:
        env = peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 60_000}})
        await peer.wait_for(lambda: peer.replies(env.id, PROGRESS), timeout=30)
        for signum in signals:
            proc.proc.send_signal(signum)  # type: ignore[attr-defined]
            await trio.sleep(0.3)
        with trio.fail_after(30):
            while peer.terminated is None:
                await trio.sleep(0.05)
        return peer.terminals(env.id)


def test_a_second_signal_ends_the_drain_at_once_and_the_exit_stays_zero(tmp_path: Path) -> None:
    import signal
    import time

    with serve_process(tmp_path, "--drain-timeout", "60") as proc:
        start = time.monotonic()
        terminals = trio.run(_one_long_invoke_then, proc.url, [signal.SIGTERM, signal.SIGINT], proc)
        assert proc.proc.wait(30) == 0
        assert time.monotonic() - start < 15  # not the 60 s drain budget
    assert len(terminals) == 1 and error_code(terminals[0]) == 5002


def test_sighup_stops_like_sigterm(tmp_path: Path) -> None:
    import signal

    with serve_process(tmp_path, "--drain-timeout", "0.5") as proc:
        terminals = trio.run(_one_long_invoke_then, proc.url, [signal.SIGHUP], proc)
        assert proc.proc.wait(30) == 0
    assert len(terminals) == 1 and error_code(terminals[0]) == 5002


def test_a_signal_during_start_up_stops_at_once(tmp_path: Path) -> None:
    # --connect to a port that accepts and never answers: the dial would take
    # its 10 s; SIGTERM ends it now, with status 0 and no traceback.
    import os
    import signal
    import socket
    import subprocess
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
        proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen",
                                 "127.0.0.1:0", "--connect", f"amp://127.0.0.1:{port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        silent.settimeout(30)
        dialled, _ = silent.accept()  # the daemon is past its start and waits on the dial
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        dialled.close()
    assert proc.returncode == 0 and time.monotonic() - start < 5, err
    assert "Traceback" not in err and out == ""


def test_a_url_line_nobody_reads_does_not_stop_the_daemon(tmp_path: Path) -> None:
    # A supervisor whose log reader died: the daemon serves on and says so.
    import os
    import signal
    import subprocess
    import time

    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the line is written
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0"],
                            stdout=write_end, stderr=subprocess.PIPE, text=True, env=env)
    os.close(write_end)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "created identity …" first, then the daemon's try at its line
        if line.startswith("ampcap: created identity"):
            line = proc.stderr.readline()
        assert "could not print the URL line" in line and "serving on" in line, line
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_lost_connect_link_is_dialled_again(tmp_path: Path) -> None:
    # --connect is a standing order: when the peer goes away and comes back,
    # the link comes back too (WARNING lines say both).
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = tmp_path / "a1"
    first.mkdir()
    with serve_process(first, "--listen", f"127.0.0.1:{port}") as peer_a:
        with serve_process(tmp_path, "--connect", peer_a.url) as dialler:
            assert peer_a.terminate(30) == 0
            second = tmp_path / "a2"
            second.mkdir()
            with serve_process(second, "--listen", f"127.0.0.1:{port}"):
                deadline = time.monotonic() + 30
                while "link restored" not in dialler.stderr() and time.monotonic() < deadline:
                    time.sleep(0.2)
            log = dialler.stderr()
            assert f"--connect {peer_a.url}: link lost; dialling again" in log
            assert f"--connect {peer_a.url}: link restored" in log
            assert dialler.terminate(30) == 0
