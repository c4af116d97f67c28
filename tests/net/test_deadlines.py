"""Deadlines that travel (R23), between real daemons: a capability sees what
is left of its invoke's budget (``ctx.remaining_ms()``); an invoke it makes
through the Python API gets that less a margin, so the inner provider's
budget is smaller still; a call made once the budget is spent fails 5003
before anything is sent; a binding's timeout is cut to the budget."""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.bindings.runner import RunnerContext  # noqa: E402
from ampcap.caps.binding.context import MARGIN_MS, binding_timeout_ms, budget_ms  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402


def inner_peer(seen: list) -> Peer:
    peer = Peer(new_identity())

    @peer.capability("org.example.inner", version="1.0.0")
    async def inner(ctx=None) -> dict:
        seen.append(ctx.remaining_ms())
        return {"remaining_ms": ctx.remaining_ms()}

    return peer


def outer_peer(inner_url: str, *, in_session: bool = False) -> Peer:
    """Its capability invokes the inner one, through the Remote or (``in_session``)
    a session of it, asking for 30 s: the budget left decides."""
    peer = Peer(new_identity())

    @peer.capability("org.example.outer", version="1.0.0")
    async def outer(spend_ms: int = 0, ctx=None) -> dict:
        async with AsyncExitStack() as stack:
            caller = await stack.enter_async_context(connect(inner_url, identity=new_identity()))
            if in_session:
                caller = await stack.enter_async_context(caller.session())
            if spend_ms:
                await ctx.sleep(ctx.remaining_ms() - spend_ms)
            before = ctx.remaining_ms()
            try:
                answer = await caller.invoke("org.example.inner", version="1.0.0", timeout=30.0)
            except AmpError as exc:
                return {"code": exc.code, "before": before}
            return {"before": before, "inner": answer["remaining_ms"]}

    return peer


@pytest.mark.trio
async def test_the_budget_travels_into_nested_invokes() -> None:
    seen: list = []
    async with inner_peer(seen).serve("amp://127.0.0.1:0") as inner_server, \
            outer_peer(inner_server.url).serve("amp://127.0.0.1:0") as outer_server:
        async with connect(outer_server.url, identity=new_identity()) as remote:
            out = await remote.invoke("org.example.outer", version="1.0.0", timeout=3.0)
            assert 0 < out["before"] <= 3_000
            # The nested invoke's timeout_ms was the budget left less the margin.
            assert 0 < out["inner"] <= out["before"] - MARGIN_MS
            # Spent: the nested call fails 5003 and never reaches the inner provider.
            seen.clear()
            out = await remote.invoke("org.example.outer", version="1.0.0", params={"spend_ms": 20}, timeout=2.0)
            assert out["code"] == 5003 and out["before"] <= 20 and seen == []


@pytest.mark.trio
async def test_a_session_invoke_made_while_serving_takes_the_budget_too() -> None:
    seen: list = []
    async with inner_peer(seen).serve("amp://127.0.0.1:0") as inner_server, \
            outer_peer(inner_server.url, in_session=True).serve("amp://127.0.0.1:0") as outer_server:
        async with connect(outer_server.url, identity=new_identity()) as remote:
            # timeout=30 s asked inside, 3 s left of the outer invoke: the budget wins.
            out = await remote.invoke("org.example.outer", version="1.0.0", timeout=3.0)
            assert 0 < out["inner"] <= out["before"] - MARGIN_MS <= 3_000
            seen.clear()
            out = await remote.invoke("org.example.outer", version="1.0.0", params={"spend_ms": 20}, timeout=2.0)
            assert out["code"] == 5003 and out["before"] <= 20 and seen == []


def test_budget_and_binding_timeouts() -> None:
    assert budget_ms(None, 0, None) is None and budget_ms(None, 0, 500) == 500
    assert budget_ms(1_000, 0, None) == 1_000 - MARGIN_MS
    assert budget_ms(1_000, 0, 200) == 200
    with pytest.raises(AmpError) as exc:
        budget_ms(1_000, 1_000 - MARGIN_MS, None)
    assert exc.value.code == 5003
    now = [10_000]
    ctx = RunnerContext(capability_id="x:1.0.0", version="1.0.0", clock_ms=lambda: now[0], deadline_ms=12_000)
    assert ctx.remaining_ms() == 2_000
    assert binding_timeout_ms(30_000, ctx) == 2_000 - MARGIN_MS  # the gRPC deadline, the MCP/HTTP timeout
    assert binding_timeout_ms(500, ctx) == 500
    now[0] = 12_500
    assert ctx.remaining_ms() == 0
    with pytest.raises(AmpError):
        binding_timeout_ms(500, ctx)
    unbounded = RunnerContext(capability_id="x:1.0.0", version="1.0.0")
    assert unbounded.remaining_ms() is None and binding_timeout_ms(700, unbounded) == 700
