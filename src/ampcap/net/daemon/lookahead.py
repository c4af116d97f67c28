"""Journal reads ahead of the executor, off the event loop (PostgreSQL).

The executor is sans-I/O: when its cache cannot place an invoke (a retry
memory forgot, or an id that may predate this process's start) it asks its
:class:`~ampcap.peer.journal.InvokeRecords` synchronously. On SQLite that is
a local read of about 10 µs; on PostgreSQL a round trip, during which the
worker's event loop would stop. So on PostgreSQL the edge asks the executor
first whether handling this invoke would read the journal
(``Executor.may_recall``, a cache lookup), and if so reads the row in a
thread, on a connection of its own (a statement from a thread must never
land inside a transaction the loop has open on the main connection), while
the loop serves other connections. The executor's lookup is then answered
from that read. A lookup not read ahead falls through to the main
connection, as before.
"""

from __future__ import annotations

from typing import Any

import trio

from ...errors import AmpError
from ...peer.dedupe import InvokeKey
from ...peer.journal import JournalRecord
from ...store.journal import StoreJournal

__all__ = ["ReadAhead"]


class ReadAhead:
    """The executor's InvokeRecords, answered from reads done ahead in a thread."""

    def __init__(self, journal: StoreJournal) -> None:
        self._journal = journal  # the loop's connection: what was not read ahead
        self._reader: StoreJournal | None = None  # its own connection, opened by the first read (in the thread)
        self._limiter = trio.CapacityLimiter(1)  # one thread at a time on that connection
        self._ready: dict[InvokeKey, tuple[JournalRecord | None, Exception | None]] = {}

    async def before(self, executor: Any, inbound: Any, now_ms: int) -> InvokeKey | None:
        """Read ``inbound``'s row ahead if handling it would read the journal;
        the key to :meth:`forget` once it is handled, or None."""
        env = inbound.envelope
        key = InvokeKey(env.sender, env.id)
        if not executor.may_recall(key, inbound.fingerprint, now_ms):
            return None
        try:
            found = await trio.to_thread.run_sync(self._read, key, now_ms, limiter=self._limiter)
        except Exception as exc:  # the store is down: the executor answers 5002, as a failed read of its own
            self._ready[key] = (None, exc)
        else:
            self._ready[key] = (found, None)
        return key

    def forget(self, key: InvokeKey) -> None:
        self._ready.pop(key, None)

    def _read(self, key: InvokeKey, now_ms: int) -> JournalRecord | None:  # in a thread
        if self._reader is None:
            store = self._journal.store
            self._reader = StoreJournal(type(store).connect(store.url, durability=store.durability))  # type: ignore[attr-defined]
        return self._reader.find(key, now_ms)

    # InvokeRecords (peer/journal.py), called by the executor on the loop

    def find(self, key: InvokeKey, now_ms: int) -> JournalRecord | None:
        ready = self._ready.get(key)
        if ready is None:
            return self._journal.find(key, now_ms)
        found, error = ready
        if error is not None:
            raise AmpError(5002, "the state store cannot be read; retry later")
        return found

    def close(self) -> None:
        if self._reader is not None:
            self._reader.store.close()
            self._reader = None

