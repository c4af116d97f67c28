"""RFC 006 vectors ``ampcap interop`` drives against a target (006:A.2,
A.15, A.17), in the style of :mod:`.vectors`: one coroutine per vector, a
fresh connection each, judged on the exact AMP code, ``reply_to``
correlation and exactly one terminal reply.

* 006:A.2: a session ``init`` whose body ``session_id`` differs from the
  envelope ``thread_id`` (coupled mode) → ERROR 4001.
* 006:A.15: an independent-mode session with a session-scoped invoke in
  flight (``org.ampcap.demo.sleep``, or any capability that takes a while);
  a PROGRESS naming it by ``reply_to`` and ``thread_id`` but without the
  signed ``body.session`` → ERROR 4001 (no fallback to thread/reply_to).
* 006:A.17: the codes of a malformed session context (1001) and of a
  session binding mismatch (4001) on the wire, byte for byte
  (``19 03 e9`` and ``19 0f a1`` after the ``"code"`` key).

The suite requires these vectors, so a target that does not speak RFC 006
fails them: when it answers the session-control REQUEST with 1005
(unsupported type), or not at all, the note says so (:data:`NO_SESSIONS`);
any other answer is named as it came. Under raw framing (the Rust example) they are skipped:
that profile has no session support to test.

:data:`SESSION_VECTORS` are registered with the suite (:mod:`.suite`) on
import, so they run in ``ampcap interop URL`` and ``--self``.
"""

from __future__ import annotations

import os
from typing import Any

from ..session.context import session_context
from ..session.control import init_body
from ..wire.envelope import Envelope, seal
from ..wire.registry import MessageType
from .judge import Outcome, expect_error, failed, passed, single_terminal, skipped
from .probe import Exchange, Probe
from .suite import register
from .vectors import Context, Vector

__all__ = ["SESSION_VECTORS", "session_vector_ids", "NO_SESSIONS"]

NO_SESSIONS = "the target does not implement RFC 006 sessions"

_CODE_1001 = bytes.fromhex("64636f64651903e9")  # "code": 1001
_CODE_4001 = bytes.fromhex("64636f6465190fa1")  # "code": 4001
_SLOW = "org.ampcap.demo.sleep:1.0.0"
_REQUEST, _RESPONSE = int(MessageType.REQUEST), int(MessageType.RESPONSE)
_TERMINAL = frozenset({_RESPONSE})


async def _send(probe: Probe, typ: int, body: Any, *, thread_id: bytes | None = None,
                reply_to: bytes | None = None) -> Envelope:
    """Like ``probe.send_message``, with a ``thread_id`` (the probe's own seal has none)."""
    assert probe.peer_did is not None
    env, wire = seal(probe.identity, typ=typ, to=probe.peer_did, body=body, now_ms=probe.now_ms(),
                     entropy=os.urandom, ttl=probe.settings.default_ttl_ms, reply_to=reply_to, thread_id=thread_id,
                     profile=probe.settings.profile)
    await probe.send_bytes(probe.frame(wire))
    return env


def _no_sessions(ex: Exchange) -> Outcome | None:
    """A target without RFC 006 says 1005 to a session-control REQUEST, or
    nothing at all: fail, saying so (the suite requires these vectors)."""
    if not ex.terminals:
        return failed(f"{NO_SESSIONS}: no answer to a session-control REQUEST (init): {ex.summary()}")
    reply = single_terminal(ex)
    if not isinstance(reply, Outcome) and reply.error_code == 1005:
        return failed(f"{NO_SESSIONS}: it answered a session-control REQUEST (init) with ERROR 1005 "
                      "(unsupported type)")
    return None


def _raw_skip(ctx: Context) -> Outcome | None:
    return skipped("RFC 006 needs session support; the raw-framing profile (Rust example) has none") \
        if ctx.raw else None


async def v006_a2(ctx: Context) -> Outcome:
    """A.2: init with body session_id ≠ envelope thread_id (coupled) → 4001."""
    if (skip := _raw_skip(ctx)) is not None:
        return skip
    async with ctx.session() as probe:
        sid = os.urandom(16)
        body = init_body(sid, [probe.identity.did], 60_000)
        env = await _send(probe, _REQUEST, body, thread_id=os.urandom(16))
        answer = await probe.collect(env, _TERMINAL)
        return _no_sessions(answer) or expect_error(answer, 4001)


async def _open_independent(probe: Probe) -> bytes | Outcome:
    sid = os.urandom(16)
    env = await _send(probe, _REQUEST, {**init_body(sid, [probe.identity.did], 60_000), "thread_mode": "independent"})
    answer = await probe.collect(env, _TERMINAL)
    if (unsupported := _no_sessions(answer)) is not None:
        return unsupported
    reply = single_terminal(answer)
    if isinstance(reply, Outcome):
        return reply
    body = reply.envelope.body if reply.envelope is not None else None
    if reply.typ != _RESPONSE or type(body) is not dict or body.get("op") != "accept":
        return failed(f"the target did not accept an independent session: {reply.describe()}")
    if body.get("thread_mode") != "independent":
        return skipped("the target does not offer the independent thread mode (optional profile)")
    return sid


async def v006_a15(ctx: Context) -> Outcome:
    """A.15: independent session, a session-scoped invoke in flight, then a
    PROGRESS naming it without body.session → 4001."""
    if (skip := _raw_skip(ctx)) is not None:
        return skip
    async with ctx.session() as probe:
        opened = await _open_independent(probe)
        if isinstance(opened, Outcome):
            return opened
        thread = os.urandom(16)
        invoke = await _send(probe, int(MessageType.CAP_INVOKE),
                             {"id": _SLOW, "params": {"ms": 3_000}, "session": session_context(opened)},
                             thread_id=thread)
        early = await probe.collect(invoke, frozenset({int(MessageType.CAP_RESULT)}), timeout_s=0.3, settle_s=0.0)
        if early.terminals:
            return skipped(f"the target did not keep {_SLOW} in flight: {early.summary()}")
        bare = await _send(probe, int(MessageType.PROGRESS), {"progress_pct": 10}, thread_id=thread,
                           reply_to=invoke.id)
        return expect_error(await probe.collect(bare, frozenset()), 4001)


async def v006_a17(ctx: Context) -> Outcome:
    """A.17: "code": 1001 is ``19 03 e9`` and "code": 4001 ``19 0f a1`` in the signed bytes."""
    if (skip := _raw_skip(ctx)) is not None:
        return skip
    async with ctx.session() as probe:
        malformed = await _send(probe, int(MessageType.CAP_INVOKE),
                                {"id": f"{ctx.subject.name}:1.0.0", "params": {}, "session": "not a map"})
        first = single_terminal(await probe.collect(malformed, frozenset({int(MessageType.CAP_RESULT)})))
        if isinstance(first, Outcome):
            return first
        if first.error_code != 1001 or _CODE_1001 not in first.raw:
            return failed(f"malformed session context: expected ERROR 1001 (19 03 e9), got {first.describe()}")
        sid = os.urandom(16)
        mismatch = await _send(probe, _REQUEST, init_body(sid, [probe.identity.did], 60_000), thread_id=os.urandom(16))
        answer = await probe.collect(mismatch, _TERMINAL)
        if (unsupported := _no_sessions(answer)) is not None:
            return unsupported
        second = single_terminal(answer)
        if isinstance(second, Outcome):
            return second
        if second.error_code != 4001 or _CODE_4001 not in second.raw:
            return failed(f"session binding mismatch: expected ERROR 4001 (19 0f a1), got {second.describe()}")
        return passed("1001 and 4001 encoded as 19 03 e9 and 19 0f a1")


SESSION_VECTORS: tuple[Vector, ...] = (
    Vector("006:A.2", "session_id ≠ thread_id at init → 4001", v006_a2),
    Vector("006:A.15", "independent PROGRESS without body.session → 4001", v006_a15),
    Vector("006:A.17", "1001/4001 byte encodings", v006_a17),
)


for _vector in SESSION_VECTORS:
    register(_vector)


def session_vector_ids() -> list[str]:
    return [v.id for v in SESSION_VECTORS]
