"""A price on an MCP, HTTP or gRPC binding (RFC 007, docs/payments.md): the
capability requires a captured payment for it and spends it as a python or
command one does; against the real MCP (stdio), HTTP and gRPC test servers,
served by a daemon built as ``serve --payments --manifest`` builds it."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from ampcap.caps.bundle import SchemaStore
from ampcap.caps.catalog import Catalog
from ampcap.caps.manifest import Manifest
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError
from ampcap.net.api.payments import Payer
from ampcap.net.api.peer import Peer
from ampcap.net.daemon.core import Daemon
from ampcap.net.features.payments import DEMO_CREDIT, PaymentService
from ampcap.pay.ledger import LEDGER_NETWORK
from ampcap.pay.money import Money
from ampcap.store.database import StateStore
from ampcap.wire.identity import Identity

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import build, capability, stdio_server  # noqa: E402
from grpc_server import grpc_server  # noqa: E402
from http_server import http_server  # noqa: E402

PRICE = Money(125, "USD", LEDGER_NETWORK)
_PRICE = 'price = { amount_minor = 125, asset = "USD", network = "ampcap-local-ledger" }\n'


@asynccontextmanager
async def paid_daemon(manifest: Manifest) -> AsyncIterator[tuple[str, Daemon, PaymentService]]:
    """What ``serve --demo --payments --manifest FILE`` composes, in process, on a free port."""
    identity = Identity.generate(os.urandom)
    store = StateStore.open(None)
    priced = tuple(spec for spec in manifest.capabilities if spec.price is not None)
    service = PaymentService(identity, store, demo_credit=DEMO_CREDIT, priced=priced)
    paying = service.manifest()
    catalog = Catalog([*manifest.capabilities, *paying.capabilities], cursor_key=os.urandom(32))
    daemon = Daemon(identity, catalog, params=ParamsValidator(SchemaStore([manifest.bundle, paying.bundle],
                                                                          offline=True)),
                    handlers=service.handlers(), store=store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            host, port = (await daemon.listen("127.0.0.1", 0))[0].socket.getsockname()[:2]
            yield f"amp://{host}:{port}", daemon, service
            with trio.CancelScope(shield=True):
                await daemon.drain(2.0)
            nursery.cancel_scope.cancel()
    finally:
        store.close()


@pytest.mark.trio
async def test_mcp_http_and_grpc_bindings_can_be_sold(tmp_path: Path) -> None:
    with http_server() as (base, http_rec), grpc_server() as (target, grpc_rec):
        manifest = build(tmp_path, stdio_server()
                         + capability("add", '[capability.binding.mcp]\nserver = "tools"\ntool = "add"\n',
                                      extra=_PRICE)
                         + capability("post", f'[capability.binding.http]\nmethod = "POST"\nurl = "{base}/echo/paid"\n',
                                      extra=_PRICE)
                         + capability("scan", f'[capability.binding.grpc]\ntarget = "{target}"\n'
                                              'method = "scan.v1.Scanner/Scan"\n', extra=_PRICE))
        calls = {
            "org.example.add:1.0.0": ({"a": 2, "b": 40}, {"total": 42}),
            "org.example.post:1.0.0": ({"n": 7}, None),
            "org.example.scan:1.0.0": ({"path": "src"}, {"findings": ["src:low"], "elapsed": 7, "path": "src"}),
        }
        async with paid_daemon(manifest) as (url, daemon, service):
            caller = Identity.generate(os.urandom)
            async with Peer(caller).connect(url) as remote:
                payer = Payer(remote)
                # The published schemas ask for $payment.
                for cid in calls:
                    schema = daemon.catalog.get(cid).input_schema  # type: ignore[union-attr]
                    assert "$payment" in schema["required"]
                for cid, (params, expected) in calls.items():
                    # Unpaid, or with a payment for another capability: 3001, and nothing reached the server.
                    hits = (http_rec.hits["echo"], grpc_rec.calls)
                    with pytest.raises(AmpError) as unpaid:
                        await remote.invoke(cid, params={**params, "$payment": bytes(16)})
                    assert unpaid.value.code == 3001
                    assert (http_rec.hits["echo"], grpc_rec.calls) == hits
                    quote, captured = await payer.pay(PRICE, service_ref=cid)
                    assert captured["status"] == "settled"
                    got = await remote.invoke(cid, params={**params, "$payment": quote.payment_id})
                    if expected is not None:
                        assert got == expected
                    else:  # HTTP: the server got the params without $payment
                        assert got["body"] == params and got["path"] == "/echo/paid"
                    with pytest.raises(AmpError) as again:
                        await remote.invoke(cid, params={**params, "$payment": quote.payment_id})
                    assert again.value.code == 3001 and "already bought" in again.value.message
                    assert service.state.consumed(quote.payment_id) == cid
                assert http_rec.hits["echo"] == 1 and grpc_rec.calls == 1
                assert all("$payment" not in str(r["body"]) for r in http_rec.requests)
                balances = service.state.balances("USD", LEDGER_NETWORK)
                assert balances[caller.did] == DEMO_CREDIT.amount_minor - 3 * PRICE.amount_minor
                assert balances[daemon.identity.did] == 3 * PRICE.amount_minor and sum(balances.values()) == 0
