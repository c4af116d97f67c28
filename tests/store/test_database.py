from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.store import Durability, StateStore, default_state_dir, parse_state_dir


def test_default_dir_is_per_identity_under_xdg_state_home(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), "HOME": "/nowhere"}
    a = default_state_dir("did:key:zA", env)
    b = default_state_dir("did:key:zB", env)
    assert a.parent == b.parent == tmp_path / "ampcap"
    assert a != b and ":" not in a.name
    # a relative XDG_STATE_HOME is ignored, as the XDG spec says
    assert default_state_dir("did:key:zA", {"XDG_STATE_HOME": "rel", "HOME": "/h"}).parts[:4] == ("/", "h", ".local", "state")


def test_parse_state_dir() -> None:
    assert parse_state_dir("none") is None
    assert parse_state_dir("/x/y") == Path("/x/y")
    with pytest.raises(ValueError):
        parse_state_dir(" ")


def test_rows_survive_reopening_in_wal_mode(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "s", durability=Durability.POWER)
    assert store.durable
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    assert store.ensure_schema("demo", 1, ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB)"]) == 0
    with store.transaction() as db:
        db.execute("INSERT INTO t VALUES ('a', x'01')")
    store.close()
    again = StateStore.open(tmp_path / "s")
    assert again.ensure_schema("demo", 1, ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB)"]) == 1
    assert again.query("SELECT k, v FROM t") == [("a", b"\x01")]


def test_a_failed_batch_commits_nothing() -> None:
    store = StateStore.open(None)
    assert not store.durable
    store.ensure_schema("demo", 1, ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"])
    with pytest.raises(sqlite3.IntegrityError):
        with store.transaction() as db:
            db.execute("INSERT INTO t VALUES ('a')")
            db.execute("INSERT INTO t VALUES ('a')")
    assert store.query("SELECT count(*) FROM t") == [(0,)]


def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path)
    store.ensure_schema("demo", 3, [])
    store.close()
    with pytest.raises(AmpError) as err:
        StateStore.open(tmp_path).ensure_schema("demo", 2, [])
    assert err.value.code == 5002 and "version 3" in str(err.value)


def test_a_state_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(AmpError) as err:
        StateStore.open(tmp_path / "f")
    assert err.value.code == 5002 and "state directory" in str(err.value)


def test_an_older_file_is_migrated_step_by_step_in_one_transaction(tmp_path: Path) -> None:
    v1 = ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"]
    v3 = ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, a INTEGER NOT NULL DEFAULT 0, b BLOB)"]
    steps = {1: ["ALTER TABLE t ADD COLUMN a INTEGER NOT NULL DEFAULT 0"], 2: ["ALTER TABLE t ADD COLUMN b BLOB"]}
    store = StateStore.open(tmp_path)
    store.ensure_schema("demo", 1, v1)
    with store.transaction() as db:
        db.execute("INSERT INTO t VALUES ('old')")
    store.close()
    # A migration that fails leaves the file as it was (version and columns).
    broken = {1: steps[1], 2: ["ALTER TABLE nowhere ADD COLUMN b BLOB"]}
    with pytest.raises(sqlite3.OperationalError):
        StateStore.open(tmp_path).ensure_schema("demo", 3, v3, broken)
    again = StateStore.open(tmp_path)
    assert again.query("SELECT version FROM schema_versions WHERE component = 'demo'") == [(1,)]
    assert [c[1] for c in again.query("PRAGMA table_info(t)")] == ["k"]
    # No way from version 1: refused with a clear 5002, nothing changed.
    with pytest.raises(AmpError) as err:
        again.ensure_schema("demo", 3, v3, {2: steps[2]})
    assert err.value.code == 5002 and "cannot migrate" in str(err.value)
    assert again.ensure_schema("demo", 3, v3, steps) == 1
    assert again.query("SELECT k, a, b FROM t") == [("old", 0, None)]
    assert again.ensure_schema("demo", 3, v3, steps) == 3  # already there: nothing to do
    # A new file gets the newest shape directly, no migration run.
    fresh = StateStore.open(tmp_path / "new")
    assert fresh.ensure_schema("demo", 3, v3, {}) == 0
    assert [c[1] for c in fresh.query("PRAGMA table_info(t)")] == ["k", "a", "b"]


def _open_when_told(directory: Path, start: Any, results: Any) -> None:
    start.wait()
    try:
        store = StateStore.open(directory)
        store.close()
        results.put("opened")
    except AmpError as exc:
        results.put(exc.message)


def test_workers_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    # serve --workers starts its workers together, and each opens the same
    # new SQLite file: the switch to WAL takes a lock SQLite's busy handler
    # does not wait for, so a worker used to die of "database is locked".
    context = multiprocessing.get_context("fork")
    for round_ in range(16):
        start, results = context.Event(), context.Queue()
        workers = [context.Process(target=_open_when_told, args=(tmp_path / f"s{round_}", start, results))
                   for _ in range(4)]
        for worker in workers:
            worker.start()
        start.set()
        for worker in workers:
            worker.join(30)
        assert [results.get(timeout=5) for _ in workers] == ["opened"] * 4
