"""The requester side of RFC 004: CAP_INVOKE / CAP_QUERY out, one outcome back.

One :class:`Invoker` per :class:`~ampcap.net.api.peer.Peer`. Sans-I/O:
:meth:`Invoker.start_invoke` / :meth:`start_query` return the
:class:`~ampcap.peer.outbound.Outbound` to send; :meth:`on_reply` takes
received messages; :meth:`get_timer` / :meth:`handle_timer` run deadlines
and retry back-off. Every call ends with exactly one outcome event
(:class:`InvokeSucceeded`, :class:`InvokeFailed`, :class:`InvokeTimedOut`,
:class:`QueryAnswered` or :class:`QueryFailed`); anything after that is
dropped.

Message ids. The invoker makes them itself, from injected entropy, and puts
them (with ``ts_ms``) in the Outbound. So the call is keyed the moment it
is created, a reply can never race a "which id did it get" callback, and the
call's handle *is* its message id: stable across retries, which reuse it.

Correlation (RFC 004 §9, A.12, A.13). A reply is applied only when its
``reply_to`` names a pending call of the right kind (CAP_RESULT answers an
invoke, CAP_DECLARE a query; ERROR/ACK/PROCESSING/PROGRESS either) and, when
the call was addressed to a known DID, comes from that DID. A CAP_RESULT or
CAP_DECLARE that fails this is dropped, logged and answered with ERROR 4001;
a reply to a call that already ended (say, after a local timeout) is only
dropped and logged, since it is late rather than wrong.

Retries (RFC 001 §16.3), only when the caller passes a :class:`RetryPolicy`:
after a local timeout, or an ERROR whose ``retry`` flag is set (a
rejection before execution: 5004, 3005, 5002…), wait
``min(base · 2^(n-1), max) · jitter`` with ``jitter``
in [0.5, 1.0], then send the *same* message again: same id, same ``ts``,
same ttl, same body, so the provider's idempotency check (ruling R8)
recognises it and never runs it twice. No retry is scheduled that would
leave after the message expires (``ts + ttl``). A CAP_RESULT error is never
retried, whatever its code: the invocation ran, and an R8 provider answers
the same id with the same cached CAP_RESULT.
"""

from __future__ import annotations

import enum
import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..caps.descriptor import Descriptor
from ..errors import AmpError, LocalProtocolError
from ..wire.cbor import plain_integers
from ..wire.envelope import Entropy, Envelope, new_message_id
from ..wire.receive import Inbound
from ..wire.registry import MessageType, error_info
from .limits import DeadlineQueue
from .outbound import Log, Outbound, Send, error_reply
from ..caps.bodies import clamp_pct
from .state import TableEnum

__all__ = [
    "RetryPolicy",
    "InvokerConfig",
    "CallState",
    "CallInput",
    "CALL_TRANSITIONS",
    "InvokeProgress",
    "InvokeRetrying",
    "InvokeSucceeded",
    "InvokeFailed",
    "InvokeTimedOut",
    "QueryAnswered",
    "QueryFailed",
    "Replied",
    "InvokerEvent",
    "Target",
    "invoke_body",
    "Invoker",
]

BAD_REQUEST, TIMEOUT = 4001, 5003
_T = MessageType
_PROVISIONAL = {int(_T.ACK): "ack", int(_T.PROCESSING): "processing", int(_T.PROGRESS): "progress",
                int(_T.INPUT_REQUIRED): "input_required"}
# PROC_OK and RESPONSE end a plain request (start_request: the DELEG_* messages).
_REQUEST_ANSWERS = frozenset({int(_T.PROC_OK), int(_T.RESPONSE)})
_FINAL_TYPES = frozenset({int(_T.ERROR), int(_T.CAP_RESULT), int(_T.CAP_DECLARE)}) | _REQUEST_ANSWERS
_REPLY_TYPES = _FINAL_TYPES | frozenset(_PROVISIONAL)

# A call handle is the call's message id (16 bytes).
Handle = bytes


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 001 §16.3 defaults: base 1 s, doubling, at most 60 s, 5 attempts in all."""

    max_attempts: int = 5
    base_ms: int = 1_000
    max_backoff_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_ms < 1 or self.max_backoff_ms < self.base_ms:
            raise ValueError("need max_attempts >= 1 and 1 <= base_ms <= max_backoff_ms")

    def backoff_ms(self, retry: int, jitter: float) -> int:
        """Wait before retry number ``retry`` (1 = the second attempt)."""
        base_wait = min(self.base_ms * (1 << min(retry - 1, 62)), self.max_backoff_ms)
        return int(base_wait * min(1.0, max(0.5, jitter)))


class InvokerConfig(msgspec.Struct, frozen=True, kw_only=True):
    default_timeout_ms: int = 60_000  # RFC 001 §16.4 CAP_INVOKE (simple)
    query_timeout_ms: int = 30_000  # RFC 001 §16.4 CAP_QUERY
    message_ttl_ms: int = 3_600_000  # bounds how long retries may go on
    max_pending: int = 10_000
    remember_finished: int = 4_096  # ids of ended calls, to tell late replies from wrong ones


class CallState(TableEnum):
    SENT = "sent"  # waiting for a reply (or the local deadline)
    BACKOFF = "backoff"  # waiting to resend the same message
    DONE = "done"


class CallInput(TableEnum):
    PROVISIONAL = "provisional"  # ACK / PROCESSING / PROGRESS
    FINAL = "final"  # the one outcome (reply, local timeout, give-up)
    RETRY = "retry"  # retryable failure with attempts left
    RESEND = "resend"  # back-off elapsed


# RFC 004 §7.3, invoker side, plus the §16.3 retry loop. A reply in BACKOFF
# is still valid: every attempt is the same message, so it answers them all.
CALL_TRANSITIONS: Mapping[tuple[CallState, CallInput], CallState] = {
    (CallState.SENT, CallInput.PROVISIONAL): CallState.SENT,
    (CallState.SENT, CallInput.FINAL): CallState.DONE,
    (CallState.SENT, CallInput.RETRY): CallState.BACKOFF,
    (CallState.BACKOFF, CallInput.PROVISIONAL): CallState.BACKOFF,
    (CallState.BACKOFF, CallInput.FINAL): CallState.DONE,
    (CallState.BACKOFF, CallInput.RESEND): CallState.SENT,
}


def _advance(state: CallState, event: CallInput) -> CallState:
    try:
        return CALL_TRANSITIONS[(state, event)]
    except KeyError:
        raise LocalProtocolError(5001, f"call cannot {event.value} in state {state.value}") from None


# ----------------------------------------------------------------- events


@dataclass(frozen=True, slots=True, kw_only=True)
class InvokeProgress:
    handle: Handle
    kind: str  # "ack", "processing", "progress" or "input_required"
    pct: int | None = None
    text: str | None = None
    # input_required (RFC 006 §6.3): the question, and what the answer must name
    question: InputQuestion | None = None


class InputQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """An INPUT_REQUIRED the provider sent mid-call."""

    message_id: bytes  # the answer's reply_to
    sender: str
    thread_id: bytes | None
    prompt: str
    options: tuple[str, ...] | None
    timeout_ms: int | None
    session: Mapping[str, Any] | None  # the signed context, echoed in the answer


class InvokeRetrying(msgspec.Struct, frozen=True, kw_only=True):
    """Not an outcome: the call will be resent at ``at_ms``."""

    handle: Handle
    attempt: int  # the attempt about to be made (2 = first retry)
    at_ms: int
    reason: AmpError


class InvokeSucceeded(msgspec.Struct, frozen=True, kw_only=True):
    handle: Handle
    result: Any
    capability_id: str | None  # the id asked for (by-id form); None for by-name
    attempts: int


class InvokeFailed(msgspec.Struct, frozen=True, kw_only=True):
    handle: Handle
    error: AmpError  # from the CAP_RESULT error or the ERROR body
    attempts: int


class InvokeTimedOut(msgspec.Struct, frozen=True, kw_only=True):
    handle: Handle
    attempts: int


class QueryAnswered(msgspec.Struct, frozen=True, kw_only=True):
    handle: Handle
    descriptors: tuple[Descriptor, ...]
    next_cursor: str | None
    notices: tuple[Any, ...] = ()  # R23: the provider's signed deprecation notices (caps/deprecation.py)


class QueryFailed(msgspec.Struct, frozen=True, kw_only=True):
    handle: Handle
    error: AmpError


class Replied(msgspec.Struct, frozen=True, kw_only=True):
    """A request's answer (PROC_OK or RESPONSE): its type and body. Its
    failures are :class:`QueryFailed`, like a query's."""

    handle: Handle
    typ: int
    body: Any


InvokerEvent = (InvokeProgress | InvokeRetrying | InvokeSucceeded | InvokeFailed | InvokeTimedOut
                | QueryAnswered | QueryFailed | Replied)


# ---------------------------------------------------------------- bodies

# A capability id ("name:version"), or (name, version | range | negotiate hints).
Target = str | tuple[str, str | Mapping[str, Any]]


def invoke_body(target: Target, params: Any, timeout_ms: int | None = None,
                delegation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A CAP_INVOKE body. ``(name, "1.2.0")`` pins a version; a string with
    comparators (``">=1.0.0 <2.0.0"``) becomes ``negotiate.range``; a map is
    sent as the ``negotiate`` hints unchanged. ``delegation`` is RFC 005
    evidence (``{"chain": [...]}``), carried in the signed body."""
    # Keys are inserted in RFC 8949 order (shorter first, then bytewise), so
    # the deterministic encoder finds nothing to sort on the hot path.
    body: dict[str, Any] = {}
    if isinstance(target, str):
        body["id"] = target
        body["params"] = params
    else:
        name, spec = target
        body["params"] = params
        if isinstance(spec, Mapping):
            body["negotiate"] = dict(spec)
        elif any(ch in spec for ch in "<>= "):
            body["negotiate"] = {"range": spec}
        else:
            body["version"] = spec
        body["capability"] = name  # "params" (6), "version" (7), "negotiate" (9) come before it (10)
    if delegation is not None:
        body["delegation"] = dict(delegation)  # "capability" < "delegation" < "timeout_ms"
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms  # after "capability": same length, 'c' < 't'
    return body


class _Kind(enum.Enum):
    INVOKE = "invoke"
    QUERY = "query"
    REQUEST = "request"  # any other request answered by PROC_OK / RESPONSE (DELEG_*)


class _Call(msgspec.Struct):
    kind: _Kind
    conn: Hashable
    out: Outbound
    timeout_ms: int
    retry: RetryPolicy | None
    peer: str | None
    capability_id: str | None
    state: CallState = CallState.SENT
    attempts: int = 1


# ---------------------------------------------------------------- invoker


class Invoker:
    def __init__(self, config: InvokerConfig, jitter: Callable[[], float], entropy: Entropy) -> None:
        """``jitter()`` returns the §16.3 factor in [0.5, 1.0] (the edge passes
        ``lambda: random.uniform(0.5, 1.0)``); ``entropy(n)`` gives n random bytes."""
        self.config = config
        self._jitter = jitter
        self._entropy = entropy
        self._calls: dict[Handle, _Call] = {}
        self._timers: DeadlineQueue[bytes] = DeadlineQueue()
        self._finished: OrderedDict[Handle, None] = OrderedDict()

    # --------------------------------------------------------------- start

    def start_invoke(self, conn: Hashable, target: Target, params: Any, *, timeout_ms: int | None = None,
                     retry: RetryPolicy | None = None, to: str | None = None,
                     thread_id: bytes | None = None, encrypt: bool = False,
                     delegation: Mapping[str, Any] | None = None, session: Mapping[str, Any] | None = None,
                     ext_for: Callable[[bytes], dict[str, Any] | None] | None = None,
                     now_ms: int) -> tuple[Handle, Outbound]:
        """Begin a CAP_INVOKE. ``timeout_ms`` is the local deadline per attempt
        and is also sent in the body, so the provider gives up no later.
        ``encrypt`` sends it authcrypted to ``to`` (RFC 001 §8.5).
        ``session`` is the signed RFC 006 context (``body.session``).
        ``ext_for(message_id)`` makes the envelope's ``ext`` (an entry that
        signs itself over the id, wire/trace_context.py); retries repeat it."""
        timeout = timeout_ms if timeout_ms is not None else self.config.default_timeout_ms
        body = invoke_body(target, params, timeout, delegation)
        if session is not None:
            body["session"] = dict(session)
        return self._start(_Kind.INVOKE, conn, int(_T.CAP_INVOKE), body, timeout, retry, to, thread_id,
                           target if isinstance(target, str) else None, now_ms, encrypt, ext_for)

    def start_query(self, conn: Hashable, filter: Mapping[str, Any], *, limit: int | None = None,
                    cursor: str | None = None, order: str | None = None, timeout_ms: int | None = None,
                    to: str | None = None, now_ms: int) -> tuple[Handle, Outbound]:
        """Begin a CAP_QUERY (``filter``: ``capability`` or ``type``, optional ``version`` range)."""
        body: dict[str, Any] = {"filter": dict(filter)}
        if limit is not None:
            body["limit"] = limit
        if cursor is not None:
            body["cursor"] = cursor
        if order is not None:
            body["order"] = order
        timeout = timeout_ms if timeout_ms is not None else self.config.query_timeout_ms
        return self._start(_Kind.QUERY, conn, int(_T.CAP_QUERY), body, timeout, None, to, None, None, now_ms)

    def start_request(self, conn: Hashable, typ: int, body: Any, *, timeout_ms: int | None = None,
                      to: str | None = None, now_ms: int) -> tuple[Handle, Outbound]:
        """Begin a request of type ``typ`` answered by PROC_OK or RESPONSE
        (DELEG_GRANT, DELEG_REVOKE, DELEG_QUERY); never retried."""
        timeout = timeout_ms if timeout_ms is not None else self.config.query_timeout_ms
        return self._start(_Kind.REQUEST, conn, typ, body, timeout, None, to, None, None, now_ms)

    def _start(self, kind: _Kind, conn: Hashable, typ: int, body: dict[str, Any], timeout_ms: int,
               retry: RetryPolicy | None, to: str | None, thread_id: bytes | None, capability_id: str | None,
               now_ms: int, encrypt: bool = False,
               ext_for: Callable[[bytes], dict[str, Any] | None] | None = None) -> tuple[Handle, Outbound]:
        if len(self._calls) >= self.config.max_pending:
            raise LocalProtocolError(5004, "too many calls pending")
        if timeout_ms < 1:
            raise LocalProtocolError(BAD_REQUEST, "timeout_ms must be positive")
        handle = new_message_id(now_ms, self._entropy)
        while handle in self._calls:  # only a broken entropy source repeats itself
            handle = new_message_id(now_ms, self._entropy)
        out = Outbound(typ=typ, body=body, to=to, thread_id=thread_id, msg_id=handle, ts_ms=now_ms,
                       ttl_ms=self.config.message_ttl_ms, encrypt=encrypt,
                       ext=ext_for(handle) if ext_for is not None else None)
        self._calls[handle] = _Call(kind=kind, conn=conn, out=out, timeout_ms=timeout_ms, retry=retry,
                                    peer=to, capability_id=capability_id)
        self._timers.set(handle, now_ms + timeout_ms)
        return handle, out

    def resend(self, conn: Hashable, out: Outbound, *, timeout_ms: int, now_ms: int) -> Handle:
        """Send an invoke again, unchanged (same id, ts, signature), on
        another connection: after a lost connection (RFC 006 §7.2), the
        provider recognises it (R8) and answers with its first outcome."""
        if out.msg_id is None or out.typ != int(_T.CAP_INVOKE):
            raise LocalProtocolError(BAD_REQUEST, "only a CAP_INVOKE with its id can be resent")
        handle = out.msg_id
        self._finished.pop(handle, None)
        self._calls[handle] = _Call(kind=_Kind.INVOKE, conn=conn, out=out, timeout_ms=timeout_ms, retry=None,
                                    peer=out.to if isinstance(out.to, str) else None, capability_id=None)
        self._timers.set(handle, now_ms + timeout_ms)
        return handle

    def abandon(self, handle: Handle) -> None:
        """The caller lost interest: forget the call; no outcome is reported."""
        if self._calls.pop(handle, None) is not None:
            self._timers.discard(handle)
            self._remember(handle)

    @property
    def pending(self) -> int:
        return len(self._calls)

    def state_of(self, handle: Handle) -> CallState | None:
        call = self._calls.get(handle)
        return call.state if call is not None else None

    # ------------------------------------------------------------- replies

    def on_reply(self, inbound: Inbound, conn: Hashable, now_ms: int) -> list[InvokerEvent | Send | Log]:
        env = inbound.envelope
        if env.typ not in _REPLY_TYPES:
            return []
        handle = env.reply_to
        call = self._calls.get(handle) if handle is not None else None
        if call is None or not _answers(call, env.typ) or (call.peer is not None and env.sender != call.peer):
            return self._uncorrelated(inbound, conn)
        assert handle is not None
        body = inbound.body
        kind = _PROVISIONAL.get(env.typ)
        if kind is not None:
            call.state = _advance(call.state, CallInput.PROVISIONAL)
            if env.typ == _T.INPUT_REQUIRED:
                return [self._question(handle, env, body)]
            return [self._progress(handle, kind, body)]
        if env.typ == _T.ERROR:
            err, retryable = _error_from_error_body(body)
            return self._failed(handle, call, err, retryable, now_ms)
        if env.typ == _T.CAP_DECLARE:
            return self._declared(handle, call, body)
        if env.typ in _REQUEST_ANSWERS:
            self._end(handle, call)
            return [Replied(handle=handle, typ=env.typ, body=body)]
        return self._result(handle, call, body, now_ms)

    def on_relay_error(self, inbound: Inbound, now_ms: int) -> list[InvokerEvent | Send | Log]:
        """An ERROR signed by the RFC 003 relay our call went through (the
        relay refused to carry it: 2001 not registered, 2003 rejected, ...):
        not from the call's peer, yet the call's answer, since nothing will
        reach the peer."""
        env = inbound.envelope
        handle = env.reply_to
        call = self._calls.get(handle) if handle is not None else None
        if call is None or env.typ != _T.ERROR:
            return self._uncorrelated(inbound, None)
        assert handle is not None
        err, retryable = _error_from_error_body(inbound.body)
        return self._failed(handle, call, err, retryable, now_ms)

    def on_rejected(self, env: Envelope, err: AmpError, now_ms: int) -> list[InvokerEvent | Send | Log]:
        """A reply to one of our calls that the receive checks refused (a
        malformed body, a bad signature, an expired message). No valid
        answer will follow it, so the call ends now with that refusal's code
        instead of a local timeout (which ``--retry`` would resend).
        Provisional replies are ignored: the final one may still come."""
        if env.typ not in _FINAL_TYPES or env.reply_to is None:
            return []
        handle = env.reply_to
        call = self._calls.get(handle)
        if call is None or not _answers(call, env.typ) or (call.peer is not None and env.sender != call.peer):
            return []
        refused = AmpError(err.code, f"the peer's {_T(env.typ).name} was refused: {err.message}", path=err.path)
        return self._failed(handle, call, refused, False, now_ms)

    def _uncorrelated(self, inbound: Inbound, conn: Hashable) -> list[InvokerEvent | Send | Log]:
        env = inbound.envelope
        rt = env.reply_to.hex() if env.reply_to else "none"
        if env.reply_to is not None and env.reply_to in self._finished:
            return [Log(logging.INFO, f"late {_T(env.typ).name} for ended call {rt} dropped")]
        actions: list[InvokerEvent | Send | Log] = [
            Log(logging.WARNING, f"{_T(env.typ).name} from {env.sender} with reply_to {rt} matches no pending call",
                "unmatched reply")]
        if env.typ in (_T.CAP_RESULT, _T.CAP_DECLARE):
            err = AmpError(BAD_REQUEST, "reply_to does not match a pending request", path="reply_to")
            actions.append(Send(conn, error_reply(env, err)))
        return actions

    def _question(self, handle: Handle, env: Envelope, body: Any) -> InvokeProgress:
        # The body passed its CDDL rule (input-required-body) in the receive pipeline.
        options = body.get("options")
        session = body.get("session")
        return InvokeProgress(handle=handle, kind="input_required", text=body["prompt"], question=InputQuestion(
            message_id=env.id, sender=env.sender, thread_id=env.thread_id, prompt=body["prompt"],
            options=tuple(options) if options is not None else None, timeout_ms=body.get("timeout_ms"),
            session=session if isinstance(session, dict) else None))

    def _progress(self, handle: Handle, kind: str, body: Any) -> InvokeProgress:
        pct = text = None
        if isinstance(body, dict):
            raw_pct = body.get("progress_pct")
            pct = clamp_pct(raw_pct) if raw_pct is not None else None
            raw_text = body.get("status_text")
            text = raw_text if isinstance(raw_text, str) else None
        return InvokeProgress(handle=handle, kind=kind, pct=pct, text=text)

    def _result(self, handle: Handle, call: _Call, body: Any, now_ms: int) -> list[InvokerEvent | Send | Log]:
        status = body.get("status") if isinstance(body, dict) else None
        if status == "success" and "result" in body:
            self._end(handle, call)
            return [InvokeSucceeded(handle=handle, result=plain_integers(body["result"]),
                                    capability_id=call.capability_id, attempts=call.attempts)]
        if status == "error" and isinstance(body.get("error"), dict):
            # Final whatever its code: the provider ran this invocation, and
            # a resend under the same id only gets this CAP_RESULT again (R8).
            return self._failed(handle, call, _error_from_result(body["error"]), False, now_ms)
        self._end(handle, call)
        return [InvokeFailed(handle=handle, error=AmpError(1001, "malformed CAP_RESULT body", path="body"),
                             attempts=call.attempts)]

    def _declared(self, handle: Handle, call: _Call, body: Any) -> list[InvokerEvent | Send | Log]:
        self._end(handle, call)
        try:
            if not isinstance(body, dict) or not isinstance(body.get("capabilities"), list):
                raise AmpError(1001, "CAP_DECLARE needs a 'capabilities' array", path="body.capabilities")
            items = body["capabilities"]
            if not items:
                raise AmpError(BAD_REQUEST, "CAP_DECLARE must not be empty (RFC 004 §6.2)", path="body.capabilities")
            descriptors = tuple(Descriptor.from_wire(d, path=f"capabilities[{i}]") for i, d in enumerate(items))
            cursor = body.get("next_cursor")
            if cursor is not None and not isinstance(cursor, str):
                raise AmpError(1001, "next_cursor must be a string", path="body.next_cursor")
        except AmpError as err:
            return [QueryFailed(handle=handle, error=err)]
        except Exception as exc:  # a peer's declare must end the call, never the connection
            return [QueryFailed(handle=handle, error=AmpError(1001, f"CAP_DECLARE could not be read: {exc!r:.200}"))]
        return [QueryAnswered(handle=handle, descriptors=descriptors, next_cursor=cursor)]

    def _failed(self, handle: Handle, call: _Call, err: AmpError, retryable: bool,
                now_ms: int) -> list[InvokerEvent | Send | Log]:
        if call.state is CallState.BACKOFF and retryable:
            # An earlier attempt's late failure: the resend is already planned.
            return [Log(logging.INFO, f"retryable {err.code} during back-off for {handle.hex()} ignored")]
        retry = self._schedule_retry(handle, call, err, retryable, now_ms)
        if retry is not None:
            return [retry]
        self._end(handle, call)
        if call.kind is not _Kind.INVOKE:
            return [QueryFailed(handle=handle, error=err)]
        return [InvokeFailed(handle=handle, error=err, attempts=call.attempts)]

    def _schedule_retry(self, handle: Handle, call: _Call, err: AmpError, retryable: bool,
                        now_ms: int) -> InvokeRetrying | None:
        policy = call.retry
        if policy is None or not retryable or call.attempts >= policy.max_attempts or call.state is not CallState.SENT:
            return None
        at = now_ms + policy.backoff_ms(call.attempts, self._jitter())
        out = call.out
        assert out.ts_ms is not None and out.ttl_ms is not None
        if at + call.timeout_ms > out.ts_ms + out.ttl_ms:
            return None  # the resent message would expire before it could be answered
        call.state = _advance(call.state, CallInput.RETRY)
        self._timers.set(handle, at)
        return InvokeRetrying(handle=handle, attempt=call.attempts + 1, at_ms=at, reason=err)

    def _end(self, handle: Handle, call: _Call) -> None:
        call.state = _advance(call.state, CallInput.FINAL)
        del self._calls[handle]
        self._timers.discard(handle)
        self._remember(handle)

    def _remember(self, handle: Handle) -> None:
        self._finished[handle] = None
        while len(self._finished) > self.config.remember_finished:
            self._finished.popitem(last=False)

    # -------------------------------------------------------------- timers

    def get_timer(self) -> int | None:
        return self._timers.next_deadline()

    def handle_timer(self, now_ms: int) -> list[InvokerEvent | Send | Log]:
        """Local deadlines (→ retry or :class:`InvokeTimedOut`) and resends."""
        actions: list[InvokerEvent | Send | Log] = []
        for handle in self._timers.pop_due(now_ms):
            call = self._calls[handle]
            if call.state is CallState.BACKOFF:
                call.state = _advance(call.state, CallInput.RESEND)
                call.attempts += 1
                self._timers.set(handle, now_ms + call.timeout_ms)
                actions.append(Send(call.conn, call.out))  # the very same message (§16.3)
                continue
            err = AmpError(TIMEOUT, "no reply before the local deadline")
            retry = self._schedule_retry(handle, call, err, True, now_ms)
            if retry is not None:
                actions.append(retry)
                continue
            self._end(handle, call)
            if call.kind is not _Kind.INVOKE:
                actions.append(QueryFailed(handle=handle, error=err))
            else:
                actions.append(InvokeTimedOut(handle=handle, attempts=call.attempts))
        return actions


def _answers(call: _Call, typ: int) -> bool:
    if typ == _T.CAP_RESULT:
        return call.kind is _Kind.INVOKE
    if typ == _T.CAP_DECLARE:
        return call.kind is _Kind.QUERY
    if typ in _REQUEST_ANSWERS:
        return call.kind is _Kind.REQUEST
    return True


def _error_from_error_body(body: Any) -> tuple[AmpError, bool]:
    """ERROR body → (AmpError, retry). The body's own ``retry`` flag is the
    sender's advice (RFC 001 §16.3 step 1); the registry fills in when absent."""
    if not isinstance(body, dict) or isinstance(body.get("code"), bool) or not isinstance(body.get("code"), int):
        return AmpError(1001, "malformed ERROR body", path="body"), False
    code, message, retry = body["code"], body.get("message"), body.get("retry")
    return (AmpError(code, message if isinstance(message, str) else "", details=body.get("details")),
            retry if isinstance(retry, bool) else error_info(code).retry)


def _error_from_result(err: Mapping[str, Any]) -> AmpError:
    code = err.get("code")
    if isinstance(code, bool) or not isinstance(code, int):
        return AmpError(1001, "malformed CAP_RESULT error", path="body.error.code")
    message = err.get("message")
    return AmpError(code, message if isinstance(message, str) else "", details=err.get("details"))

