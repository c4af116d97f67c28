"""006:A.2, A.15 and A.17 as interop vectors (interop/session_vectors.py):
they pass against an ampcap daemon, fail against a target that knows no
RFC 006 (the harness's own EchoProvider), and skip under raw framing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from demo_target import EchoProvider, serve_target  # noqa: E402

from ampcap.caps.demo import demo_manifest  # noqa: E402
from ampcap.interop.probe import ProbeSettings  # noqa: E402
from ampcap.interop.session_vectors import NO_SESSIONS, SESSION_VECTORS, session_vector_ids  # noqa: E402
from ampcap.interop.suite import REQUIRED_VECTORS, Where, suite_vectors  # noqa: E402
from ampcap.interop.vectors import Context, Status, demo_subject  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.frames import Framing  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402

FAST = ProbeSettings(timeout_s=2.0, settle_s=0.1)


def test_the_ids() -> None:
    assert session_vector_ids() == ["006:A.2", "006:A.15", "006:A.17"]


@pytest.mark.trio
async def test_they_pass_against_ampcap() -> None:
    peer = Peer(Identity.generate(os.urandom), manifest=demo_manifest())
    async with peer.serve("amp://127.0.0.1:0") as server:
        ctx = Context(url=parse_url(server.url), settings=FAST, subject=demo_subject())
        outcomes = {v.id: await v.run(ctx) for v in SESSION_VECTORS}
    assert {k: o.status for k, o in outcomes.items()} == {k: Status.PASS for k in outcomes}, outcomes


@pytest.mark.trio
async def test_they_fail_against_a_target_without_sessions() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_target, EchoProvider(), Identity.generate(os.urandom))
        ctx = Context(url=parse_url(f"amp://127.0.0.1:{port}"), settings=FAST, subject=demo_subject())
        outcomes = {v.id: await v.run(ctx) for v in SESSION_VECTORS}
        nursery.cancel_scope.cancel()
    assert all(o.status is Status.FAIL for o in outcomes.values()), outcomes
    # The suite requires them: a target without sessions fails them, and says why.
    assert NO_SESSIONS in outcomes["006:A.2"].notes and NO_SESSIONS in outcomes["006:A.15"].notes


def test_they_are_registered_with_the_suite() -> None:
    registered = {s.id: s.where for s in suite_vectors()}
    assert all(registered.get(vid) is Where.TARGET for vid in session_vector_ids())
    assert set(session_vector_ids()) <= set(REQUIRED_VECTORS)


@pytest.mark.trio
async def test_raw_framing_skips_them() -> None:
    ctx = Context(url=parse_url("amp://127.0.0.1:9"), settings=ProbeSettings(framing=Framing.RAW),
                  subject=demo_subject(), target_did="did:key:z6Mkexample")
    for v in SESSION_VECTORS:
        assert (await v.run(ctx)).status is Status.SKIP
