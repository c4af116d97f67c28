"""A daemon's own calls to its peers: the requester side at the trio edge.

The sans-I/O :class:`~ampcap.peer.invoker.Invoker` correlates replies,
retries and times calls out, and reports each call's end as an outcome event;
it cannot wait for anything. This module is what a caller awaits: one
:class:`CallOutcome` per call handle, set exactly once, whether by the
invoker's outcome, by the connection it was sent on going away, or by the
daemon shutting down, and a caller that gives up (is cancelled) makes the
invoker forget the call. A caller's ``on_progress`` callback is called from
here too: what it raises is logged and never breaks the connection, and an
async one runs as a task of its own, in order, finished before the caller
sees the call's result.

The daemon owns one :class:`Calls`; the Python API
(:class:`~ampcap.net.api.peer.Remote`) calls through it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from ...errors import AmpError, LocalProtocolError, MessageTooLarge
from ...display import MESSAGE_LIMIT, printable, shown
from ...peer.invoker import (
    InputQuestion,
    InvokeFailed,
    InvokeProgress,
    Invoker,
    InvokeRetrying,
    InvokeSucceeded,
    InvokeTimedOut,
    QueryAnswered,
    QueryFailed,
    Replied,
    RetryPolicy,
    Target,
)
from ...wire.registry import MessageType
from ...caps.deprecation import AmpDeprecationWarning, Notice
from ...peer.listing import agrees, caller_refusal
from ...wire.extensions import CANCEL, cancel_body
from ...peer.outbound import Outbound
from ...peer.state import ConnState
from ..transport.clock import Clock
from .link import Link, why_silent

__all__ = ["Calls", "CallOutcome", "send_cancel", "warn_deprecated"]

# The daemon's logger: these are its lines, whichever module writes them.
log = logging.getLogger("ampcap.daemon")

UNAVAILABLE, TIMEOUT = 5002, 5003
_EXTENSION, _INVOKE = int(MessageType.EXTENSION), int(MessageType.CAP_INVOKE)
_SHUTTING_DOWN = "local daemon shutting down"


@dataclass(slots=True)
class CallOutcome:
    """What one of our calls ended with (set by the invoker's outcome event)."""

    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: AmpError | None = None
    on_progress: Callable[[int | None, str | None], Any] | None = None
    link: Link | None = None
    # Async on_progress callbacks still running: the caller gets its outcome
    # only after they finished, so it never sees progress after the result.
    callbacks: list[trio.Event] = field(default_factory=list)
    # RFC 006 INPUT_REQUIRED: (prompt, options) -> the answer (str), or None
    # to decline; plain or async. Without one, every question is declined.
    on_input: Callable[[str, tuple[str, ...] | None], Any] | None = None
    # The CAP_INVOKE this call sent (None for queries and requests): what a
    # cancel names when the caller gives up (R23).
    invoke: Outbound | None = None
    # R23: deprecation notices the provider's verified reply carried.
    notices: tuple[Notice, ...] = ()


def warn_deprecated(notices: tuple[Notice, ...]) -> None:
    """A :class:`AmpDeprecationWarning` per deprecated capability version,
    once per process (the caller's frame: five up, through _await, Calls.invoke, Remote.invoke)."""
    for notice in notices:
        if notice.id not in _WARNED:
            _WARNED.add(notice.id)
            warnings.warn(AmpDeprecationWarning(notice.line()), stacklevel=5)


_WARNED: set[str] = set()


def _ended(link: Link) -> AmpError:
    """What a call pending on ``link`` ends with now that it cannot be answered."""
    term = link.driver.terminated
    if term is None:  # open still, but the peer closed its side (often after its GOAWAY)
        return AmpError(UNAVAILABLE, f"{link.peer_closing} before answering")
    # Its code when it has one (as a failed dial reports it too): 1001 for a
    # peer that broke the framing, a transport ERROR's own, 5003 keepalive.
    return AmpError(term.code or UNAVAILABLE, f"connection closed before the reply: {term.reason}")


def send_cancel(link: Link, invoke: Outbound) -> bool:
    """Ask the provider to stop ``invoke`` (ampcap's cancel, R23), when the
    peer announced the extension in HELLO and the link still takes messages;
    other peers are never sent one (the caller just stops waiting). The
    provider's terminal reply, which still comes, is dropped by the invoker.
    True when the cancel was queued."""
    if CANCEL not in link.driver.conn.extensions or link.driver.terminated is not None:
        return False
    assert invoke.msg_id is not None
    try:
        link.driver.send_nowait(Outbound(typ=_EXTENSION, body=cancel_body(invoke.msg_id), reply_to=invoke.msg_id,
                                         thread_id=invoke.thread_id, to=invoke.to, encrypt=invoke.encrypt))
    except (LocalProtocolError, MessageTooLarge) as exc:  # closing: its terminal reply is lost anyway
        log.debug("cancel of %s not sent: %s", invoke.msg_id.hex(), exc.message)
        return False
    log.info("cancel sent for invoke %s", invoke.msg_id.hex())
    return True


class Calls:
    """Our pending calls, by the invoker's handle."""

    def __init__(self, invoker: Invoker, clock: Clock, rearm: Callable[[], None]) -> None:
        self._invoker = invoker
        self._clock = clock
        self._rearm = rearm  # the daemon's: a new call may bring the invoker's next deadline forward
        self._pending: dict[bytes, CallOutcome] = {}
        self._refusing = False
        self.nursery: trio.Nursery | None = None  # the daemon's, once it runs (async on_progress callbacks)
        self.tracing: Any = None  # Daemon.traced_by: a CLIENT span per invoke (net/features/tracing.py)

    async def invoke(self, link: Link, target: Target, params: Any, *, timeout_ms: int,
                     retry: RetryPolicy | None = None,
                     on_progress: Callable[[int | None, str | None], Any] | None = None,
                     to: str | None = None, encrypt: bool = False,
                     delegation: Mapping[str, Any] | None = None, thread_id: bytes | None = None,
                     session: Mapping[str, Any] | None = None,
                     sent: Callable[[Outbound], None] | None = None,
                     on_input: Callable[[str, tuple[str, ...] | None], Any] | None = None) -> Any:
        """Send a CAP_INVOKE on ``link`` and wait for its one outcome. ``to``
        addresses another agent than the link's peer (through a relay);
        ``encrypt`` sends it authcrypted (the replies come back so too);
        ``delegation`` is RFC 005 evidence carried in the body;
        ``thread_id`` and ``session`` scope it to an RFC 006 session;
        ``sent(out)`` is told the message before it leaves (to resend it)."""
        if self._refusing:
            raise AmpError(UNAVAILABLE, _SHUTTING_DOWN)
        tracing, span, ext_for = self.tracing, None, None
        if tracing is not None:  # a CLIENT span; its context in ext when the peer traces too
            span, ext_for = tracing.calling(link, target, to)
        try:
            handle, out = self._invoker.start_invoke(link, target, params, timeout_ms=timeout_ms, retry=retry,
                                                     to=to or link.peer_did, encrypt=encrypt, delegation=delegation,
                                                     thread_id=thread_id, session=session, ext_for=ext_for,
                                                     now_ms=self._clock.wall_ms())
            if sent is not None:
                sent(out)
            outcome = self.register(link, handle, out, on_progress, on_input)
            outcome.invoke = out
            result = await self._await(handle, outcome)
        except BaseException as exc:
            if span is not None:
                tracing.ended(span, exc)
            raise
        if span is not None:
            tracing.ended(span, None)
        return result

    async def resend(self, link: Link, out: Outbound, *, timeout_ms: int,
                     on_progress: Callable[[int | None, str | None], Any] | None = None,
                     on_input: Callable[[str, tuple[str, ...] | None], Any] | None = None) -> Any:
        """Send ``out`` (an invoke sent before) again on ``link`` and wait for its outcome."""
        if self._refusing:
            raise AmpError(UNAVAILABLE, _SHUTTING_DOWN)
        handle = self._invoker.resend(link, out, timeout_ms=timeout_ms, now_ms=self._clock.wall_ms())
        outcome = self.register(link, handle, out, on_progress, on_input)
        outcome.invoke = out
        return await self._await(handle, outcome)

    async def query(self, link: Link, filter: Mapping[str, Any], *, limit: int | None, cursor: str | None,
                    order: str | None, timeout_ms: int, to: str | None = None) -> QueryAnswered:
        """Send a CAP_QUERY on ``link`` and wait for the CAP_DECLARE (or raise)."""
        if self._refusing:
            raise AmpError(UNAVAILABLE, _SHUTTING_DOWN)
        # R22: "*" goes only to a peer that announced the listing (through a relay: to none).
        refused = caller_refusal(filter, agrees(link.driver.conn.extensions, link.peer_did, to))
        if refused is not None:
            raise refused
        handle, out = self._invoker.start_query(link, filter, limit=limit, cursor=cursor, order=order,
                                                timeout_ms=timeout_ms, to=to or link.peer_did,
                                                now_ms=self._clock.wall_ms())
        outcome = self.register(link, handle, out, None)
        answer: QueryAnswered = await self._await(handle, outcome)
        if outcome.notices:  # handed on, not warned: a listing calls nothing deprecated
            answer = msgspec.structs.replace(answer, notices=outcome.notices)
        return answer

    async def request(self, link: Link, typ: int, body: Any, *, timeout_ms: int, to: str | None = None) -> Replied:
        """Send a request answered by PROC_OK or RESPONSE (the DELEG_*
        messages) and wait for it (or raise the ERROR's AmpError)."""
        if self._refusing:
            raise AmpError(UNAVAILABLE, _SHUTTING_DOWN)
        handle, out = self._invoker.start_request(link, typ, body, timeout_ms=timeout_ms, to=to or link.peer_did,
                                                  now_ms=self._clock.wall_ms())
        answer: Replied = await self._await(handle, self.register(link, handle, out, None))
        return answer

    def register(self, link: Link, handle: bytes, out: Outbound,
                 on_progress: Callable[[int | None, str | None], Any] | None,
                 on_input: Callable[[str, tuple[str, ...] | None], Any] | None = None) -> CallOutcome:
        """Send the invoker's first message of call ``handle`` and track the call."""
        outcome = CallOutcome(on_progress=on_progress, link=link, on_input=on_input)
        self._pending[handle] = outcome
        link.calls.add(handle)
        try:
            link.driver.send_nowait(out)
            if link.relay_acks and out.typ == _INVOKE:
                link.receipts_owed += 1  # its agent's recipient ACK comes back (Peer waits for it on leaving)
        except MessageTooLarge as exc:  # the request itself is at fault: retrying cannot help
            self._invoker.abandon(handle)
            self.finish(handle, error=AmpError(exc.code, f"cannot send: {exc.message}", path=exc.path))
        except LocalProtocolError as exc:  # the connection closed or is draining: try elsewhere or later
            self._invoker.abandon(handle)
            state = link.driver.conn.state
            why = ("the connection is closed" if state is ConnState.CLOSED else
                   "the connection is closing (GOAWAY)" if state is ConnState.DRAINING else exc.message)
            self.finish(handle, error=AmpError(UNAVAILABLE, f"cannot send: {why}"))
        self._rearm()
        return outcome

    async def _await(self, handle: bytes, outcome: CallOutcome) -> Any:
        try:
            await outcome.done.wait()
            for finished in outcome.callbacks:
                await finished.wait()
        finally:
            if not outcome.done.is_set():  # cancelled by our caller: forget the call
                self._invoker.abandon(handle)
                self._pending.pop(handle, None)
                if outcome.invoke is not None and outcome.link is not None:
                    send_cancel(outcome.link, outcome.invoke)
        if outcome.notices and outcome.invoke is not None:
            warn_deprecated(outcome.notices)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result

    def note(self, handle: bytes | None, notices: tuple[Notice, ...]) -> None:
        """The reply to call ``handle`` carried verified deprecation notices (R23)."""
        outcome = self._pending.get(handle) if handle is not None else None
        if outcome is not None and notices:
            outcome.notices = notices

    def link_of(self, handle: bytes) -> Link | None:
        """The link call ``handle`` was sent on, while it is pending."""
        outcome = self._pending.get(handle)
        return outcome.link if outcome is not None else None

    def settle(self, event: Any) -> None:
        """Act on one of the invoker's outcome events (any action it returns
        but ``Send`` and ``Log``, which the daemon applies): the call ends
        with its result or error, a PROGRESS report or question reaches its
        caller, a retry is logged. A timeout says why the peer may have
        seemed silent (:func:`~ampcap.net.daemon.link.why_silent`)."""
        kind = type(event)
        if kind is InvokeSucceeded:
            self.finish(event.handle, result=event.result)
        elif kind is InvokeFailed:
            self.finish(event.handle, error=event.error)
        elif kind is InvokeTimedOut:
            why = why_silent(self.link_of(event.handle))
            self.finish(event.handle, error=AmpError(TIMEOUT, "no reply before the local deadline" + why))
        elif kind is QueryAnswered:
            self.finish(event.handle, result=event)
        elif kind is QueryFailed:
            error = event.error
            if error.code == TIMEOUT:
                error = AmpError(TIMEOUT, error.message + why_silent(self.link_of(event.handle)))
            self.finish(event.handle, error=error)
        elif kind is Replied:
            self.finish(event.handle, result=event)
        elif kind is InvokeProgress:
            self.progress(event)
        elif kind is InvokeRetrying:
            log.info("retrying call %s (attempt %d): %s", event.handle.hex(), event.attempt,
                     shown(event.reason, MESSAGE_LIMIT))

    def finish(self, handle: bytes, *, result: Any = None, error: AmpError | None = None) -> None:
        """Call ``handle`` ended (unless already forgotten): wake its caller."""
        outcome = self._pending.pop(handle, None)
        if outcome is None:
            return
        if outcome.link is not None:
            outcome.link.calls.discard(handle)
        outcome.result, outcome.error = result, error
        outcome.done.set()

    def fail(self, handle: bytes, error: AmpError) -> None:
        """End call ``handle`` with ``error`` now: its message was refused
        before any reply could come (an HTTP POST answered 403, 413, 429...)."""
        self._invoker.abandon(handle)
        self.finish(handle, error=error)
        self._rearm()

    def progress(self, event: InvokeProgress) -> None:
        """Hand a PROGRESS report to the caller's ``on_progress``, if it gave one."""
        outcome = self._pending.get(event.handle)
        if outcome is not None and event.question is not None:
            self._ask_caller(outcome, event.question)
            return
        if outcome is None or outcome.on_progress is None:
            return
        # PROGRESS, and PROCESSING that says something (progress with no
        # percentage, as an MCP server without a total reports it): pct None.
        if event.kind != "progress" and not (event.kind == "processing" and event.text):
            return
        try:
            maybe = outcome.on_progress(event.pct, event.text)
            if hasattr(maybe, "__await__") and self.nursery is not None:
                finished = trio.Event()
                outcome.callbacks = [e for e in outcome.callbacks if not e.is_set()]  # stays short
                # Each one waits for the one before: the caller sees its
                # progress reports one at a time, in the order they came.
                before = outcome.callbacks[-1] if outcome.callbacks else None
                outcome.callbacks.append(finished)

                async def _await_it() -> None:
                    try:
                        if before is not None:
                            await before.wait()
                        await maybe
                    except Exception:
                        log.warning("on_progress callback raised", exc_info=True)
                    finally:
                        finished.set()

                self.nursery.start_soon(_await_it)
        except Exception:  # the caller's callback must not break the connection
            log.warning("on_progress callback raised", exc_info=True)

    def _ask_caller(self, outcome: CallOutcome, question: InputQuestion) -> None:
        """RFC 006 §6.3 on our side: put the provider's question to the
        caller's ``on_input`` and send its answer (ampcap's carriage: a
        RESPONSE whose reply_to is the INPUT_REQUIRED, docs/sessions.md)."""
        link = outcome.link
        if link is None or self.nursery is None:
            return
        # Not one of outcome.callbacks: a caller slow to answer (a person at a
        # terminal) must not hold back the outcome, which may come first (5003).

        async def answer() -> None:
            body: dict[str, Any]
            try:
                if outcome.on_input is None:
                    body = {"declined": True, "reason": "the caller takes no input"}
                else:
                    reply = outcome.on_input(question.prompt, question.options)
                    if hasattr(reply, "__await__"):
                        reply = await reply
                    body = {"answer": reply} if isinstance(reply, str) else \
                        {"declined": True, "reason": "the caller declined"}
            except Exception as exc:
                log.warning("on_input callback raised: %s", printable(repr(exc), 200))
                body = {"declined": True, "reason": "the caller could not answer"}
            if question.session is not None:
                body["session"] = dict(question.session)
            try:
                link.driver.send_nowait(Outbound(typ=int(MessageType.RESPONSE), body=body,
                                                 reply_to=question.message_id, thread_id=question.thread_id,
                                                 to=question.sender))
            except (LocalProtocolError, MessageTooLarge) as exc:
                log.info("answer to INPUT_REQUIRED not sent: %s", exc.message)

        self.nursery.start_soon(answer)

    def end_on(self, link: Link) -> None:
        """Fail every call pending on ``link``, which can no longer answer
        them, with why: the connection's end (its code, 5002 without one,
        and its reason: a framing error, a transport ERROR, a keepalive
        timeout...), or the peer closing its side, after GOAWAY or not."""
        if not link.calls:
            return
        error = _ended(link)
        for handle in list(link.calls):
            self._invoker.abandon(handle)
            self.finish(handle, error=error)

    def refuse_new(self) -> None:
        """The daemon drains: new calls fail at once; pending ones may still be answered."""
        self._refusing = True

    def end_all(self) -> None:
        """The daemon is about to close its connections: fail every pending call (5002)."""
        for handle in list(self._pending):
            self._invoker.abandon(handle)
            self.finish(handle, error=AmpError(UNAVAILABLE, _SHUTTING_DOWN))
