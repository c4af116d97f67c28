"""``ampcap interop --self``: an in-process ampcap daemon with the demo
capabilities on loopback, for the harness to test.

It is assembled the way ``ampcap serve --demo`` assembles its daemon
(demo manifest → catalog + params validator → :class:`Daemon`), except that
the identity is a fresh in-memory one: a self-test must never create or
read the user's identity file.
"""

from __future__ import annotations

import os

import trio

from ..net.url import AmpUrl

__all__ = ["serve_self"]


async def serve_self(*, task_status: trio.TaskStatus[AmpUrl] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the demo set on 127.0.0.1 (a free port) until cancelled; report its URL."""
    from ..caps.catalog import Catalog
    from ..caps.demo import demo_manifest
    from ..caps.params import ParamsValidator
    from ..net.daemon import Daemon
    from ..wire.identity import Identity

    manifest = demo_manifest()
    catalog = Catalog(list(manifest.capabilities), cursor_key=os.urandom(32))
    daemon = Daemon(Identity.generate(os.urandom), catalog, params=ParamsValidator(manifest.schema_store()))
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        listeners = await daemon.listen("127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        task_status.started(AmpUrl("amp", "127.0.0.1", port))
