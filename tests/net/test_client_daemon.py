"""A client-only daemon (empty catalog, no store, no handlers) builds its
serving half, the executor, the delegation verifier and the state store, on
the first message that needs it (issue 26: a one-shot `ampcap invoke` does
not import them). Called by another agent, it still answers like before."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap.caps.catalog import Catalog  # noqa: E402
from ampcap.errors import AmpError  # noqa: E402
from ampcap.net.daemon.core import Daemon  # noqa: E402
from ampcap.net.api.peer import Remote  # noqa: E402


def _client() -> Daemon:
    return Daemon(new_identity(), Catalog([], cursor_key=os.urandom(32)))


@pytest.mark.trio
async def test_a_client_daemon_serves_on_the_first_invoke_it_receives() -> None:
    called, caller = _client(), _client()
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(called.run)
        await nursery.start(caller.run)
        assert called._executor is None and caller._executor is None
        nursery.start_soon(called.serve_stream, theirs)
        remote = Remote(caller, await caller.connect_stream(ours))
        with trio.fail_after(5):
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.x.y:1.0.0", params={})
            assert info.value.code == 4002  # CAPABILITY_NOT_FOUND, from the executor built just now
            with pytest.raises(AmpError) as info:
                await remote.query("org.x")
            assert info.value.code == 4002
        assert called._executor is not None and called.store.durable is False
        assert caller._executor is None  # calling never needed it
        await caller.drain(0.1)
        await called.drain(0.1)
        nursery.cancel_scope.cancel()


def test_the_serving_half_is_built_at_once_when_there_is_something_to_serve() -> None:
    daemon = Daemon(new_identity(), Catalog([], cursor_key=os.urandom(32)), handlers={"x": lambda p, c: p})
    assert daemon._executor is not None and daemon.jobs is not None and daemon.verifier is not None
