"""Session-wide test environment."""

from __future__ import annotations

import os
import tempfile


def pytest_configure(config: object) -> None:
    # `ampcap serve` keeps durable state by default (R19) under
    # $XDG_STATE_HOME/ampcap/<did>/: the daemons the tests start keep theirs in
    # a throw-away directory, never in the user's home.
    if "AMPCAP_TEST_KEEP_STATE_HOME" not in os.environ:
        os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="ampcap-test-state-")


# The private PostgreSQL cluster and the two-backend store fixtures (tests/pg.py).
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_sys.path.insert(0, str(_Path(__file__).parent))
from pg import pg_cluster, postgres_url, store_target  # noqa: E402,F401
