"""The payee served by a real daemon (net/features/payments.py), paid by the
payer's Python API (net/api/payments.py) over real AMP connections, with the
state in the store, on SQLite and PostgreSQL (``store`` fixture)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.descriptor_trust import DescriptorChecker, DescriptorTrust, SignatureStatus
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError
from ampcap.net.api.payments import Payer
from ampcap.net.api.peer import Peer
from ampcap.net.daemon.core import Daemon
from ampcap.net.features.payments import DEMO_CREDIT, PAID_ECHO_ID, PAID_ECHO_PRICE, PaymentService
from ampcap.pay.ledger import LEDGER_NETWORK
from ampcap.pay.money import Money
from ampcap.pay.workflow import WORKFLOW_ID, WORKFLOW_NAME
from ampcap.store.database import StateStore
from ampcap.wire.identity import Identity

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import ERROR, RESULT, memory_peer  # noqa: E402

pytestmark = pytest.mark.trio

USD = lambda n: Money(n, "USD", LEDGER_NETWORK)  # noqa: E731


@asynccontextmanager
async def payee_daemon(store: StateStore, **options: Any) -> AsyncIterator[tuple[Daemon, str, PaymentService]]:
    """What ``serve --demo --payments`` builds, on ``store``, listening on a free port."""
    identity = Identity.from_seed(os.urandom(32))
    options.setdefault("prices", {PAID_ECHO_ID: PAID_ECHO_PRICE})
    options.setdefault("demo_credit", DEMO_CREDIT)
    service = PaymentService(identity, store, **options)
    demo, paying = demo_manifest(), service.manifest()
    from ampcap.caps.bundle import SchemaStore

    schemas = SchemaStore([demo.bundle, paying.bundle], offline=True)
    catalog = Catalog([*demo.capabilities, *paying.capabilities], cursor_key=os.urandom(32))
    daemon = Daemon(identity, catalog, params=ParamsValidator(schemas), handlers=service.handlers(), store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        listeners = await daemon.listen("127.0.0.1", 0)
        host, port = listeners[0].socket.getsockname()[:2]
        yield daemon, f"amp://{host}:{port}", service
        with trio.CancelScope(shield=True):
            await daemon.drain(1.0)
        nursery.cancel_scope.cancel()


async def test_a_payment_bought_and_spent_on_a_paid_call(store: StateStore) -> None:
    async with payee_daemon(store) as (daemon, url, service):
        caller = Identity.from_seed(os.urandom(32))
        async with Peer(caller).connect(url) as remote:
            payer = Payer(remote)
            quote, captured = await payer.pay(PAID_ECHO_PRICE, service_ref=PAID_ECHO_ID)
            assert captured["status"] == "settled" and captured["settlement"]["adapter_id"] == daemon.identity.did
            assert quote.payer == caller.did and quote.money == PAID_ECHO_PRICE
            assert (await payer.status(quote.payment_id))["status"] == "settled"
            # The ledger moved the price from the payer to the payee, once.
            balances = service.state.balances("USD", LEDGER_NETWORK)
            assert balances[caller.did] == DEMO_CREDIT.amount_minor - 500
            assert balances[daemon.identity.did] == 500
            # The payment buys one call, and only one.
            result = await remote.invoke(PAID_ECHO_ID, params={"message": "hi", "$payment": quote.payment_id})
            assert result == {"message": "hi", "paid": True}
            with pytest.raises(AmpError) as again:
                await remote.invoke(PAID_ECHO_ID, params={"message": "hi", "$payment": quote.payment_id})
            assert again.value.code == 3001 and "already bought" in again.value.message
            with pytest.raises(AmpError) as refund:
                await payer.refund(quote.payment_id)
            assert refund.value.code == 4103  # the call it bought ran
            with pytest.raises(AmpError) as unpaid:
                await remote.invoke(PAID_ECHO_ID, params={"message": "hi"})
            assert unpaid.value.code in (3001, 4004)


async def test_retries_are_idempotent_and_another_callers_payment_buys_nothing(store: StateStore) -> None:
    async with payee_daemon(store) as (daemon, url, service):
        alice, mallory = Identity.from_seed(os.urandom(32)), Identity.from_seed(os.urandom(32))
        async with Peer(alice).connect(url) as a, Peer(mallory).connect(url) as m:
            payer = Payer(a)
            quote = await payer.quote(PAID_ECHO_PRICE, service_ref=PAID_ECHO_ID)
            first = await payer.authorize(quote)
            assert await payer.authorize(quote) == first  # §5.9: the same answer, no second hold
            captured = await payer.capture(quote)
            assert await payer.capture(quote) == captured
            assert service.state.balances("USD", LEDGER_NETWORK)[daemon.identity.did] == 500
            # Mallory names Alice's payment: refused before running, learns nothing.
            with pytest.raises(AmpError) as stolen:
                await m.invoke(PAID_ECHO_ID, params={"message": "x", "$payment": quote.payment_id.hex()})
            assert stolen.value.code == 3001
            # Nor may Mallory act on it through the workflow (3001), or see an unknown one (4106).
            with pytest.raises(AmpError) as refund:
                await Payer(m).refund(quote.payment_id)
            assert refund.value.code == 3001
            with pytest.raises(AmpError) as unknown:
                await Payer(m).status(bytes(16))
            assert unknown.value.code == 4106


async def test_price_terms_expiry_and_cancel(store: StateStore) -> None:
    now = [0]
    async with payee_daemon(store, quote_ttl_ms=60_000) as (daemon, url, service):
        async with Peer(Identity.from_seed(os.urandom(32))).connect(url) as remote:
            payer = Payer(remote)
            with pytest.raises(AmpError) as cheap:
                await payer.quote(USD(1), service_ref=PAID_ECHO_ID)
            assert cheap.value.code == 4001
            with pytest.raises(AmpError) as euro:
                await payer.quote(Money(500, "EUR", LEDGER_NETWORK), service_ref=PAID_ECHO_ID)
            assert euro.value.code == 4104
            quote = await payer.quote(USD(700))  # no service_ref: as proposed
            canceled = await payer.cancel(quote.payment_id)
            assert canceled["status"] == "canceled"
            with pytest.raises(AmpError) as late:
                await payer.authorize(quote)
            assert late.value.code == 4103
            # The payer refuses an expired quote without sending.
            clocked = Payer(remote, clock_ms=lambda: now[0])
            q2 = await payer.quote(USD(5))
            now[0] = q2.expires_at + 1
            with pytest.raises(AmpError) as expired:
                await clocked.authorize(q2)
            assert expired.value.code == 4102


async def test_rejections_are_amp_error_failures_cap_result_and_the_descriptor_is_signed(store: StateStore) -> None:
    """A.21 over the wire: a pre-execution rejection is an AMP ERROR message,
    an answer a CAP_RESULT; the workflow's descriptor is signed by the daemon."""
    async with payee_daemon(store) as (daemon, url, service):
        async with Peer(Identity.from_seed(os.urandom(32))).connect(url) as remote:
            (descriptor,) = list(await remote.query(WORKFLOW_NAME))
            assert str(descriptor.id) == WORKFLOW_ID and descriptor.descriptor_sig is not None
            owner = DescriptorTrust(require_all=True, owners={WORKFLOW_NAME: (daemon.identity.did,)})
            assert DescriptorChecker(owner).check(descriptor).status is SignatureStatus.SIGNED
            stranger = DescriptorTrust(require_all=True, owners={WORKFLOW_NAME: (Identity.from_seed(bytes(32)).did,)})
            with pytest.raises(AmpError) as forged:
                DescriptorChecker(stranger).check(descriptor)
            assert forged.value.code == 3001
        async with memory_peer(daemon) as raw:
            bad = await raw.invoke({"id": WORKFLOW_ID, "params": {"pay_v": 2, "op": "status_query",
                                                                   "payment_id": bytes(16)}})
            assert bad.envelope.typ == ERROR and bad.body["code"] == 1004
            unknown = await raw.invoke({"id": WORKFLOW_ID, "params": {"pay_v": 1, "op": "status_query",
                                                                       "payment_id": bytes(16)}})
            assert unknown.envelope.typ == ERROR and unknown.body["code"] == 4106
            quote = await raw.invoke({"id": WORKFLOW_ID, "params": {
                "pay_v": 1, "op": "quote_request", "payment_id": bytes(range(16)), "payee": daemon.identity.did,
                "money": {"amount_minor": 10, "asset": "USD", "network": LEDGER_NETWORK}}})
            assert quote.envelope.typ == RESULT and quote.body["status"] == "success"
            assert quote.body["result"]["op"] == "quote"


async def test_a7_a18_delegated_payment_through_the_daemon(store: StateStore) -> None:
    """The executor's RFC 005 step runs before the workflow: a good chain makes
    the delegate pay for its principal (the principal's balance moves); a bad
    one is 3004 and nothing is stored."""
    import time

    from ampcap.deleg.credential import issue

    owner, assistant = Identity.from_seed(os.urandom(32)), Identity.from_seed(os.urandom(32))
    now = time.time_ns() // 1_000_000
    good = [issue(owner, delegation_id="pay-1", delegate=assistant.did, issued_at=now - 1000,
                  expires_at=now + 3_600_000, capabilities=[WORKFLOW_NAME])]
    expired = [issue(owner, delegation_id="pay-2", delegate=assistant.did, issued_at=now - 7_200_000,
                     expires_at=now - 3_600_000, capabilities=[WORKFLOW_NAME])]
    async with payee_daemon(store) as (daemon, url, service):
        async with Peer(assistant).connect(url) as remote:
            payer = Payer(remote, delegation=good)
            quote, captured = await payer.pay(USD(300))
            assert quote.payer == owner.did and captured["status"] == "settled"
            balances = service.state.balances("USD", LEDGER_NETWORK)
            assert balances[owner.did] == DEMO_CREDIT.amount_minor - 300 and assistant.did not in balances
            # The principal itself may act on the payment too (it is the payer).
            async with Peer(owner).connect(url) as own:
                assert (await Payer(own).status(quote.payment_id))["status"] == "settled"
            with pytest.raises(AmpError) as bad:
                await Payer(remote, delegation=expired).quote(USD(300), payment_id=bytes(range(16)))
            assert bad.value.code == 3004
            assert service.state.payment(bytes(range(16))) is None


async def test_a6_a20_session_scoped_payment(store: StateStore) -> None:
    """A payment inside an RFC 006 session carries the session in its body;
    a body naming another session than the envelope's is 4001 (A.20)."""
    async with payee_daemon(store) as (daemon, url, service):
        async with Peer(Identity.from_seed(os.urandom(32))).connect(url) as remote:
            async with remote.session() as session:
                payer = Payer(session)
                quote, captured = await payer.pay(USD(40))
                assert captured["status"] == "settled"
                assert service.state.payment(quote.payment_id).session_id == session.session_id
                body = {"pay_v": 1, "op": "status_query", "payment_id": quote.payment_id,
                        "session": {"session_id": bytes(16), "session_scope": True}}
                with pytest.raises(AmpError) as other:
                    await session.invoke(WORKFLOW_NAME, version="1.0.0", params=body)
                assert other.value.code == 4001


async def test_a17_a_trusted_caller_refuses_unsigned_wrongly_signed_and_unreachable(store: StateStore) -> None:
    """A.17a/A.17b through the client: a profile requiring signatures refuses
    an unsigned descriptor and one signed by a key the owner does not hold
    (3001) before invoking; a signed one whose schemas the peer does not
    serve (this daemon offers no artifact service) is 5002."""
    from ampcap.net.api.trusted import TrustedCaller

    async with payee_daemon(store) as (daemon, url, service):
        async with Peer(Identity.from_seed(os.urandom(32))).connect(url) as remote:
            own = {"org.agentries.payment": (daemon.identity.did,), "org.ampcap": (daemon.identity.did,)}
            caller = TrustedCaller(remote, DescriptorTrust(require=frozenset({"org.ampcap.demo.echo"}), owners=own))
            with pytest.raises(AmpError) as unsigned:
                await caller.invoke("org.ampcap.demo.echo:1.0.0", params={"message": "x"})
            assert unsigned.value.code == 3001
            other = {"org.agentries.payment": (Identity.from_seed(bytes(32)).did,)}
            with pytest.raises(AmpError) as wrong:
                await TrustedCaller(remote, DescriptorTrust(require_all=True, owners=other)).invoke(
                    WORKFLOW_ID, params={})
            assert wrong.value.code == 3001
            with pytest.raises(AmpError) as unreachable:
                await TrustedCaller(remote, DescriptorTrust(require_all=True, owners=own)).invoke(
                    WORKFLOW_ID, params={})
            assert unreachable.value.code == 5002
            # Not required: the unsigned demo echo runs, its verdict says unsigned.
            relaxed = TrustedCaller(remote, DescriptorTrust(owners=own))
            assert await relaxed.invoke("org.ampcap.demo.echo:1.0.0", params={"message": "x"})
            assert (await relaxed.descriptor_verdict("org.ampcap.demo.echo:1.0.0")).status is SignatureStatus.UNSIGNED
