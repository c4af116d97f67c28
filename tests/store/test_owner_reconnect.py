"""The owner lock of a PostgreSQL store outlives a broken connection (R25).

The lock is a session advisory lock: it dies with the connection that took
it, when PostgreSQL restarts. The store takes it again on the new
connection before using it; should another, uncoordinated process have
taken the store meanwhile, the new connection is refused (5002) rather than
shared. Against a real private cluster (tests/pg.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.store import open_store
from ampcap.store.owner import StoreBusy


def test_a_reconnected_store_takes_its_owner_lock_again(pg_cluster: Any, postgres_url: str) -> None:
    one, two = open_store(postgres_url), open_store(postgres_url)
    one.take_ownership(None)
    pg_cluster.pause()
    pg_cluster.resume()
    assert one.query("SELECT 1") == [(1,)]  # a read finds the connection broken and opens a new one, locked
    with pytest.raises(StoreBusy):
        two.take_ownership(None)
    with pytest.raises(StoreBusy):
        two.take_ownership("a group")
    one.close()
    two.take_ownership(None).release()
    two.close()


def test_a_store_taken_while_cut_off_is_not_shared(pg_cluster: Any, postgres_url: str) -> None:
    # Cut off by a restart, the first process holds nothing; an uncoordinated
    # one starts and takes the store. The first, reconnecting, must not use
    # it alongside: each statement fails with 5002 until the other is gone.
    one, two = open_store(postgres_url), open_store(postgres_url)
    one.take_ownership("group one")
    pg_cluster.pause()
    pg_cluster.resume()
    taken = two.take_ownership(None)
    with pytest.raises(AmpError) as refused:
        one.query("SELECT 1")
    assert refused.value.code == 5002 and "does not coordinate" in refused.value.message
    with pytest.raises(AmpError):  # refused again at once (no new connection per statement)
        with one.transaction() as db:
            db.execute("SELECT 1")
    taken.release()
    two.close()
    deadline = time.monotonic() + 10
    while True:  # the other is gone: the next try (after a pause) takes the store back
        try:
            assert one.query("SELECT 1") == [(1,)]
            break
        except AmpError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    three = open_store(postgres_url)
    with pytest.raises(StoreBusy):
        three.take_ownership(None)
    one.close()
    three.close()
