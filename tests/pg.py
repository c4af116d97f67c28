"""A private PostgreSQL cluster for tests (the store's second backend, R25).

``PostgresCluster.start()`` runs Debian's PostgreSQL binaries (``initdb``,
``pg_ctl``) in a fresh temporary directory: a unix socket inside it and a
free loopback port, trust authentication, no system cluster touched.
PostgreSQL refuses to run as root, and the tests (and CI) run as root: then
the cluster runs as an unprivileged user (``ampcap-pg``, created as a system
user when missing, else ``nobody``) through ``runuser``. Everything is
removed at the end.

Fixtures (registered for every test by ``tests/conftest.py``):

* ``pg_cluster`` (session): the cluster, started on first use; skips with a
  reason only when no PostgreSQL binaries are installed;
* ``postgres_url``: a fresh, empty database on it for one test (dropped after);
* ``store_target``: parametrized ``sqlite`` / ``postgresql``: what
  ``ampcap.store.open_store`` opens (a temporary state directory, or a fresh
  database's URL), so a component's tests run on both backends; open it more
  than once for several processes' connections to one store.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
SUPERUSER = "ampcap"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout), or one on PATH."""
    for candidate in BIN_DIRS:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def _run_as() -> list[str]:
    """Prefix to run the server's commands unprivileged (empty when we already are)."""
    if os.geteuid() != 0:
        return []
    for name in ("ampcap-pg", "nobody"):
        try:
            pwd.getpwnam(name)
            return ["runuser", "-u", name, "--"]
        except KeyError:
            if name == "ampcap-pg" and subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                                       "/usr/sbin/nologin", name], capture_output=True).returncode == 0:
                return ["runuser", "-u", name, "--"]
    raise RuntimeError("no unprivileged user to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    def __init__(self, root: Path, bindir: Path, prefix: list[str], port: int) -> None:
        self.root, self.bindir, self.prefix, self.port = root, bindir, prefix, port
        self.data, self.socket_dir = root / "data", root / "sock"
        self._names = itertools.count(1)
        self._options = ""

    @classmethod
    def start(cls, *, fsync: bool = False) -> PostgresCluster:
        """``fsync`` off (the tests' default) trades crash safety of this
        throw-away cluster for speed; benchmarks turn it on."""
        bindir = postgres_bin()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL binaries (initdb, pg_ctl)")
        prefix = _run_as()
        root = Path(tempfile.mkdtemp(prefix="ampcap-pg-"))
        os.chmod(root, 0o711)  # the server's user must reach its directories inside
        cluster = cls(root, bindir, prefix, _free_port())
        try:
            for sub in (cluster.data, cluster.socket_dir):
                sub.mkdir()
                if prefix:
                    user = prefix[2]
                    shutil.chown(sub, user, pwd.getpwnam(user).pw_gid)
            cluster._pg("initdb", "-D", str(cluster.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                        "--no-instructions", "--locale=C")
            cluster._options = (f"-k {cluster.socket_dir} -p {cluster.port} -c listen_addresses=127.0.0.1 "
                       f"-c fsync={'on' if fsync else 'off'} -c full_page_writes={'on' if fsync else 'off'} "
                       "-c max_connections=200")
            cluster.resume()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def pause(self) -> None:
        """Stop the server (fast: connections are cut), keeping its data."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start the server (again) on the same socket and port."""
        self._pg("pg_ctl", "-D", str(self.data), "-o", self._options, "-l", str(self.data / "log"), "-w", "-t", "60",
                 "start")

    def _pg(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}")

    def url(self, database: str = "postgres") -> str:
        """A URL over the cluster's unix socket (psycopg reads ``host`` as a directory)."""
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}&port={self.port}"

    def tcp_url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                            "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run does)")
    pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg 3 (the postgres extra)")
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(pg_cluster: PostgresCluster) -> Iterator[str]:
    name = pg_cluster.create_database()
    try:
        yield pg_cluster.url(name)
    finally:
        pg_cluster.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store location for ``open_store``: a state directory or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "state")
    else:
        yield request.getfixturevalue("postgres_url")
