"""``ampcap relay`` as a real process, for the edge's tests."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processes import ProcessHandle, stop_process  # tests/processes.py

PYTHON = sys.executable


@dataclass
class RelayProcess(ProcessHandle):
    proc: subprocess.Popen[str]
    url: str
    http_url: str | None
    did: str
    state_dir: Path
    stderr_path: Path

    store_url: str | None = None
    """``--state-url`` when the queue is in PostgreSQL (else it is in ``state_dir``)."""

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Read the relay's queue where it lives (its SQLite file, or PostgreSQL)."""
        if self.store_url is None:
            with sqlite3.connect(self.state_dir / "state.sqlite3") as db:
                return db.execute(sql, params).fetchall()
        import psycopg

        with psycopg.connect(self.store_url, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]

    def transfers(self) -> dict[str, int]:
        """Queue entries by federation transfer state."""
        return dict(self.query("SELECT t_state, count(*) FROM relay_entry GROUP BY t_state"))  # type: ignore[arg-type]

    def entries(self, recipient: str | None = None) -> dict[str, int]:
        """Queue entries by recipient state."""
        if recipient is not None:
            return dict(self.query("SELECT state, count(*) FROM relay_entry WHERE recipient = ? GROUP BY state",  # type: ignore[arg-type]
                                   (recipient,)))
        return dict(self.query("SELECT state, count(*) FROM relay_entry GROUP BY state"))  # type: ignore[arg-type]


def keygen(path: Path) -> str:
    """Write a new identity to ``path``; its DID."""
    made = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "keygen", "--out", str(path)], check=True,
                          capture_output=True, text=True)
    return made.stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _now() -> int:
    return time.time_ns() // 1_000_000


class HttpAgent:
    """An agent that talks to a relay over HTTP (RFC 002 §6.1/§6.2): it
    submits with a bearer token for the relay's DID, polls, and sends
    recipient ACKs, as any client of a relay would."""

    def __init__(self, http_url: str, relay_did: str, who: Any) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(http_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.relay, self.who = relay_did, who

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        import http.client

        from ampcap.wire.bearer import mint

        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            token = mint(self.who, self.relay, now_ms=_now(), entropy=os.urandom)
            conn.request(method, path, body=body or None, headers={"content-type": "application/cbor",
                                                                   "authorization": f"Bearer {token}"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def message(self, to: str, body: Any, *, ttl: int = 600_000) -> bytes:
        from ampcap.wire.envelope import seal
        from ampcap.wire.registry import MessageType

        return seal(self.who, typ=int(MessageType.MESSAGE), to=to, body=body, now_ms=_now(), entropy=os.urandom,
                    ttl=ttl)[1]

    def post(self, raw: bytes) -> int:
        return self.request("POST", "/amp/v1/messages", raw)[0]

    def poll(self, cursor: str = "", limit: int = 200) -> dict[str, Any]:
        from ampcap.wire.cbor import loads

        status, body = self.request("GET", f"/amp/v1/messages?limit={limit}{'&cursor=' + cursor if cursor else ''}")
        assert status == 200, (status, body)
        page: dict[str, Any] = loads(body)
        return page

    def ack(self, raw: bytes) -> int:
        """The recipient ACK (RFC 003 §5.5) of ``raw``: the relay's answer status."""
        from ampcap.wire.cbor import DEFAULT_LIMITS
        from ampcap.wire.envelope import decode_envelope, seal
        from ampcap.wire.registry import MessageType

        env = decode_envelope(raw, DEFAULT_LIMITS)
        ack = seal(self.who, typ=int(MessageType.ACK), to=env.sender, reply_to=env.id, now_ms=_now(),
                   entropy=os.urandom, ttl=600_000, body={"ack_source": "recipient", "received_at": _now()})[1]
        return self.post(ack)

    def drain(self, *, acknowledge: bool = True) -> list[bytes]:
        """Poll every page once (a new pass), acknowledging each message that is not itself an acknowledgement."""
        from ampcap.wire.cbor import DEFAULT_LIMITS
        from ampcap.wire.envelope import decode_envelope
        from ampcap.wire.registry import MessageType

        got: list[bytes] = []
        cursor = ""
        while True:
            page = self.poll(cursor)
            for raw in page["messages"]:
                got.append(raw)
                if acknowledge and decode_envelope(raw, DEFAULT_LIMITS).typ == int(MessageType.MESSAGE):
                    assert self.ack(raw) in (200, 202)
            if not page["has_more"]:
                return got
            cursor = page["next_cursor"]


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


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
def relay_process(tmp: Path, *args: str, http: bool | str = True, state_dir: Path | None = None,
                  identity: Path | None = None, listen: str = "127.0.0.1:0",
                  store_args: tuple[str, ...] | None = None) -> Iterator[RelayProcess]:
    """``ampcap -v relay --listen 127.0.0.1:0 [--http 127.0.0.1:0] ARGS``
    (``http`` may name the HTTP address; ``store_args`` replaces
    ``--state-dir DIR``, e.g. with ``--state-url URL``)."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "relay-config"), PYTHONUNBUFFERED="1")
    state = state_dir or tmp / "relay-state"
    key = identity or tmp / "relay.key"
    if not key.exists():
        subprocess.run([PYTHON, "-m", "ampcap.cli.main", "keygen", "--out", str(key)], check=True,
                       capture_output=True, env=env)
    err = tmp / f"relay-{time.monotonic_ns()}.log"
    http_at = http if isinstance(http, str) else "127.0.0.1:0"
    stored = ("--state-dir", str(state)) if store_args is None else store_args
    if stored[0] == "--state-dir":
        state = Path(stored[1])
    cmd = [PYTHON, "-m", "ampcap.cli.main", "-v", "relay", "--listen", listen, "--identity", str(key),
           *stored, *(["--http", http_at] if http else []), *args]
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
        store_url = store_args[1] if store_args and store_args[0] == "--state-url" else None
        yield RelayProcess(proc, url, http_url, did, state, err, store_url)
    finally:
        stop_process(proc)
