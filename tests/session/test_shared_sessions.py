"""Sessions of one identity served by several workers (R25): each worker's
provider reads a session's record through the shared store, so a session
started on one worker is suspended, resumed and closed on the others, on
SQLite and PostgreSQL alike."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from session_helpers import RESPONSE, T0, init, op, provider  # noqa: E402

from ampcap.session.provider import SaveSession, SessionProvider  # noqa: E402
from ampcap.store import open_store  # noqa: E402
from ampcap.store.sessions import SqliteSessions  # noqa: E402


def _worker(target: str) -> tuple[SessionProvider, SqliteSessions]:
    store = SqliteSessions(open_store(target))
    prov, _ = provider()
    prov.lookup = store.find
    return prov, store


def _run(prov: SessionProvider, store: SqliteSessions, inbound: Any, now: int) -> Any:
    """The edge's part: commit the saves, then the answer goes out."""
    actions = prov.handle(inbound, "conn", now)
    store.write([a.record for a in actions if isinstance(a, SaveSession)])
    [send] = [a for a in actions if type(a).__name__ == "Send"]
    return send.out


def test_a_session_started_on_one_worker_goes_on_on_another(store_target: str) -> None:
    a, a_store = _worker(store_target)
    b, b_store = _worker(store_target)
    started = _run(a, a_store, init(now=T0), T0)
    assert started.typ == RESPONSE and started.body["status"] in ("active", "pending")
    # b never saw the init: it reads the record through the store.
    suspended = _run(b, b_store, op("suspend", now=T0 + 10), T0 + 10)
    assert suspended.typ == RESPONSE and suspended.body["status"] == "suspended", suspended.body
    # a's cached copy is stale (active): it reads through too.
    resumed = _run(a, a_store, op("resume", now=T0 + 20), T0 + 20)
    assert resumed.typ == RESPONSE and resumed.body["status"] == "active", resumed.body
    closed = _run(b, b_store, op("close", now=T0 + 30), T0 + 30)
    assert closed.typ == RESPONSE and closed.body["status"] == "closed", closed.body
    # And a scoped invoke's check on the first worker sees the close.
    assert a.record(init().body["session_id"]).status.value == "closed"  # type: ignore[union-attr]
    # A second init of the same id is refused on either worker.
    again = _run(b, b_store, init(now=T0 + 40), T0 + 40)
    assert again.typ != RESPONSE or again.body.get("status") != "active"
