"""The provider side of RFC 004: CAP_INVOKE in, replies out (and CAP_QUERY,
handed to :mod:`.query_answers`, which shares the caller checks of
:mod:`.caller_checks`).

One :class:`Executor` serves the whole daemon (a retry may arrive on another
connection than the original), so every action it returns names the
connection (``conn``, an opaque key the daemon chose) it is meant for.
Sans-I/O: the daemon feeds it :class:`~ampcap.wire.receive.Inbound` messages,
completions and timer ticks; it answers with a list of actions
(:mod:`.actions`):

* :class:`Send` an :class:`~ampcap.peer.outbound.Outbound` on ``conn``;
* :class:`Execute` a validated :class:`Job` (the daemon runs the binding and
  later calls :meth:`Executor.complete`);
* :class:`Cancel` a running job (its terminal message is already sent);
* :class:`Log` something worth an operator's attention.

The RFC 004 §7.2 validation order lives in
:meth:`~ampcap.peer.invoke_validation.InvokeValidation._validate` and
nowhere else. Per-invoke state follows the §7.3 executor machine, written
as a table (:data:`TRANSITIONS`, in ``peer/invoke_state.py``). Every
accepted invoke ends with exactly one CAP_RESULT per waiting connection,
whatever happens first: completion, timeout (5003), or shutdown (5002);
every rejected one with exactly one ERROR (ruling R5). Duplicates follow ruling R8 through
:class:`~ampcap.peer.dedupe.InvokeCache`.

Capability ACL and existence (ruling R10, vector A.9). Step 4 (identity
resolution) runs in its place, but its verdict is *held back* until step 5
(the capability-scoped ACL, decided on the canonical requested name) has
passed. A caller without a grant therefore gets the same 3001 ERROR body
whether the capability or version exists or not. A name that resolves to
nothing gets 4002, except for a caller some capability rule refuses
(:meth:`Policy.restricts`): it gets 3001, since an alias such as ``echo``
names no namespace, and 3001 for a known alias against 4002 for an unknown
one would map the aliases of the namespaces it may not use.

What is cached for retries: every CAP_RESULT, and every rejection whose
code is not retryable, as the message first sent (sealed here, through the
injected ``seal``, so that a retry gets the same bytes: ruling R8), within a memory budget (``cache_bytes``; past it a
retry still never runs twice, but is told that the result is gone: 4001).
Retryable rejections (3005, 5002, 5004) are not cached: the invocation
never started, so a retry with the same message id (RFC 001 §16.3) is
validated afresh and cannot run anything twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import msgspec

from ..caps.bodies import (
    BAD_REQUEST,
    QueryPage,
    Resolved,
    clamp_pct,
    processing_body,
    progress_body,
    result_error,
    result_success,
)
from ..deleg.chain import ChainVerifier, Step
from ..display import MESSAGE_LIMIT, shown
from ..errors import AmpError, NotExecuted, ReportedFailure
from ..wire.cbor import UINT64_MAX, dumps
from ..wire.envelope import BODY_MAX_DEPTH
from ..wire.receive import Inbound
from ..wire.replay import ReplayStatus
from ..wire.registry import MessageType, error_info
from .actions import Action, Cancel, Execute, Job
from .admission import ExecutorConfig, delegation_violation
from .caller_checks import DENIED, CallerChecks
from ..caps.deprecation import DeprecationNotices
from ..wire.extensions import CANCELLED_DETAILS
from .delegated import Audit, DelegationDenied, audit_line
from .dedupe import CacheStatus, InvokeCache, InvokeKey
from .journal import INTERRUPTED, InvokeRecords, JournalRecord, JournalState, Persist
from .invoke_validation import CapabilityResolver, InvokeValidation, ParamsChecker
from .journal_side import RECALL, JournalSide, as_sent, terminal_of
from .questions import Questions, question_body
from .status_wait import FetchStatus, StatusWaits
from .limits import DeadlineQueue, InFlightLimits
from .outbound import Log, Outbound, Send, error_reply, reply_to
from .policy import ALLOW_ALL, Policy
from .invoke_state import TRANSITIONS, InvokeInput, InvokeState, advance
from .query_answers import CapabilityDirectory, QueryAnswers

__all__ = [
    "ExecutorConfig",
    "InvokeState",
    "InvokeInput",
    "TRANSITIONS",
    "advance",
    "Resolved",
    "QueryPage",
    "CapabilityResolver",
    "CapabilityDirectory",
    "ParamsChecker",
    "Job",
    "Send",
    "Execute",
    "Cancel",
    "Log",
    "Audit",
    "audit_line",
    "Action",
    "Executor",
    "delegation_violation",
    "DENIED",
    "INTERRUPTED",
]

INTERNAL_ERROR, UNAVAILABLE, TIMEOUT, OVERLOADED = 5001, 5002, 5003, 5004
_INVOKE, _QUERY, _RESULT = int(MessageType.CAP_INVOKE), int(MessageType.CAP_QUERY), int(MessageType.CAP_RESULT)

# The CAP_RESULT a cancel that wins the race ends an invoke with (R23).
_CANCELLED = AmpError(TIMEOUT, "cancelled by the caller", details=dict(CANCELLED_DETAILS))
_CANCELLED_BODY = result_error(_CANCELLED)
_CANCELLED_CBOR = dumps(_CANCELLED_BODY)




# --------------------------------------------------------------- helpers


def _operator_lines(err: AmpError) -> list[Action]:
    """The line a :class:`ReportedFailure` carries for the operator (throttled
    under its topic by whoever logs it); none for any other error."""
    return [Log(logging.ERROR, err.log_line, err.topic)] if isinstance(err, ReportedFailure) else []


class _Running(msgspec.Struct):
    job: Job
    state: InvokeState
    fingerprint: bytes
    expires_at: int


# --------------------------------------------------------------- executor


class Executor(InvokeValidation, JournalSide):
    def __init__(self, *, registry: CapabilityDirectory | None, resolver: CapabilityResolver,
                 params: ParamsChecker, seal: Callable[[Outbound, int], Outbound],
                 policy: Policy = ALLOW_ALL, limits: InFlightLimits | None = None,
                 config: ExecutorConfig = ExecutorConfig(), delegation: ChainVerifier | None = None,
                 journal: bool = False, records: InvokeRecords | None = None, fetch_statuses: bool = False,
                 deprecations: DeprecationNotices | None = None,
                 listing: Callable[[Hashable, str], bool] | None = None) -> None:
        """``seal`` signs a terminal reply the way its connection would
        (:class:`~ampcap.peer.sealing.Sealer`): the result carries its wire
        bytes, kept for retries (R8). ``journal``: emit :class:`Persist`
        actions carrying those bytes (ruling R19; see peer/journal.py).
        ``records``: the journal, asked when the cache cannot place an invoke
        (the store is the record; memory only caches it).
        ``fetch_statuses``: a revocation publisher is configured, so a delegated invoke refused for a
        stale status waits for the edge to ask it (:class:`~ampcap.peer.status_wait.FetchStatus`, R20)."""
        self.journal = journal
        self.records = records
        # Ids up to this timestamp may belong to invokes seen before the start
        # (set by preload), until the last of those messages expires: only
        # they, and what the cache evicted, are looked up in the journal.
        self._recall_until: int | None = None
        self._recall_stop = 0
        self._idempotent: Callable[[str], bool] = lambda capability_id: False
        self._waits = StatusWaits() if fetch_statuses else None
        self._registry = registry
        self.delegation = delegation  # None: every body.delegation is refused 3004
        self._resolver = resolver
        self._params = params
        self._seal = seal
        self._policy = policy
        self._callers = CallerChecks(policy)
        self._queries = QueryAnswers(registry, resolver.canonical_name, self._callers, deprecations, listing)  # R22
        # R23: the deprecated versions a CAP_RESULT says so for (None: none are)
        self._deprecations = deprecations
        self._limits = limits if limits is not None else InFlightLimits()
        self.config = config
        self._cache = InvokeCache(max_entries=config.cache_entries, max_bytes=config.cache_bytes,
                                  max_waiters=config.max_waiters)
        self._running: dict[InvokeKey, _Running] = {}
        self._questions = Questions()  # INPUT_REQUIRED id -> the invoke that asks (RFC 006 §6.3)
        self._deadlines: DeadlineQueue[InvokeKey] = DeadlineQueue()
        self._closing = False

    # ------------------------------------------------------------ inbound

    def handle(self, inbound: Inbound, conn: Hashable, now_ms: int) -> list[Action]:
        """React to a received message. Only CAP_INVOKE and CAP_QUERY are
        the executor's; anything else gives ``[]``."""
        typ = inbound.envelope.typ
        if typ == _INVOKE:
            return self._on_invoke(inbound, conn, now_ms)
        if typ == _QUERY:
            return self._queries.answer(inbound, conn, now_ms, closing=self._closing)
        return []

    def _on_invoke(self, inbound: Inbound, conn: Hashable, now_ms: int, *, resumed: bool = False) -> list[Action]:
        """``resumed``: handled again after waiting for revocation statuses
        (its ACK went out and its rate was counted the first time)."""
        env = inbound.envelope
        key = InvokeKey(env.sender, env.id)
        seen = self._cache.lookup(key, inbound.fingerprint, now_ms)
        closing: list[Action] = []
        if self.records is not None and ((self._recall_until is not None and self._may_predate(key, now_ms))
                                          if seen.status is CacheStatus.NEW else seen.status in RECALL):
            try:
                seen, closing = self._recall(key, inbound.fingerprint, seen, now_ms)
            except AmpError as unplaced:  # the store cannot be read, or the invoke runs elsewhere: retry later
                return [Send(conn, error_reply(env, unplaced, encrypt=inbound.decrypted))]
        if seen.status is CacheStatus.CONFLICT or (seen.status is CacheStatus.NEW
                                                   and inbound.replay is ReplayStatus.CONFLICT):
            # R8: not a retry. Reveal nothing about the cached invocation. (The
            # replay cache knows the id too when its first use was refused
            # with a retryable code, which the invoke cache does not keep.)
            err = AmpError(BAD_REQUEST, "message id reused with different content", path="id")
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted)),
                    Log(logging.WARNING, f"id reuse by {shown(env.sender)}", "id reuse")]
        if seen.status is CacheStatus.DONE:
            assert seen.terminal is not None
            return [*closing, Send(conn, as_sent(seen.terminal))]
        if seen.status is CacheStatus.EXPIRED:
            # R8: never re-signed as a new message (a second terminal reply to
            # a client that deduplicates by id), and the first one is dead.
            err = AmpError(BAD_REQUEST, "this invocation already completed; its result has expired", path="id")
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted))]
        if seen.status is CacheStatus.FORGOTTEN:
            # R8: it ran once and must not run again, but its reply was dropped
            # to keep the cache within its memory budget.
            err = AmpError(BAD_REQUEST, "this invocation already completed; its result is no longer available",
                           path="id")
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted))]
        if seen.status is CacheStatus.RUNNING:
            if self._cache.add_waiter(key, conn):
                return [Log(logging.DEBUG, "retry of a running invoke waits for its outcome")]
            # Too many connections already wait for this one. Still one
            # answer per invoke message (R5): a retryable refusal, after
            # which a retry finds the cached result.
            err = AmpError(OVERLOADED, "too many retries of this invocation are waiting; retry later")
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted))]
        if seen.status is CacheStatus.UNCERTAIN:
            # Under load the cache evicted invokes of this sender at least this
            # old before they expired: this may retry one that already ran (R8).
            err = AmpError(BAD_REQUEST, "this daemon can no longer tell whether this invoke already ran (under load "
                                        "it forgot earlier invokes of this sender); send it with a new message id",
                           path="id")
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted))]

        actions: list[Action] = []
        if self.config.ack_on_receipt and not resumed:
            actions.append(Send(conn, reply_to(env, int(MessageType.ACK),
                                               {"ack_source": "recipient", "received_at": now_ms},
                                               encrypt=inbound.decrypted)))
        state = advance(InvokeState.RECEIVED, InvokeInput.VALIDATE)
        try:
            if self._closing:
                raise AmpError(UNAVAILABLE, "daemon is shutting down")
            request, resolved, decision = self._validate(env, inbound.body, conn, now_ms, count_rate=not resumed)
        except DelegationDenied as denied:
            if self._waits is not None and not resumed and _stale_status(denied):
                # R20: ask the publisher before deciding (peer/status_wait.py).
                parked = self._waits.park(inbound, conn, [(c.delegator, c.delegation_id)
                                                          for c in denied.decision.chain])
                if parked is not None:
                    return actions + parked
            advance(state, InvokeInput.REJECT)
            return actions + [Audit(denied.decision)] + self._reject(inbound, conn, denied.error, now_ms)
        except AmpError as err:
            advance(state, InvokeInput.REJECT)
            return actions + _operator_lines(err) + self._reject(inbound, conn, err, now_ms)
        except Exception as exc:  # a collaborator's bug must not take the daemon down
            advance(state, InvokeInput.REJECT)
            actions.append(Log(logging.ERROR, f"validation crashed: {shown(repr(exc))}", "validation crash"))
            return actions + self._reject(inbound, conn, AmpError(INTERNAL_ERROR, "internal error"), now_ms)

        state = advance(state, InvokeInput.ACCEPT)
        timeout = request.timeout_ms if request.timeout_ms is not None else self.config.default_timeout_ms
        job = Job(key=key, conn=conn, capability_id=str(resolved.descriptor.id), descriptor=resolved.descriptor,
                  params=resolved.params, binding=resolved.binding,
                  deadline_ms=now_ms + min(timeout, self.config.max_timeout_ms),
                  thread_id=env.thread_id, session=request.session, adapt_result=resolved.adapt_result,
                  encrypted=inbound.decrypted,
                  delegator=decision.delegator if decision is not None else None,
                  delegation_links=tuple(c.key for c in decision.chain) if decision is not None else ())
        if decision is not None:
            actions.append(Audit(decision))
        self._limits.acquire(conn)  # room was checked in step 2, nothing ran since
        expires_at = env.ts + env.ttl
        self._cache.start(key, inbound.fingerprint, conn, expires_at=expires_at)
        self._running[key] = _Running(job, state, inbound.fingerprint, expires_at)
        self._deadlines.set(key, job.deadline_ms)
        if self.journal:  # committed before the job may have any effect
            actions.append(Persist((JournalRecord(key=key, fingerprint=inbound.fingerprint,
                                                  capability_id=job.capability_id, state=JournalState.RUNNING,
                                                  expires_at=max(expires_at, job.deadline_ms),
                                                  encrypted=job.encrypted, thread_id=job.thread_id,
                                                  session=_session_of(job)),)))
        actions.append(Execute(job=job))
        return actions

    def _reject(self, inbound: Inbound, conn: Hashable, err: AmpError, now_ms: int) -> list[Action]:
        env = inbound.envelope
        out = error_reply(env, err, encrypt=inbound.decrypted)
        # The message may quote the peer's values (a version, a name): a
        # rejection is not throttled, so it must not be as long as they are.
        note = Log(logging.INFO, f"invoke rejected id={env.id.hex()} from={shown(env.sender)} code={err.code} "
                                 f"{error_info(err.code).name}: {shown(err.message, MESSAGE_LIMIT)}")
        if not error_info(err.code).retry:
            # Sealed once here: the cache keeps these bytes, and a retry gets
            # exactly the message sent now (R8).
            out = self._seal(out, now_ms)
            key, kept = InvokeKey(env.sender, env.id), terminal_of(out)
            self._cache.remember(key, inbound.fingerprint, kept, expires_at=env.ts + env.ttl, now_ms=now_ms)
            if self.journal:  # the store is the record: a retry after memory forgot gets these bytes
                # The capability field names what was asked (the rejection resolved nothing).
                record = JournalRecord(key=key, fingerprint=inbound.fingerprint, capability_id="",
                                       state=JournalState.DONE, expires_at=env.ts + env.ttl, terminal=kept,
                                       encrypted=inbound.decrypted, thread_id=env.thread_id)
                return [Persist((record,)), Send(conn, out), note]
        return [Send(conn, out), note]

    # ----------------------------------------------------------- executing

    def complete(self, key: InvokeKey, *, result: Any = None, error: AmpError | None = None,
                 now_ms: int) -> list[Action]:
        """The job's outcome. Exactly one CAP_RESULT per waiting connection;
        a completion for a job that already ended (timed out, shut down) is
        dropped."""
        if key not in self._running:
            return [Log(logging.INFO, f"late completion of {key.msg_id.hex()} dropped")]
        job = self._running[key].job
        session = job.session
        if error is not None and not (type(error.code) is int and 0 <= error.code <= UINT64_MAX):
            # A binding's AmpError(-1) would make a CAP_RESULT the caller must refuse.
            error = AmpError(INTERNAL_ERROR, "capability failed (it raised an invalid error code)")
        logs: list[Action] = []
        if error is None and job.adapt_result is not None:
            try:
                result = job.adapt_result(result)
            except AmpError as exc:
                error = exc
                logs = _operator_lines(exc)
            except Exception:  # the adapter's bug is the caller's 5001, like a binding's
                error = AmpError(INTERNAL_ERROR, "capability bridge failed")
        if isinstance(error, NotExecuted):  # refused before executing: AMP ERROR, as a step-7 rejection
            return self._finish(key, error.to_body(), now_ms, typ=int(MessageType.ERROR))
        if error is not None:
            body = result_error(error, session)
        else:
            body = result_success(result, session)
        try:
            # Fail here, as 5001, rather than in the connection's seal, or in
            # the caller's decoder when the result nests deeper than it takes.
            encoded: bytes | None = dumps(body, max_depth=BODY_MAX_DEPTH)
        except Exception:
            body = result_error(AmpError(INTERNAL_ERROR, "result is not encodable as CBOR"), session)
            encoded = None
        return logs + self._finish(key, body, now_ms, encoded)

    def progress(self, key: InvokeKey, pct: float | int, text: str | None = None, *, now_ms: int) -> list[Action]:
        """PROGRESS (RFC 006 §6.2) to everyone waiting; ``pct`` clamped to 0..100."""
        value = clamp_pct(pct)
        if value is None:
            return []
        return self._provisional(key, int(MessageType.PROGRESS), progress_body(value, text))

    def processing(self, key: InvokeKey, text: str | None = None, *, eta_ms: int | None = None,
                   now_ms: int) -> list[Action]:
        """PROCESSING (RFC 006 §6.1) to everyone waiting."""
        return self._provisional(key, int(MessageType.PROCESSING), processing_body(text, eta_ms))

    def _provisional(self, key: InvokeKey, typ: int, body: dict[str, Any]) -> list[Action]:
        run = self._running.get(key)
        if run is None:
            return []  # already ended: nothing may follow the terminal message
        run.state = advance(run.state, InvokeInput.PROVISIONAL)
        session = run.job.session
        if session is not None and session.get("session_scope") is True:
            body["session"] = dict(session)  # RFC 006 §4.4: provisional replies carry the signed context
        out = self._reply(run.job, typ, body)
        return [Send(conn, out) for conn in self._cache.waiters(key)]

    # ----------------------------------------------------- INPUT_REQUIRED

    def input_required(self, key: InvokeKey, prompt: str, options: list[str] | None, timeout_ms: int | None,
                       *, now_ms: int) -> tuple[bytes | None, list[Action]]:
        """RFC 006 §6.3: the job asks its caller (peer/questions.py). Returns
        the question's id (the INPUT_REQUIRED message id, which the answer's
        ``reply_to`` names; None when the invoke has already ended) and the
        messages to send."""
        run = self._running.get(key)
        if run is None:
            return None, []
        body = question_body(prompt, options, timeout_ms)
        run.state = advance(run.state, InvokeInput.PROVISIONAL)
        session = run.job.session
        if session is not None and session.get("session_scope") is True:
            body["session"] = dict(session)
        # Sealed here (like a terminal reply) so that its id, which the answer
        # must name, is known before it is sent.
        out = self._seal(self._reply(run.job, int(MessageType.INPUT_REQUIRED), body), now_ms)
        qid = out.msg_id
        assert qid is not None
        self._questions.ask(qid, key)
        return qid, [Send(conn, out) for conn in self._cache.waiters(key)]

    def asking(self, question_id: bytes | None) -> bool:
        return question_id is not None and question_id in self._questions

    def on_input(self, inbound: Inbound) -> tuple[bytes, str | None, str | None]:
        """The caller's answer to a question: ``(question id, answer, None)``
        or ``(question id, None, reason declined)``; AmpError 3001, 4001, 1001."""
        return self._questions.answer(inbound.envelope.reply_to, inbound.envelope.sender, inbound.body)

    def forget_question(self, question_id: bytes) -> None:
        self._questions.forget(question_id)

    def get_timer(self) -> int | None:
        """The earliest job deadline, for the daemon to arm."""
        return self._deadlines.next_deadline()

    def handle_timer(self, now_ms: int) -> list[Action]:
        """Jobs past their deadline end with CAP_RESULT 5003 and are cancelled."""
        actions: list[Action] = []
        for key in self._deadlines.pop_due(now_ms):
            body = result_error(AmpError(TIMEOUT, "invocation timed out"), self._running[key].job.session)
            actions += self._finish(key, body, now_ms)
            actions.append(Cancel(key=key, code=TIMEOUT))
        return actions

    def cancel_requested(self, sender: str, invoke_id: bytes, now_ms: int) -> list[Action]:
        """ampcap's cancel (R23, wire/extensions.py): ``sender`` asks to stop
        its invoke ``invoke_id``. While it runs, it ends now with CAP_RESULT
        5003 ``details = {"cancelled": true}`` (sealed and journaled like any
        terminal reply, so a resend gets these bytes) and a :class:`Cancel`
        for its task; a completion that comes after is dropped. Once it has
        ended (the result won the race), or when it is unknown, nothing is
        sent: the invoke has, or will have, its one terminal reply. Only its
        own sender can cancel an invoke (the key holds the sender)."""
        key = InvokeKey(sender, invoke_id)
        run = self._running.get(key)
        if run is None:
            return []
        if run.job.session is None:  # the same body every time: encoded once
            body, encoded = _CANCELLED_BODY, _CANCELLED_CBOR
        else:
            body, encoded = result_error(_CANCELLED, run.job.session), None
        return [*self._finish(key, body, now_ms, encoded), Cancel(key=key, code=TIMEOUT)]

    def shutdown(self, now_ms: int) -> list[Action]:
        """End every running job now: CAP_RESULT ``config.shutdown_code``
        (5002 UNAVAILABLE by default: the service went away, the request did
        not run out of time, and 5002 tells the caller a retry elsewhere or
        later may succeed) and a Cancel each. New work is refused with 5002."""
        self._closing = True
        code = self.config.shutdown_code
        actions: list[Action] = []
        for key in list(self._running):
            body = result_error(AmpError(code, "daemon is shutting down"), self._running[key].job.session)
            actions += self._finish(key, body, now_ms)
            actions.append(Cancel(key=key, code=code))
        return actions

    def status_settled(self, key: tuple[str, str], now_ms: int) -> list[Action]:
        """The edge asked the publisher about ``key`` (a
        :class:`~ampcap.peer.status_wait.FetchStatus` key), answered or not:
        the invokes that waited only for it are decided now, on what the
        status cache holds (still nothing fresh: 5002)."""
        if self._waits is None:
            return []
        actions: list[Action] = []
        for entry in self._waits.settled(key):
            actions += self._on_invoke(entry.inbound, entry.conn, now_ms, resumed=True)
        return actions

    def connection_closed(self, conn: Hashable) -> None:
        """Stop addressing ``conn``. Its jobs keep running: a retry on another
        connection still gets their outcome."""
        self._cache.drop_waiter(conn)

    def session_of(self, sender: str, msg_id: bytes) -> Mapping[str, Any] | None:
        """The signed session context of ``sender``'s running invoke ``msg_id``
        when it is session-scoped (RFC 006 §4.4), else None."""
        run = self._running.get(InvokeKey(sender, msg_id))
        session = run.job.session if run is not None else None
        return session if session is not None and session.get("session_scope") is True else None

    @property
    def running(self) -> int:
        return len(self._running)

    def owes(self, conn: Hashable) -> bool:
        """Is some running job's outcome still to be sent on ``conn``? O(running)."""
        if self._waits is not None and self._waits and self._waits.holds(conn):
            return True  # an invoke waiting for a revocation status
        return any(conn in self._cache.waiters(key) for key in self._running)

    def state_of(self, key: InvokeKey) -> InvokeState | None:
        run = self._running.get(key)
        return run.state if run is not None else None

    def _finish(self, key: InvokeKey, body: dict[str, Any], now_ms: int,
                encoded: bytes | None = None, typ: int = _RESULT) -> list[Action]:
        run = self._running.pop(key)
        run.state = advance(run.state, InvokeInput.FINISH)
        self._deadlines.discard(key)
        self._limits.release(run.job.conn)
        # Sealed once, here: every waiter, and every later retry, gets these bytes (R8).
        out = self._reply(run.job, typ, body, encoded)
        if self._deprecations is not None and run.job.capability_id in self._deprecations.by_id:
            ext = self._deprecations.ext_for((run.job.capability_id,), run.job.conn, key.msg_id)
            if ext is not None:
                out = msgspec.structs.replace(out, ext=ext)
        terminal = self._seal(out, now_ms)
        kept = terminal_of(terminal)
        sends: list[Action] = [Send(conn, terminal) for conn in self._cache.finish(key, kept, now_ms)]
        if self.journal:  # committed before the terminal message leaves
            record = JournalRecord(key=key, fingerprint=run.fingerprint, capability_id=run.job.capability_id,
                                   state=JournalState.DONE, expires_at=max(run.expires_at, now_ms),
                                   terminal=kept, encrypted=run.job.encrypted, thread_id=run.job.thread_id,
                                   session=_session_of(run.job))
            return [Persist((record,)), *sends]
        return sends

    @staticmethod
    def _reply(job: Job, typ: int, body: dict[str, Any], encoded: bytes | None = None) -> Outbound:
        return Outbound(typ=typ, body=body, reply_to=job.key.msg_id, thread_id=job.thread_id, to=job.key.sender,
                        body_cbor=encoded, encrypt=job.encrypted)


def _stale_status(denied: DelegationDenied) -> bool:
    """Was the invoke refused only because a revocation status was stale or missing (5002 at that step)?"""
    decision = denied.decision
    return (denied.error.code == UNAVAILABLE and decision.step is Step.REVOCATION
            and decision.error is not None and decision.error.code == UNAVAILABLE)


def _session_of(job: Job) -> dict[str, Any] | None:
    """What the journal keeps of the invoke's ``body.session`` (for the 5002 after a restart)."""
    return dict(job.session) if job.session is not None else None
