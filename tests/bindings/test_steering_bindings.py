"""R23 at the HTTP and gRPC bindings, against real servers: an invoke its
caller cancels aborts the HTTP request and cancels the gRPC call; the
invoke's budget is the gRPC deadline the server sees."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import build, capability, serving  # noqa: E402
from grpc_server import grpc_server  # noqa: E402
from http_server import http_server  # noqa: E402


@pytest.mark.trio
async def test_a_cancel_aborts_the_http_request(tmp_path: Path) -> None:
    with http_server() as (base, rec):
        manifest = build(tmp_path, capability("slow", "[capability.binding.http]\n"
                                                      f'method = "GET"\nurl = "{base}/slow"\ntimeout_ms = 60000\n'))
        async with serving(manifest) as (_, remote):
            with trio.move_on_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: remote.invoke("org.example.slow:1.0.0", params={}))
                    while not rec.hits["slow"]:
                        await trio.sleep(0.02)
                    nursery.cancel_scope.cancel()  # the caller gives up: ampcap's cancel
            assert await trio.to_thread.run_sync(rec.aborted.wait, 5)


@pytest.mark.trio
async def test_the_budget_is_the_grpc_deadline_and_a_cancel_ends_the_call(tmp_path: Path) -> None:
    with grpc_server() as (target, rec):
        manifest = build(tmp_path, capability("scan", "[capability.binding.grpc]\n"
                                                      f'target = "{target}"\nmethod = "scan.v1.Scanner/Scan"\n'
                                                      'timeout_ms = 60000\n'))
        async with serving(manifest) as (_, remote):
            await remote.invoke("org.example.scan:1.0.0", params={"path": "p"}, timeout=2.0)
            assert rec.time_remaining is not None and 0 < rec.time_remaining <= 2.0
            with trio.move_on_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: remote.invoke("org.example.scan:1.0.0", params={"delay_ms": 20_000}))
                    while rec.calls < 2:
                        await trio.sleep(0.02)
                    nursery.cancel_scope.cancel()
            assert await trio.to_thread.run_sync(rec.cancelled.wait, 5)
