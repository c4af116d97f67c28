"""Session-wide test environment.

Everything the suite writes to the temporary directory goes under one
private directory made for the run (``TMPDIR`` and :data:`tempfile.tempdir`
point into it, and the daemons the tests start inherit it), and the run
removes it at the end. A file or directory a test left there besides
pytest's own ``tmp_path`` tree fails the run: tests clean up what they make.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_KEEP = "AMPCAP_TEST_KEEP_STATE_HOME"
_run_tmp: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _run_tmp
    if _KEEP in os.environ or _run_tmp is not None:
        return
    # One directory for the whole run, made in the real temporary directory.
    _run_tmp = Path(tempfile.mkdtemp(prefix="ampcap-test-run-"))
    tmp = _run_tmp / "tmp"
    tmp.mkdir()
    # Traversable (not listable) by others: the private PostgreSQL cluster of
    # tests/pg.py runs as its own user, with its directories inside.
    for directory in (_run_tmp, tmp):
        directory.chmod(0o711)
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = str(tmp)
    # `ampcap serve` keeps durable state by default (R19) under
    # $XDG_STATE_HOME/ampcap/<did>/: the daemons the tests start keep theirs in
    # the run's directory, never in the user's home.
    state = _run_tmp / "state"
    state.mkdir()
    os.environ["XDG_STATE_HOME"] = str(state)


def _left_behind(tmp: Path) -> list[str]:
    # pytest's tmp_path tree (pytest-of-USER) is pytest's to manage; anything
    # else in the run's temporary directory was made and not removed by a test.
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith("pytest-of-"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _run_tmp is None or not (_run_tmp / "tmp").is_dir():
        return
    left = _left_behind(_run_tmp / "tmp")
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"tests left these in the temporary directory (remove what a test creates): {', '.join(left[:20])}"
        if reporter is not None:
            reporter.write_line(line, red=True)
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    global _run_tmp
    if _run_tmp is not None:
        tempfile.tempdir = None
        shutil.rmtree(_run_tmp, ignore_errors=True)
        _run_tmp = None


# The private PostgreSQL cluster and the two-backend store fixtures (tests/pg.py).
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_sys.path.insert(0, str(_Path(__file__).parent))
from pg import pg_cluster, postgres_url, store_target  # noqa: E402,F401
