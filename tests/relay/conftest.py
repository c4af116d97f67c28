"""The ``store`` fixture: an in-memory SQLite state store. The PostgreSQL
branch (issue 33) overrides this fixture to run the same tests on its backend."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # relay_helpers

from ampcap.store.database import StateStore


@pytest.fixture
def store() -> Iterator[StateStore]:
    s = StateStore.open(None)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def store2() -> Iterator[StateStore]:
    """A second relay's own store (federation tests)."""
    s = StateStore.open(None)
    try:
        yield s
    finally:
        s.close()
