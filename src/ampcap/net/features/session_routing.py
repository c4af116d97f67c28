"""RFC 006 at the daemon's edge: which inbound messages are session-scoped,
and who checks them before the executor or the invoker sees them.

:class:`SessionRouting` owns the daemon's three session parts (the daemon
exposes them as ``sessions``, ``session_calls`` and ``controls``):

* the provider (:class:`~ampcap.session.provider.SessionProvider`): the
  sessions other agents open with us; it answers their control REQUESTs
  (§5.1) and checks each session-scoped invoke (§4.4, §7.3) before the
  executor runs it (:meth:`SessionRouting.refuse_invoke`);
* the session-scoped calls we make ourselves
  (:class:`~ampcap.session.context.RequestTracker`): their replies carry the
  signed context (§4.4, §6), checked before the invoker takes them
  (:meth:`SessionRouting.refuse_reply`);
* our own control requests waiting for their RESPONSE or ERROR
  (:class:`~ampcap.net.features.session_controls.ControlRequests`), sent by
  :meth:`SessionRouting.control`.

The daemon keeps the cheap tests inline on its hot path (does an invoke
name a session at all?) and calls in here only when one does, or for a
reply. Refusals are sent through the daemon's ``send``: one ERROR each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace as replace_struct

from ...caps.catalog import Catalog
from ...display import MESSAGE_LIMIT, shown
from ...errors import AmpError
from ...peer.outbound import Outbound, error_reply
from ...peer.policy import Policy
from ...session.context import RequestTracker, read_context
from ...session.provider import ProviderConfig, SessionProvider
from ...wire.envelope import new_message_id
from ...wire.registry import MessageType
from .session_controls import ControlRequests

if TYPE_CHECKING:
    from ...peer.executor import Executor

__all__ = ["SessionRouting"]

log = logging.getLogger("ampcap.daemon")

_ERROR = int(MessageType.ERROR)
_PROVISIONAL = frozenset(int(t) for t in (MessageType.PROCESSING, MessageType.PROGRESS, MessageType.INPUT_REQUIRED))


class SessionRouting:
    """The daemon's RFC 006 parts and the checks between them and its
    dispatch (see the module docstring)."""

    def __init__(self, catalog: Catalog, policy: Policy, entropy: Callable[[int], bytes], reply_ttl_ms: int,
                 send: Callable[[Any, Outbound], None],
                 delegation_fresh: Callable[[Mapping[str, Any], int], None] | None = None) -> None:
        """``send``: the daemon's, where refusals go. ``delegation_fresh``:
        re-checks a cached delegation fingerprint on resume (3004, 5002)."""
        self.provider = SessionProvider(can_serve=lambda cid: catalog.get(cid) is not None,
                                        canonical=catalog.canonical_name, authorized=policy.caller_allowed,
                                        entropy=entropy, config=ProviderConfig(reply_ttl_ms=reply_ttl_ms),
                                        delegation_fresh=delegation_fresh)
        self.calls = RequestTracker()
        self.controls = ControlRequests()  # our session-control requests awaiting their answer
        self._entropy = entropy
        self._send = send

    async def control(self, link: Any, out: Outbound, now: int, timeout_s: float) -> Any:
        """Send our control REQUEST ``out`` on ``link`` (a fresh message id,
        timestamped ``now``, to the link's peer unless it names one) and wait
        for its RESPONSE; return its body. An ERROR answer raises its
        AmpError; no answer in time is 5003, a lost connection 5002."""
        out = replace_struct(out, msg_id=new_message_id(now, self._entropy), ts_ms=now, to=out.to or link.peer_did)
        return await self.controls.request(link, out, timeout_s)

    def refuse_invoke(self, link: Any, inbound: Any, executor: Executor, now: int) -> bool:
        """For a CAP_INVOKE that names a session (``body.session``, or a
        session's thread): refuse it (True, its ERROR sent) when the
        provider's §4.4/§7.3 checks fail. A retry the executor already
        knows gets its first outcome (R8), so it is not checked again."""
        if executor.knows(inbound, now):
            return False
        try:
            self.provider.check_invoke(inbound, now)
        except AmpError as err:
            env = inbound.envelope
            log.info("session-scoped invoke refused id=%s code=%d: %s", env.id.hex(), err.code,
                     shown(err.message, MESSAGE_LIMIT))
            self._send(link, error_reply(env, err, encrypt=inbound.decrypted))
            return True
        return False

    def stale_links(self, inbound: Any, fresh: Callable[[tuple[str, str]], bool]) -> list[tuple[str, str]]:
        """For a session-control REQUEST: when it resumes a session whose
        record caches delegation fingerprints, the (delegator,
        delegation_id) pairs among them whose status is not ``fresh``
        (the edge asks the publisher before the resume is decided)."""
        body = inbound.body
        if type(body) is not dict or body.get("op") != "resume":
            return []
        sid = body.get("session_id")
        record = self.provider.sessions.get(sid) if type(sid) is bytes else None
        if record is None:
            return []
        wanted: dict[tuple[str, str], None] = {}
        for entry in record.delegation_cache:
            for link in entry.get("links") or ():
                if type(link) is list and len(link) == 2 and not fresh((link[0], link[1])):
                    wanted[(link[0], link[1])] = None
        return list(wanted)

    def refuse_reply(self, link: Any, inbound: Any, serving: Executor | None) -> bool:
        """For a reply (CAP_RESULT, ERROR, a provisional message, ...): True
        when it stops here, refused with an ERROR or, for a provisional
        message about a session-scoped request we serve, checked and done;
        False when the invoker takes it. ``serving``: the executor, if built
        (none yet: no invoke of the peer's runs here)."""
        env = inbound.envelope
        typ = env.typ
        in_session = (serving.session_of(env.sender, env.reply_to)
                      if serving is not None and typ in _PROVISIONAL and env.reply_to is not None else None)
        if in_session is not None:
            # A provisional message naming a session-scoped request in flight
            # here enters session-scoped validation (§4.4): without its signed
            # context it is refused (A.15), never bound by reply_to alone.
            try:
                sid, scoped = read_context(inbound.body)
                if not scoped or sid != in_session["session_id"]:
                    raise AmpError(4001, "provisional message in a session without its body.session context",
                                   path="body.session")
            except AmpError as err:
                self._send(link, error_reply(env, err, encrypt=inbound.decrypted))
            return True
        if self.calls.knows(env.reply_to) or (env.reply_to is None and typ in _PROVISIONAL):
            try:
                self.calls.on_reply(env, inbound.body)  # RFC 006 §4.4, §6
            except AmpError as err:
                log.info("session-scoped reply refused id=%s code=%d: %s", env.id.hex(), err.code,
                         shown(err.message, MESSAGE_LIMIT))
                if typ != _ERROR:
                    self._send(link, error_reply(env, err, encrypt=inbound.decrypted))
                return True
        return False
