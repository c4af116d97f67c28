"""RFC 007 vectors on the CAP path (§5.10) that ``ampcap interop`` drives
against a target serving ``org.agentries.payment.workflow:1.0.0``: the five
the suite requires (007:A.9, A.17a, A.17b, A.18, A.21) and the CAP-path
flow vectors (A.1, A.3, A.4, A.12, A.13, A.15; A.6/A.20 and A.7 need a session or a
credential of the target's and are tested against ampcap's daemon in tests/pay/test_served.py). Each one opens a
fresh connection, judged on the exact AMP code, ``reply_to`` correlation
and exactly one terminal reply, as :mod:`.vectors` does.

A target that does not declare the workflow (CAP_QUERY answered 4002) has
every one skipped, saying so: RFC 007 is an optional extension of the suite.

A.17a and A.17b are about the *caller's* checks (RFC 004 §7.2 on the
client side): the harness takes the target's real workflow descriptor and
applies ampcap's trust profile to it: signed by the target's DID it must
verify, and the same descriptor altered must be refused 3001 (an unsigned
one is refused 3001 outright); its schema artifacts are fetched from the
target and hash-checked, and a reference whose hash does not match what
the target serves is refused 5002. A.21's second case needs an execution
failure the payer can cause: ampcap's demo settles no payment on the
network ``ampcap-offline-ledger`` (its adapter is always down); a target
without such a network has that case skipped.

A.19 (coarse policy denial) needs a caller the target's policy denies: the
harness calls as a fixed identity, :data:`A19_DENIED_DID` (its key derives
from a public seed: it proves nothing but who is asking), which ``--self``
denies. The invoke carries an invalid delegation chain and asks about an
unknown payment, so a target that checked delegation (3004) or ran the
workflow (4106) did not deny it by policy: skipped, naming the DID to deny.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

from ..caps.artifacts import ArtifactFetcher
from ..caps.descriptor import Descriptor
from ..caps.descriptor_trust import DescriptorChecker, DescriptorTrust
from ..errors import AmpError
from ..pay.workflow import WORKFLOW_ID, WORKFLOW_NAME
from ..wire.cbor import dumps
from ..wire.identity import Identity
from ..wire.registry import MessageType
from .judge import Outcome, expect_error, failed, passed, single_terminal, skipped
from .probe import Exchange, Probe
from .suite import register
from .vectors import Context, Vector

__all__ = ["PAY_VECTORS", "A19_DENIED_DID", "a19_denied_identity"]

_RESULT, _ERROR = int(MessageType.CAP_RESULT), int(MessageType.ERROR)
_TERMINAL = frozenset({_RESULT})
_INTERIM = frozenset({int(MessageType.ACK), int(MessageType.PROCESSING), int(MessageType.PROGRESS)})
_PAYMENT_CODES = frozenset({1004, 4101, 4102, 4103, 4104, 4105, 4106})
LEDGER, OFFLINE = "ampcap-local-ledger", "ampcap-offline-ledger"
A19_SEED = hashlib.sha256(b"ampcap interop 007:A.19: a caller the target's policy denies").digest()


def a19_denied_identity() -> Identity:
    """The caller of A.19: an identity anyone can derive (a name, not a secret)."""
    return Identity.from_seed(A19_SEED)


A19_DENIED_DID = a19_denied_identity().did
NOT_SERVED = "the target does not serve org.agentries.payment.workflow:1.0.0 (RFC 007 is an optional extension)"


def _money(amount: int, network: str = LEDGER, asset: str = "USD") -> dict[str, Any]:
    return {"amount_minor": amount, "asset": asset, "network": network}


async def _exchange(ctx: Context, typ: int, body: Any, terminal: frozenset[int] = _TERMINAL) -> Exchange:
    async with ctx.session() as probe:
        env = await probe.send_message(typ, body)
        return await probe.collect(env, terminal, interim_types=_INTERIM)


async def _workflow(ctx: Context) -> Descriptor | Outcome:
    """The target's workflow descriptor, or the skip/failure saying why not."""
    if ctx.raw:
        return skipped("RFC 007 vectors need an RFC 002 target (raw framing: the Rust example serves no payments)")
    ex = await _exchange(ctx, int(MessageType.CAP_QUERY), {"filter": {"capability": WORKFLOW_NAME}},
                         frozenset({int(MessageType.CAP_DECLARE)}))
    reply = single_terminal(ex)
    if isinstance(reply, Outcome):
        return reply
    if reply.error_code == 4002 or reply.error_code == 3001:
        return skipped(NOT_SERVED)
    body = reply.envelope.body if reply.envelope is not None else None
    for raw in (body.get("capabilities") if type(body) is dict else None) or ():
        try:
            d = Descriptor.from_wire(raw)
        except AmpError as exc:
            return failed(f"the workflow's descriptor does not validate: {exc}")
        if str(d.id) == WORKFLOW_ID:
            return d
    return skipped(NOT_SERVED)


async def _call(ctx: Context, params: Any, **extra: Any) -> Exchange:
    return await _exchange(ctx, int(MessageType.CAP_INVOKE), {"id": WORKFLOW_ID, "params": params, **extra})


async def _on(probe: Probe, params: Any) -> Exchange:
    """One workflow invoke on ``probe``'s connection (one payer for a whole flow)."""
    env = await probe.send_message(int(MessageType.CAP_INVOKE), {"id": WORKFLOW_ID, "params": params})
    return await probe.collect(env, _TERMINAL, interim_types=_INTERIM)


def _quote_body(probe: Probe, payment_id: bytes, money: dict[str, Any]) -> dict[str, Any]:
    return {"pay_v": 1, "op": "quote_request", "payment_id": payment_id, "payee": probe.peer_did, "money": money}


def _authorize_body(payment_id: bytes, quote: dict[str, Any]) -> dict[str, Any]:
    return {"pay_v": 1, "op": "authorize", "payment_id": payment_id, "quote_id": quote.get("quote_id"),
            "payer": quote.get("payer"), "payee": quote.get("payee"), "money": quote.get("money")}


def _result(ex: Exchange) -> dict[str, Any] | Outcome:
    """A CAP_RESULT success's result map, or the failure."""
    reply = single_terminal(ex)
    if isinstance(reply, Outcome):
        return reply
    body = reply.envelope.body if reply.envelope is not None else None
    if reply.typ != _RESULT or type(body) is not dict or body.get("status") != "success":
        return failed(f"expected CAP_RESULT success, got {reply.describe()}")
    result = body.get("result")
    return result if type(result) is dict else failed("CAP_RESULT success without a result map")


async def _target_did(ctx: Context) -> str | Outcome:
    async with ctx.session() as probe:
        assert probe.peer_did is not None
        return probe.peer_did


# ------------------------------------------------------------- required


async def v007_a9(ctx: Context) -> Outcome:
    """A.9: a REQUEST with a business ``op`` and no ``pay_v`` is not payment-control."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    ex = await _exchange(ctx, int(MessageType.REQUEST), {"op": "status_query", "payment_id": os.urandom(16)},
                         frozenset({int(MessageType.RESPONSE)}))
    reply = single_terminal(ex)
    if isinstance(reply, Outcome):
        return reply
    if reply.error_code in _PAYMENT_CODES:
        return failed(f"a body without pay_v was read as payment-control: {reply.describe()}")
    body = reply.envelope.body if reply.envelope is not None else None
    if type(body) is dict and "pay_v" in body:
        return failed(f"a body without pay_v got a payment answer: {reply.describe()}")
    return passed(f"not treated as payment-control: {reply.describe()}")


async def v007_a17a(ctx: Context) -> Outcome:
    """A.17a: a trust profile requiring the workflow's signature refuses a
    missing or invalid one with 3001 (19 0b b9)."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    did = await _target_did(ctx)
    if isinstance(did, Outcome):
        return did
    trust = DescriptorTrust(require=frozenset({WORKFLOW_ID}), owners={WORKFLOW_NAME: (did,)})
    if b"\x19\x0b\xb9" not in dumps(AmpError(3001, "x").to_body()):
        return failed("3001 is not encoded as 19 0b b9")
    altered = msgspec.structs.replace(found, notes=(found.notes or "") + " (altered)")
    if found.descriptor_sig is None:
        try:
            DescriptorChecker(trust).check(found)
        except AmpError as exc:
            return passed(f"unsigned descriptor refused {exc.code}") if exc.code == 3001 else \
                failed(f"unsigned descriptor refused {exc.code}, expected 3001")
        return failed("an unsigned descriptor passed a profile requiring a signature")
    try:
        DescriptorChecker(trust).check(found)
    except AmpError as exc:
        return failed(f"the target's own signed descriptor fails under its DID: {exc.code} {exc.message}")
    try:
        DescriptorChecker(trust).check(altered)
    except AmpError as exc:
        if exc.code == 3001:
            return passed("signed descriptor verifies; the same descriptor altered is refused 3001 (19 0b b9)")
        return failed(f"altered descriptor refused {exc.code}, expected 3001")
    return failed("an altered signed descriptor passed")


async def v007_a17b(ctx: Context) -> Outcome:
    """A.17b: a workflow schema artifact that cannot be had, or fails its
    hash, is refused 5002 (19 13 8a)."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    if b"\x19\x13\x8a" not in dumps(AmpError(5002, "x").to_body()):
        return failed("5002 is not encoded as 19 13 8a")

    async def invoke(capability_id: str, params: Any) -> Any:
        got = _result(await _exchange(ctx, int(MessageType.CAP_INVOKE), {"id": capability_id, "params": params}))
        if isinstance(got, Outcome):
            raise AmpError(5002, got.notes)
        return got

    ref = found.input_schema
    try:
        await ArtifactFetcher(invoke).schema(ref)
        served = True
    except AmpError as exc:
        if exc.code != 5002:
            return failed(f"an artifact the target does not serve was refused {exc.code}, expected 5002")
        served = False
    bad = msgspec.structs.replace(ref, hash=bytes(len(ref.hash)))
    try:
        await ArtifactFetcher(invoke).schema(bad)
    except AmpError as exc:
        if exc.code == 5002:
            return passed("artifact fetched and verified; a hash mismatch is refused 5002 (19 13 8a)" if served
                          else "the target serves no schema artifact: refused 5002 (19 13 8a)")
        return failed(f"an artifact failing its hash was refused {exc.code}, expected 5002")
    return failed("an artifact failing its hash was accepted")


async def v007_a18(ctx: Context) -> Outcome:
    """A.18: invalid ``body.delegation`` on a payment invoke → ERROR 3004 (19 0b bc)."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    ex = await _call(ctx, {"pay_v": 1, "op": "status_query", "payment_id": os.urandom(16)},
                     delegation={"chain": [b"not a credential"]})
    outcome = expect_error(ex, 3004)
    if outcome.status.value == "pass" and b"\x19\x0b\xbc" not in ex.terminals[0].raw:
        return failed("ERROR 3004 not encoded as 19 0b bc")
    return outcome


async def v007_a21(ctx: Context) -> Outcome:
    """A.21: a rejection before execution is AMP ERROR; a failure after
    acceptance is CAP_RESULT status "error"."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    rejected = single_terminal(await _call(ctx, {"pay_v": 2, "op": "status_query", "payment_id": os.urandom(16)}))
    if isinstance(rejected, Outcome):
        return rejected
    if rejected.typ != _ERROR or rejected.error_code != 1004:
        return failed(f"case 1 (pay_v 2): expected ERROR 1004, got {rejected.describe()}")
    pid = os.urandom(16)
    async with ctx.session() as probe:
        quote = _result(await _on(probe, _quote_body(probe, pid, _money(100, OFFLINE))))
        if isinstance(quote, Outcome):
            return skipped(f"case 1 passed (ERROR 1004); case 2 needs a network whose settlement fails "
                           f"({OFFLINE}, ampcap's demo), which the target does not quote: {quote.notes}")
        auth = single_terminal(await _on(probe, _authorize_body(pid, quote)))
    if isinstance(auth, Outcome):
        return auth
    body = auth.envelope.body if auth.envelope is not None else None
    if auth.typ != _RESULT or type(body) is not dict or body.get("status") != "error":
        return failed(f"case 2 (settlement down after acceptance): expected CAP_RESULT error, got {auth.describe()}")
    return passed("case 1: ERROR 1004; case 2: CAP_RESULT status error "
                  f"{body.get('error', {}).get('code') if type(body.get('error')) is dict else ''}")


async def v007_a19(ctx: Context) -> Outcome:
    """A.19: a payment invoke from a caller the coarse policy denies → ERROR
    3001 (19 0b b9), before delegation (RFC 004 §7.2: step 2 before step 3)
    and before the workflow runs."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    probe = await Probe.open(ctx.url, ctx.settings, identity=a19_denied_identity())
    try:
        probe.peer_did = ctx.target_did
        await probe.open_session()
        env = await probe.send_message(int(MessageType.CAP_INVOKE), {
            "id": WORKFLOW_ID, "params": {"pay_v": 1, "op": "status_query", "payment_id": os.urandom(16)},
            "delegation": {"chain": [b"not a credential"]}})
        ex = await probe.collect(env, _TERMINAL, interim_types=_INTERIM)
    finally:
        await probe.aclose()
    reply = single_terminal(ex)
    if isinstance(reply, Outcome):
        return reply
    if reply.error_code in (3004, 4106):
        return skipped(f"the target's policy admits {A19_DENIED_DID} (it answered {reply.error_code}: past coarse "
                       "policy); deny that DID in its policy to run A.19")
    outcome = expect_error(ex, 3001)
    if outcome.status.value == "pass" and b"\x19\x0b\xb9" not in ex.terminals[0].raw:
        return failed("ERROR 3001 not encoded as 19 0b b9")
    return outcome


# ------------------------------------------------------------- the CAP-path flow


async def v007_a1_a4_a13(ctx: Context) -> Outcome:
    """A.1, A.4, A.13: quote → authorize (twice: same answer) → capture (twice: same answer)."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    pid = os.urandom(16)
    async with ctx.session() as probe:
        quote = _result(await _on(probe, _quote_body(probe, pid, _money(100))))
        if isinstance(quote, Outcome):
            return quote
        authorize = _authorize_body(pid, quote)
        a1, a2 = _result(await _on(probe, authorize)), _result(await _on(probe, authorize))
        if isinstance(a1, Outcome) or isinstance(a2, Outcome):
            return a1 if isinstance(a1, Outcome) else a2  # type: ignore[return-value]
        if a1 != a2 or a1.get("status") != "authorized":
            return failed(f"authorize replay: {a1!r} then {a2!r} (expected the same authorized answer)")
        capture = {"pay_v": 1, "op": "capture", "payment_id": pid, "quote_id": quote.get("quote_id"),
                   "money": quote.get("money")}
        c1, c2 = _result(await _on(probe, capture)), _result(await _on(probe, capture))
        if isinstance(c1, Outcome) or isinstance(c2, Outcome):
            return c1 if isinstance(c1, Outcome) else c2  # type: ignore[return-value]
        if c1 != c2 or c1.get("status") not in ("captured", "settled"):
            return failed(f"capture replay: {c1!r} then {c2!r}")
        return passed(f"quoted → authorized → {c1.get('status')}; replays answered the same")


async def v007_a3(ctx: Context) -> Outcome:
    """A.3: capture while still quoted → ERROR 4103."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    pid = os.urandom(16)
    async with ctx.session() as probe:
        quote = _result(await _on(probe, _quote_body(probe, pid, _money(100))))
        if isinstance(quote, Outcome):
            return quote
        return expect_error(await _on(probe, {"pay_v": 1, "op": "capture", "payment_id": pid,
                                              "quote_id": quote.get("quote_id"), "money": quote.get("money")}), 4103)


async def v007_a12(ctx: Context) -> Outcome:
    """A.12: status_query for an unknown payment_id → ERROR 4106."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    return expect_error(await _call(ctx, {"pay_v": 1, "op": "status_query", "payment_id": os.urandom(16)}), 4106)


async def v007_a15(ctx: Context) -> Outcome:
    """A.15: a quote_request with asset "usd" (not canonical) → ERROR 4001."""
    found = await _workflow(ctx)
    if isinstance(found, Outcome):
        return found
    did = await _target_did(ctx)
    if isinstance(did, Outcome):
        return did
    return expect_error(await _call(ctx, {"pay_v": 1, "op": "quote_request", "payment_id": os.urandom(16),
                                          "payee": did, "money": _money(100, asset="usd")}), 4001)


PAY_VECTORS: tuple[Vector, ...] = (
    Vector("007:A.1", "quote → authorize → capture; replays idempotent (A.4, A.13)", v007_a1_a4_a13),
    Vector("007:A.3", "capture before authorization → 4103", v007_a3),
    Vector("007:A.9", "no pay_v: not payment-control", v007_a9),
    Vector("007:A.12", "unknown payment_id → 4106", v007_a12),
    Vector("007:A.15", "non-canonical asset code → 4001", v007_a15),
    Vector("007:A.17a", "descriptor signature missing/invalid → 3001", v007_a17a),
    Vector("007:A.17b", "descriptor artifact unavailable → 5002", v007_a17b),
    Vector("007:A.18", "invalid delegation evidence → 3004", v007_a18),
    Vector("007:A.19", "coarse policy denial → 3001, before delegation", v007_a19),
    Vector("007:A.21", "rejection = ERROR, execution failure = CAP_RESULT error", v007_a21),
)

for _vector in PAY_VECTORS:
    register(_vector)
