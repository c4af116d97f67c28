"""The daemon's dispatch: every event a connection reports, and where each
inbound message goes (the executor, the invoker, the session parts, the
delegation answers, the relay probe, or a 1005 answer).

:class:`InboundDispatch` is a base of :class:`~ampcap.net.daemon.core.Daemon`
(so the per-message path costs no extra call); what it uses of the daemon
is spelled out as the ``_Host`` protocol below, which the core satisfies.
This is the hot path of every message: keep it to type tests and one call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from ...display import MESSAGE_LIMIT, shown
from ...errors import AmpError
from ...peer.admission import delegation_violation
from ...caps.deprecation import read_entry
from ...wire.extensions import CANCEL, DEPRECATION, cancelled_invoke
from ...peer.events import (
    ConnectionTerminated,
    Event,
    GoAwayReceived,
    InputEnded,
    MessageReceived,
    MessageRejected,
    Negotiated,
)
from ...peer.outbound import Send, error_reply, reply_to
from ...session.control import is_control
from ...wire.registry import MessageType, error_info
from ..features import delegation, forwarding_relay, relay_agent
from .link import agreed_extensions, peer_label

if TYPE_CHECKING:
    from ...deleg.service import DelegationService
    from ...peer.executor import Executor
    from ...peer.invoker import Invoker
    from ...peer.outbound import Outbound
    from ...session.provider import SessionProvider
    from ...wire.identity import Identity
    from ...wire.receive import ReceivePipeline
    from ..features.session_controls import ControlRequests
    from ..features.session_routing import SessionRouting
    from ..transport.clock import Clock
    from .calls import Calls
    from .jobs import Jobs
    from .link import Link

__all__ = ["InboundDispatch"]

log = logging.getLogger("ampcap.daemon")

_INVOKE, _QUERY = int(MessageType.CAP_INVOKE), int(MessageType.CAP_QUERY)
_PING, _PONG = int(MessageType.PING), int(MessageType.PONG)
_DELEG = frozenset(int(t) for t in (MessageType.DELEG_GRANT, MessageType.DELEG_REVOKE, MessageType.DELEG_QUERY))
_DECLARE = int(MessageType.CAP_DECLARE)
_REPLIES = frozenset(int(t) for t in (MessageType.ACK, MessageType.PROCESSING, MessageType.PROGRESS,
                                      MessageType.INPUT_REQUIRED, MessageType.ERROR, MessageType.CAP_RESULT,
                                      MessageType.CAP_DECLARE,
                                      MessageType.PROC_OK, MessageType.RESPONSE))  # PROC_OK, RESPONSE: DELEG_*
_EXTENSION = int(MessageType.EXTENSION)
_REQUEST, _RESPONSE, _ERROR = int(MessageType.REQUEST), int(MessageType.RESPONSE), int(MessageType.ERROR)
_ACK = int(MessageType.ACK)
BAD_SIGNATURE = 1002
UNKNOWN_TYPE = 1005


class _Host(Protocol):
    """What the dispatch uses of the daemon it is part of."""

    identity: Identity
    clock: Clock
    pipeline: ReceivePipeline
    invoker: Invoker
    calls: Calls
    sessions: SessionProvider
    controls: ControlRequests
    _executor: Executor | None
    _read_ahead: Any
    _session_routing: SessionRouting
    _half_closed: set[Link]
    tracing: Any
    _acks_after_replies: relay_agent.AcksAfterReplies

    @property
    def executor(self) -> Executor: ...

    @property
    def jobs(self) -> Jobs: ...

    @property
    def deleg_service(self) -> DelegationService: ...

    def _serve_half(self) -> Executor: ...

    def _send(self, link: Any, out: Outbound) -> None: ...

    def _apply(self, actions: list[Any]) -> None: ...

    def _apply_invoker(self, actions: list[Any]) -> None: ...

    def _on_message(self, link: Link, event: MessageReceived) -> None: ...

    def _noting_delegation(self, actions: list[Any], now: int) -> list[Any]: ...

    def _stale_session_links(self, inbound: Any, now: int) -> list[tuple[str, str]]: ...

    def _ask_then_control(self, link: Link, inbound: Any, keys: list[tuple[str, str]]) -> None: ...


class InboundDispatch:
    """Connection events and inbound messages, routed (see the module docstring)."""

    async def _on_event(self: _Host, link: Link, event: Event) -> None:
        # A peer's text (reasons, messages, DIDs) is logged through shown():
        # one event stays one line under whatever handler the program
        # installed, and a short one: a peer can send megabytes of text.
        if type(event) is MessageReceived:
            ahead = self._read_ahead
            if ahead is not None and self._executor is not None and event.inbound.envelope.typ == _INVOKE:
                # PostgreSQL: a journal lookup is read in a thread first (net/daemon/lookahead.py).
                key = await ahead.before(self._executor, event.inbound, self.clock.wall_ms())
                try:
                    self._on_message(link, event)
                finally:
                    if key is not None:
                        ahead.forget(key)
                return
            self._on_message(link, event)
        elif type(event) is Negotiated:
            if link.ready.is_set():  # raw framing: the peer's HELLO came after a preconfigured start
                log.info("peer=%s named itself by HELLO (version %s)", shown(event.peer_did), shown(event.version))
            else:
                log.info("connection opened %s peer=%s version=%s", "to" if link.outbound else "from",
                         shown(event.peer_did), shown(event.version))
            link.ready.set()
        elif type(event) is ConnectionTerminated:
            lasted = self.clock.monotonic_ms() - link.opened_ms
            # An orderly close has no code; a failed one names it ("1004 VERSION_MISMATCH").
            code = "-" if event.code is None else f"{event.code} {error_info(event.code).name}"
            log.info("connection closed peer=%s code=%s reason=%s after=%dms", peer_label(link), code,
                     shown(event.reason, MESSAGE_LIMIT), lasted)
            link.ready.set()
        elif type(event) is MessageRejected:
            log.info("message rejected peer=%s id=%s: %s", peer_label(link),
                     event.message_id.hex() if event.message_id else "-", shown(event.error, MESSAGE_LIMIT))
            if event.error.code == BAD_SIGNATURE and event.envelope is not None:
                link.unverified += 1
                if link.verifies_under is None:
                    link.verifies_under = self.pipeline.verifies_under(event.envelope)
            if event.authenticated and event.envelope is not None and event.envelope.reply_to is not None:
                self._apply_invoker(self.invoker.on_rejected(event.envelope, event.error, self.clock.wall_ms()))
        elif type(event) is GoAwayReceived:
            link.goaway = event
            log.info("GOAWAY from peer=%s reason=%s message=%s", peer_label(link), event.reason,
                     shown(event.message or "-"))
        elif type(event) is InputEnded:
            # It can still read: its running invokes still get their replies.
            # Our own calls on it can no longer be answered.
            owed = self._executor is not None and self._executor.owes(link)
            log.info("peer=%s finished sending; invokes still to answer: %s", peer_label(link),
                     "yes" if owed else "none")
            self.calls.end_on(link)
            if owed:
                self._half_closed.add(link)  # _close_answered closes it after its last reply
            else:
                # Said as what the peer did: a dial that meets this close
                # ("cannot open connection: ...") is not about a drain of ours.
                link.driver.close(link.peer_closing)

    def _on_message(self: _Host, link: Link, event: MessageReceived) -> None:
        inbound = event.inbound
        env = inbound.envelope
        typ = env.typ
        now = self.clock.wall_ms()
        if typ == _INVOKE:
            executor = self._executor or self._serve_half()  # the attribute, not the property: per message
            body = inbound.body
            # Only an invoke that names a session is checked as one (net/features/session_routing.py).
            if (type(body) is dict and "session" in body) or self.sessions.is_session_thread(env.thread_id):
                if self._session_routing.refuse_invoke(link, inbound, executor, now):
                    return
                actions = self._noting_delegation(executor.handle(inbound, link, now), now)
            else:
                actions = executor.handle(inbound, link, now)
            if self.tracing is not None:  # its span starts before anything it asks for takes effect
                self.tracing.received(link, inbound)
            if link.relay_acks:
                # Sent right after the invoke's terminal reply (which, with a
                # durable store, waits for its journal row), on the same link
                # (net/features/relay_agent.py AcksAfterReplies: why).
                self._acks_after_replies.hold(env, now)
            self._apply(actions)
            return
        if link.relay_acks:
            if env.sender == link.peer_did:  # the relay's own: a refusal of ours, or its relay ACK
                if typ == _ERROR:
                    self._apply_invoker(self.invoker.on_relay_error(inbound, now))
                return
            if typ not in relay_agent.NOT_ACKED:
                self._send(link, relay_agent.recipient_ack(env, now))  # nothing of ours to journal first
            elif typ == _ACK and relay_agent.is_recipient_ack(inbound.body) and link.receipts_owed > 0:
                link.receipts_owed -= 1  # an invoke of ours is committed at its agent's relay
            if typ == _ACK and (env.reply_to is None or self.invoker.state_of(env.reply_to) is None):
                # A recipient's ACK of a reply of ours, carried back by the
                # relay (RFC 003 §5.5): a receipt, not an answer to a call.
                log.debug("recipient ACK from %s for %s", shown(env.sender),
                          env.reply_to.hex() if env.reply_to else "-")
                return
        if typ == _QUERY:  # the executor checks delegation in its own order (RFC 005, R10)
            self._apply((self._executor or self._serve_half()).handle(inbound, link, now))
            return
        if (typ == _RESPONSE or typ == _ERROR) and self.controls.settle(inbound):
            return
        if typ == _RESPONSE and self._executor is not None and self._executor.asking(env.reply_to):  # an answer to INPUT_REQUIRED (§6.3)
            try:
                qid, answer, declined = self.executor.on_input(inbound)
            except AmpError as err:
                self._send(link, error_reply(env, err, encrypt=inbound.decrypted))
                return
            self.jobs.answer(qid, answer, declined)
            return
        violation = delegation_violation(inbound)  # RFC 005 §5.3 for every other type
        if violation is not None:
            if typ != int(MessageType.ERROR):
                self._send(link, error_reply(env, violation, encrypt=inbound.decrypted))
            return
        if typ == _REQUEST and is_control(typ, inbound.body):  # RFC 006 §5.1 (A.14: no sess_v, not ours)
            stale = self._stale_session_links(inbound, now)
            if stale:  # a resume re-checks its cached delegations: ask the publisher first (§7.3, R20)
                self._ask_then_control(link, inbound, stale)
                return
            self._apply(self.sessions.handle(inbound, link, now))
            return
        if typ == _DECLARE and env.reply_to is None:
            # RFC 004 §6.2 asks reply_to only of a CAP_DECLARE that answers
            # a query: one without it is the peer announcing its
            # capabilities, not a reply gone astray (no ERROR 4001).
            log.info("unasked CAP_DECLARE from peer=%s", peer_label(link))
            if link.on_declare is not None:
                try:
                    link.on_declare(inbound.body)
                except Exception:  # the listener's fault must not break the connection
                    log.warning("on_declare listener raised", exc_info=True)
        elif typ in _REPLIES:
            if self._session_routing.refuse_reply(link, inbound, self._executor):  # RFC 006 §4.4, §6
                return
            # R23, caps/deprecation.py (``link`` may be an HTTP POST's reply sink: no extensions)
            if env.ext is not None and DEPRECATION in agreed_extensions(link):
                self.calls.note(env.reply_to, read_entry(env.ext, env.sender, env.reply_to,
                                                         self.pipeline.resolver.ed25519_for))
            self._apply_invoker(self.invoker.on_reply(inbound, link, now))
        elif typ in _DELEG:  # RFC 005 §2.2: consumer, issuer, revocation publisher
            self._send(link, delegation.answer(self.deleg_service, inbound, now))
        elif typ == _PING:  # RFC 001 §4.4 application-level liveness
            if forwarding_relay.probe_returned(link, env.sender, self.identity.did):  # it still forwards to us
                return
            self._send(link, reply_to(env, _PONG, None, encrypt=inbound.decrypted))
        elif typ == _PONG:  # liveness answer: nothing to say back
            log.debug("PONG from %s", shown(env.sender))
        elif typ == _EXTENSION and CANCEL in agreed_extensions(link) \
                and (invoke_id := cancelled_invoke(inbound.body)) is not None:
            # R23: the caller asks us to stop its invoke; the answer is the
            # invoke's own terminal reply, never one to this message.
            if self._executor is not None:
                self._apply(self._executor.cancel_requested(env.sender, invoke_id, now))
        else:
            # RFC 001 §1.5: a type this agent does not implement (MESSAGE,
            # REQUEST, CONTACT_*, PRESENCE_*, DOC_*, ...) is answered 1005,
            # so its sender is not left waiting for a reply that never comes.
            name = MessageType(typ).name
            log.info("unsupported %s from %s answered 1005", name, shown(env.sender))
            self._send(link, error_reply(env, AmpError(UNKNOWN_TYPE, f"{name} is not supported by this agent",
                                                       path="typ"), encrypt=inbound.decrypted))
