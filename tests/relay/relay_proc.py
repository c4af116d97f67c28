"""``ampcap relay`` as a real process, for the edge's tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PYTHON = sys.executable


@dataclass
class RelayProcess:
    proc: subprocess.Popen[str]
    url: str
    http_url: str | None
    did: str
    state_dir: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def entries(self, recipient: str | None = None) -> dict[str, int]:
        """Queue entries by recipient state (read from the SQLite file)."""
        with sqlite3.connect(self.state_dir / "state.sqlite3") as db:
            if recipient is not None:
                return dict(db.execute("SELECT state, count(*) FROM relay_entry WHERE recipient = ? GROUP BY state",
                                       (recipient,)).fetchall())
            return dict(db.execute("SELECT state, count(*) FROM relay_entry GROUP BY state").fetchall())


def _line(proc: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise AssertionError("relay did not print its URL line in time")
    return proc.stdout.readline().strip()


@contextmanager
def relay_process(tmp: Path, *args: str, http: bool = True, state_dir: Path | None = None,
                  identity: Path | None = None, listen: str = "127.0.0.1:0") -> Iterator[RelayProcess]:
    """``ampcap -v relay --listen 127.0.0.1:0 [--http 127.0.0.1:0] ARGS``."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "relay-config"), PYTHONUNBUFFERED="1")
    state = state_dir or tmp / "relay-state"
    key = identity or tmp / "relay.key"
    if not key.exists():
        subprocess.run([PYTHON, "-m", "ampcap.cli.main", "keygen", "--out", str(key)], check=True,
                       capture_output=True, env=env)
    err = tmp / f"relay-{time.monotonic_ns()}.log"
    cmd = [PYTHON, "-m", "ampcap.cli.main", "-v", "relay", "--listen", listen, "--identity", str(key),
           "--state-dir", str(state), *(["--http", "127.0.0.1:0"] if http else []), *args]
    with open(err, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    try:
        first = _line(proc, 30.0)
        if not first:
            raise AssertionError(f"relay printed no URL line; stderr:\n{err.read_text()}")
        url, did = first.split()
        # Both lines are written at once: the second may already sit in the
        # reader's buffer, where a select on the pipe would not see it.
        http_url = proc.stdout.readline().split()[0] if http and proc.stdout is not None else None
        yield RelayProcess(proc, url, http_url, did, state, err)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
