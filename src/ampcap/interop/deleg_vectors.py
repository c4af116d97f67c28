"""RFC 005 vectors ``ampcap interop`` drives against a target, in the style of
:mod:`.vectors` (one coroutine per vector, ids ``005:A.n``).

The probe is the delegate: each vector mints throwaway delegator
identities, signs a chain whose last link names the probe's own DID, and
presents it. A target that does not implement RFC 005 (ruling R9's 3004 for
any delegation) passes A.4 and A.14 as well: both are denials, and what is
judged is the code, its bytes and that there is exactly one answer.

:data:`DELEG_VECTORS` are registered with the suite (:mod:`.suite`) on import.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..deleg.bodies import revoke_body
from ..deleg.chain import evidence_body
from ..deleg.credential import Credential, issue, revoke
from ..wire.envelope import seal
from ..wire.identity import Identity
from ..wire.registry import MessageType
from .judge import Outcome, Status, expect_error, failed, passed
from .probe import UNKNOWN_PEER_DID, Exchange, Probe
from .suite import register
from .vectors import Context, Vector, _needs_subject

__all__ = ["DELEG_VECTORS", "v005_a4", "v005_a14", "v005_a20"]

_CODE_3004 = bytes.fromhex("64636f6465190bbc")  # "code": 3004 (19 0b bc)
_CODE_4001 = bytes.fromhex("64636f6465190fa1")  # "code": 4001 (19 0f a1)
_HOUR = 3_600_000


def _expanding_chain(ctx: Context, delegate: str) -> list[Credential]:
    """A.4: A → B allows action ``read``; B → the probe asks for ``write``."""
    now = time.time_ns() // 1_000_000
    a, b = Identity.generate(os.urandom), Identity.generate(os.urandom)
    return [issue(a, delegation_id="interop:a4:1", delegate=b.did, issued_at=now - 1000, expires_at=now + _HOUR,
                  capabilities=[ctx.subject.name], actions=["read"], allow_subdelegation=True),
            issue(b, delegation_id="interop:a4:2", delegate=delegate, issued_at=now - 1000, expires_at=now + _HOUR,
                  capabilities=[ctx.subject.name], actions=["write"])]


def _invoke_body(ctx: Context) -> dict[str, Any]:
    return {"id": f"{ctx.subject.name}:{ctx.subject.by_id_version()}",
            "params": ctx.subject.params if ctx.subject.params is not None else {}}


async def _delegated(ctx: Context, *, in_ext: bool) -> Exchange:
    """An invoke from a fresh probe carrying the A.4 chain in the body, or
    (A.14) only in ``ext``."""
    async with ctx.session() as probe:
        chain = evidence_body(_expanding_chain(ctx, probe.identity.did), target={"action": "write"})
        body = _invoke_body(ctx)
        if not in_ext:
            body["delegation"] = chain
            env = await probe.send_message(MessageType.CAP_INVOKE, body)
        else:
            env = await _send_with_ext(probe, MessageType.CAP_INVOKE, body, {"delegation": chain})
        return await probe.collect(env, frozenset({MessageType.CAP_RESULT}),
                                   interim_types=frozenset({MessageType.ACK, MessageType.PROCESSING,
                                                            MessageType.PROGRESS}))


async def _send_with_ext(probe: Probe, typ: int, body: Any, ext: dict[str, Any]) -> Any:
    env, wire = seal(probe.identity, typ=typ, to=probe.peer_did or UNKNOWN_PEER_DID, body=body,
                     now_ms=probe.now_ms(), entropy=os.urandom, ttl=probe.settings.default_ttl_ms, ext=ext,
                     profile=probe.settings.profile)
    await probe.send_bytes(probe.frame(wire))
    return env


async def v005_a4(ctx: Context) -> Outcome:
    """A.4: a chain whose second link widens ``read`` to ``write`` is refused 3004."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    return expect_error(await _delegated(ctx, in_ext=False), 3004)


async def v005_a14(ctx: Context) -> Outcome:
    """A.14: delegation evidence only in the unsigned-for-authorization ``ext``
    (no ``body.delegation``) is refused 3004, never honoured."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    return expect_error(await _delegated(ctx, in_ext=True), 3004)


async def v005_a20(ctx: Context) -> Outcome:
    """A.20: the target's 3004 (invalid evidence) and 4001 (a DELEG_REVOKE whose
    top-level delegation_id differs from the signed one, A.13) carry the code
    as ``19 0b bc`` and ``19 0f a1``."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    denied = await _delegated(ctx, in_ext=False)
    outcome = expect_error(denied, 3004)
    if outcome.status is not Status.PASS:
        return outcome
    if _CODE_3004 not in denied.terminals[0].raw:
        return failed("ERROR 3004 is not encoded as 19 0b bc")
    async with ctx.session() as probe:
        rev = revoke(probe.identity, delegation_id="delegation:def", revoked_at=probe.now_ms())
        body = dict(revoke_body(rev), delegation_id="delegation:abc")
        env = await probe.send_message(MessageType.DELEG_REVOKE, body)
        mismatch = await probe.collect(env, frozenset({MessageType.PROC_OK}))
    outcome = expect_error(mismatch, 4001)
    if outcome.status is not Status.PASS:
        return outcome
    if _CODE_4001 not in mismatch.terminals[0].raw:
        return failed("ERROR 4001 is not encoded as 19 0f a1")
    return passed("3004 → 19 0b bc, 4001 → 19 0f a1")


DELEG_VECTORS: tuple[Vector, ...] = (
    Vector("005:A.4", "delegation chain widening an action → 3004", v005_a4),
    Vector("005:A.14", "delegation evidence only in ext → 3004", v005_a14),
    Vector("005:A.20", "3004 and 4001 on the wire as 19 0b bc / 19 0f a1", v005_a20),
)

for _vector in DELEG_VECTORS:
    register(_vector)
