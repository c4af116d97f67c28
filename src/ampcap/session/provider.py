"""The session provider (RFC 006 Session Provider Profile), sans-I/O.

Fed the session-control REQUESTs a daemon receives (:meth:`handle`), the
session-scoped CAP_INVOKEs before the executor sees them
(:meth:`check_invoke`) and timer ticks; answers with actions: ``Send`` (a
RESPONSE or an ERROR on ``conn``), :class:`SaveSession` (commit this record
before the sends of the same list: the session store profile's atomic
writes), ``Log``.

Order of checks for a control request (§9): shape 1001, ``sess_v`` 1004,
op shape 1001, ``thread_mode`` 1004 (all in :mod:`.control`); a duplicate
of a request already answered gets the same answer (§7.2); then the
caller's policy (3001); then the session: unknown 4001 (without saying
whether it exists for someone else), not a participant 3001 (A.11), the
coupled ``thread_id`` binding 4001 (A.2), the §8.1 table 4001.

Pins (§7.3): capability name → full id, asked for at init (``pin``, an
ampcap extension, docs/sessions.md) or changed by an update that says
``allow_renegotiate = true``; a pin this daemon cannot serve is 4003 at
init, update and resume, and a session-scoped invoke of a pinned name that
asks for another version is 4003 too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import msgspec

from ..caps.bodies import parse_invoke_body
from ..caps.names import is_full_id
from ..display import shown
from ..errors import AmpError
from ..peer.limits import DeadlineQueue
from ..peer.outbound import Log, Outbound, Send, error_reply
from ..schema import Schemas, load_schemas
from ..wire.cbor import dumps
from ..wire.envelope import new_message_id
from ..wire.receive import Inbound
from ..wire.registry import MessageType
from . import control
from .context import read_context, scope_of
from .record import Checkpoint, SessionRecord, ThreadMode
from .state import SessionInput, SessionState, advance_session

__all__ = ["ProviderConfig", "SaveSession", "SessionProvider"]

UNAUTHORIZED, BAD_REQUEST, VERSION_MISMATCH, OVERLOADED = 3001, 4001, 4003, 5004
UNSUPPORTED = 1004
_RESPONSE = int(MessageType.RESPONSE)
_UNKNOWN = "unknown session"  # the same words whether it never existed or belongs to others (§12)


class SaveSession(msgspec.Struct, frozen=True):
    """Action: commit ``record`` before applying the other actions of the list."""

    record: SessionRecord


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_sessions: int = 10_000  # live sessions; init beyond → reject 5004
    max_expires_in_ms: int = 7 * 86_400_000  # a longer expires_in_ms is cut to this
    independent: bool = True  # the Thread Independence Profile (optional)
    max_answers: int = 10_000  # control answers kept for duplicates (§7.2)
    reply_ttl_ms: int = 86_400_000
    # An ended session (closed, expired, failed) is remembered this long, for
    # an idempotent close (A.12) and so that its id is not reused, then
    # forgotten: memory follows the sessions of a day, not of the daemon's life.
    keep_ended_ms: int = 86_400_000


MAX_DELEGATION_ENTRIES = 16  # distinct chains a session's record remembers (the oldest goes first)


def delegation_entry(links: Iterable[tuple[str, str]], now_ms: int) -> dict[str, Any]:
    """A ``delegation-cache-entry`` (§4.3) for a validated chain: the
    fingerprint is a SHA-256 over the chain's (delegator, delegation_id)
    pairs; ``links`` (an extension key, §10) keeps those pairs, which is
    what a resume re-checks against the revocation store and publisher."""
    import hashlib

    pairs = [[delegator, delegation_id] for delegator, delegation_id in links]
    return {"fingerprint": hashlib.sha256(dumps(pairs)).digest(), "updated_at": now_ms, "links": pairs}


class SessionProvider:
    def __init__(self, *, can_serve: Callable[[str], bool], canonical: Callable[[str], str] = lambda n: n,
                 authorized: Callable[[str], bool] = lambda did: True, entropy: Callable[[int], bytes],
                 config: ProviderConfig = ProviderConfig(), schemas: Schemas | None = None,
                 delegation_fresh: Callable[[Mapping[str, Any], int], None] | None = None) -> None:
        self.config = config
        # §7.3: before a resumed session goes on, each cached delegation
        # fingerprint is checked afresh (RFC 005 revocation freshness): the
        # hook raises AmpError 3004 (revoked, invalid) or 5002 (source down
        # in strict mode). Without one (no delegation evidence is cached
        # without RFC 005), the cache must be empty.
        self._delegation_fresh = delegation_fresh
        self._can_serve = can_serve
        self._canonical = canonical
        self._authorized = authorized
        self._entropy = entropy
        self._schemas = schemas or load_schemas()
        self.sessions: dict[bytes, SessionRecord] = {}
        self._expiry: DeadlineQueue[bytes] = DeadlineQueue()  # live sessions, at expires_at
        self._forget: DeadlineQueue[bytes] = DeadlineQueue()  # ended ones, keep_ended_ms after they ended
        # (sender, request id) -> (fingerprint, answer): a duplicate request gets the same message (§7.2).
        self._answers: dict[tuple[str, bytes], tuple[bytes, Outbound]] = {}
        # Checkpoints advanced by session-scoped invokes: (last message id, when),
        # folded into the record when it is read for a control op or saved with
        # the next batch. Not a new record per invoke: that is the hot path.
        self._activity: dict[bytes, tuple[bytes, int]] = {}
        # Workers of one group share the session records (R25): then every
        # control op and scoped invoke reads its record through the store (a
        # session started or closed by another worker), memory only caches.
        self.lookup: Callable[[bytes], SessionRecord | None] | None = None

    # ------------------------------------------------------------ restore

    def preload(self, records: Iterable[SessionRecord], now_ms: int) -> list[SessionRecord]:
        """Records read back from the store after a restart. Those whose time
        ran out meanwhile are expired now (returned, to save)."""
        changed = []
        for record in records:
            if record.live and record.expires_at < now_ms:
                record = replace(record, status=advance_session(record.status, SessionInput.TTL))
                changed.append(record)
            self._put(record)
        return changed

    def _put(self, record: SessionRecord) -> None:
        self.sessions[record.session_id] = record
        if record.live or record.status is SessionState.PENDING:
            self._expiry.set(record.session_id, record.expires_at)
        else:
            self._expiry.discard(record.session_id)
            if record.session_id not in self._forget:
                ended = record.closed_at if record.closed_at is not None else record.last_activity_at
                self._forget.set(record.session_id, max(ended, record.expires_at) + self.config.keep_ended_ms)

    def _save(self, record: SessionRecord) -> SaveSession:
        self._put(record)
        return SaveSession(record)

    def _read_through(self, session_id: bytes | None) -> None:
        if self.lookup is None or session_id is None:
            return
        try:
            found = self.lookup(session_id)
        except Exception:
            raise AmpError(5002, "the state store cannot be read; retry later") from None
        if found is not None:
            self._put(found)

    def record(self, session_id: bytes) -> SessionRecord | None:
        """The session's record, with the activity of its invokes folded in."""
        self._read_through(session_id)
        activity = self._activity.pop(session_id, None)
        record = self.sessions.get(session_id)
        if record is not None and activity is not None:
            msg_id, at = activity
            record = replace(record, last_activity_at=at,
                             checkpoint=Checkpoint(last_seen_msg_id=msg_id, last_activity_at=at))
            self.sessions[session_id] = record
        return record

    def note_delegation(self, session_id: bytes, links: Iterable[tuple[str, str]], now_ms: int) -> list[Any]:
        """§7.3 with RFC 005: a delegated invoke in session ``session_id`` was
        allowed on the chain ``links`` ((delegator, delegation_id), first
        link first). Its fingerprint goes into the record's
        ``delegation_cache`` (once per chain), so that a resume re-checks
        those credentials' revocation before the session goes on (A.9,
        A.10). Returns the save to commit ([] when nothing changed)."""
        record = self.sessions.get(session_id)
        entry = delegation_entry(links, now_ms)
        if record is None or not record.live or any(e.get("fingerprint") == entry["fingerprint"]
                                                     for e in record.delegation_cache):
            return []
        record = self.record(session_id) or record
        kept = record.delegation_cache[-(MAX_DELEGATION_ENTRIES - 1):]
        return [self._save(replace(record, delegation_cache=(*kept, entry)))]

    def take_dirty(self) -> list[SessionRecord]:
        """The records whose checkpoints invokes advanced since the last call (to save)."""
        dirty = [self.record(sid) for sid in list(self._activity)]
        return [r for r in dirty if r is not None]

    # ------------------------------------------------------------ control

    def handle(self, inbound: Inbound, conn: Hashable, now_ms: int) -> list[Any]:
        """A session-control REQUEST (the daemon checked :func:`control.is_control`)."""
        env = inbound.envelope
        key = (env.sender, env.id)
        kept = self._answers.get(key)
        if kept is not None:
            if kept[0] == inbound.fingerprint:
                return [Send(conn, kept[1])]
            return [Send(conn, error_reply(env, AmpError(BAD_REQUEST, "message id reused with different content",
                                                         path="id")))]
        try:
            request = control.parse_request(inbound.body, self._schemas)
            if not self._authorized(env.sender):
                raise AmpError(UNAUTHORIZED, "not authorized")
            actions, body = self._dispatch(request, env.sender, env.thread_id, env.id, now_ms)
        except AmpError as err:
            note = Log(logging.INFO, f"session control refused id={env.id.hex()} from={shown(env.sender)} "
                                     f"code={err.code}: {shown(err.message)}")
            return [Send(conn, self._remember(key, inbound.fingerprint, error_reply(env, err), now_ms)), note]
        out = Outbound(typ=_RESPONSE, body=body, reply_to=env.id, thread_id=env.thread_id, to=env.sender)
        return [*actions, Send(conn, self._remember(key, inbound.fingerprint, out, now_ms))]

    def _remember(self, key: tuple[str, bytes], fingerprint: bytes, out: Outbound, now_ms: int) -> Outbound:
        """Fix every signed field of the answer (so a duplicate gets the same
        bytes) and keep it, within a bound (oldest dropped first)."""
        out = msgspec.structs.replace(out, msg_id=new_message_id(now_ms, self._entropy), ts_ms=now_ms,
                                      ttl_ms=self.config.reply_ttl_ms, body_cbor=dumps(out.body))
        self._answers[key] = (fingerprint, out)
        while len(self._answers) > self.config.max_answers:
            del self._answers[next(iter(self._answers))]
        return out

    def _dispatch(self, request: control.ControlRequest, sender: str, thread_id: bytes | None, msg_id: bytes,
                  now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        if request.op == "init":
            return self._init(request, sender, thread_id, now_ms)
        record = self.record(request.session_id)
        if record is None:
            raise AmpError(BAD_REQUEST, _UNKNOWN, path="body.session_id")
        if not record.is_participant(sender):
            raise AmpError(UNAUTHORIZED, "not authorized")
        if record.thread_mode is ThreadMode.COUPLED and thread_id != record.session_id:
            raise AmpError(BAD_REQUEST, "coupled session: thread_id must equal session_id", path="thread_id")
        if record.live and record.expires_at < now_ms:
            self._put(replace(record, status=advance_session(record.status, SessionInput.TTL)))
            raise AmpError(BAD_REQUEST, "session expired", path="body.session_id")
        handler = {"update": self._update, "suspend": self._suspend, "resume": self._resume,
                   "close": self._close}[request.op]
        return handler(request, record, msg_id, now_ms)

    def _init(self, request: control.ControlRequest, sender: str, thread_id: bytes | None,
              now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        mode = request.thread_mode or ThreadMode.COUPLED
        if mode is ThreadMode.INDEPENDENT and not self.config.independent:
            raise AmpError(UNSUPPORTED, "thread_mode independent is not supported", path="body.thread_mode")
        sid = request.session_id
        if mode is ThreadMode.COUPLED and thread_id != sid:
            raise AmpError(BAD_REQUEST, "coupled session: thread_id must equal session_id", path="thread_id")
        assert request.participants is not None and request.expires_in_ms is not None  # the init rule requires them
        if sender not in request.participants:
            raise AmpError(BAD_REQUEST, "participants must include the sender", path="body.participants")
        if request.expires_in_ms <= 0:
            raise AmpError(BAD_REQUEST, "expires_in_ms must be > 0", path="body.expires_in_ms")
        self._read_through(sid)
        if sid in self.sessions:
            raise AmpError(BAD_REQUEST, "session id already in use", path="body.session_id")
        record = SessionRecord(session_id=sid, owner=sender, participants=request.participants,
                               status=advance_session(SessionState.NONE, SessionInput.INIT), created_at=now_ms,
                               expires_at=now_ms + min(request.expires_in_ms, self.config.max_expires_in_ms),
                               last_activity_at=now_ms, thread_mode=mode, purpose=request.purpose)
        refusal = self._pin_problem(request.pin)
        if refusal is None and sum(1 for r in self.sessions.values() if r.live) >= self.config.max_sessions:
            refusal = AmpError(OVERLOADED, "too many sessions; retry later")
        if refusal is not None:
            failed = replace(record, status=advance_session(record.status, SessionInput.REJECT))
            self._put(failed)  # the id stays burned; a failed session is never saved
            return [], control.reject_body(sid, refusal.code, refusal.message)
        record = replace(record, status=advance_session(record.status, SessionInput.ACCEPT),
                         pinned=self._canonical_pins(request.pin))
        return [self._save(record)], control.accept_body(record)

    def _canonical_pins(self, pins: Mapping[str, str]) -> dict[str, str]:
        return {self._canonical(name): cid for name, cid in pins.items()}

    def _pin_problem(self, pins: Mapping[str, str]) -> AmpError | None:
        for name, cid in sorted(pins.items()):
            if not is_full_id(cid) or self._canonical(cid.rsplit(":", 1)[0]) != self._canonical(name):
                return AmpError(BAD_REQUEST, f"pin {shown(name)} must name one of its versions (name:version)")
            if not self._can_serve(cid):
                return AmpError(VERSION_MISMATCH, f"pinned {shown(cid)} is not served here")
        return None

    def _update(self, request: control.ControlRequest, record: SessionRecord, msg_id: bytes,
                now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        status = advance_session(record.status, SessionInput.UPDATE)
        pins = dict(record.pinned)
        if request.pin:
            wanted = self._canonical_pins(request.pin)
            changed = {n: c for n, c in wanted.items() if pins.get(n) != c}
            if changed and any(n in pins for n in changed) and not request.allow_renegotiate:
                raise AmpError(BAD_REQUEST, "changing a pin needs allow_renegotiate = true",
                               path="body.allow_renegotiate")
            problem = self._pin_problem(request.pin)
            if problem is not None:
                raise problem
            pins.update(wanted)
        participants = record.participants
        if request.participants is not None:
            participants = request.participants
        expires_at = record.expires_at
        if request.expires_in_ms is not None:
            if request.expires_in_ms <= 0:
                raise AmpError(BAD_REQUEST, "expires_in_ms must be > 0", path="body.expires_in_ms")
            expires_at = now_ms + min(request.expires_in_ms, self.config.max_expires_in_ms)
        record = replace(record, status=status, pinned=pins, participants=participants, expires_at=expires_at,
                         last_activity_at=now_ms)
        return [self._save(record)], control.state_body("update", record)

    def _suspend(self, request: control.ControlRequest, record: SessionRecord, msg_id: bytes,
                 now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        record = replace(record, status=advance_session(record.status, SessionInput.SUSPEND), suspended_at=now_ms,
                         last_activity_at=now_ms)
        return [self._save(record)], control.state_body("suspend", record)

    def _resume(self, request: control.ControlRequest, record: SessionRecord, msg_id: bytes,
                now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        status = advance_session(record.status, SessionInput.RESUME)
        for cid in sorted(record.pinned.values()):  # §7.3: pins survive recovery, or the resume fails
            if not self._can_serve(cid):
                raise AmpError(VERSION_MISMATCH, f"pinned {shown(cid)} can no longer be served")
        for entry in record.delegation_cache:
            if self._delegation_fresh is None:
                raise AmpError(5002, "cached delegation cannot be re-checked here")
            self._delegation_fresh(entry, now_ms)  # 3004 / 5002
        asked = request.checkpoint
        checkpoint = Checkpoint(
            last_seen_msg_id=asked.last_seen_msg_id if asked and asked.last_seen_msg_id else
            (record.checkpoint.last_seen_msg_id if record.checkpoint else None),
            last_activity_at=now_ms)
        record = replace(record, status=status, suspended_at=None, checkpoint=checkpoint, last_activity_at=now_ms)
        replay_after = asked.last_seen_msg_id if asked is not None else None
        return [self._save(record)], control.accept_body(record, checkpoint=checkpoint, replay_after=replay_after)

    def _close(self, request: control.ControlRequest, record: SessionRecord, msg_id: bytes,
               now_ms: int) -> tuple[list[Any], dict[str, Any]]:
        if record.status is SessionState.CLOSED:  # §5.6, A.12: idempotent success, no transition
            return [], control.state_body("close", record)
        closing = advance_session(record.status, SessionInput.CLOSE)
        record = replace(record, status=advance_session(closing, SessionInput.FINALIZE), closed_at=now_ms,
                         last_activity_at=now_ms)
        return [self._save(record)], control.state_body("close", record)

    # -------------------------------------------------------- scoped work

    def check_invoke(self, inbound: Inbound, now_ms: int) -> SessionRecord | None:
        """§4.4 and §7.3 for a CAP_INVOKE: the live session it is scoped to
        (None: not session-scoped); AmpError 1001/3001/4001/4003 to refuse it."""
        env, body = inbound.envelope, inbound.body
        if self.lookup is not None:
            self._read_through(read_context(body)[0] if type(body) is dict else None)
        record = scope_of(env, body, self.sessions)
        if record is None:
            return None
        if not record.is_participant(env.sender):
            raise AmpError(UNAUTHORIZED, "not authorized")
        if record.expires_at < now_ms:
            self._put(replace(record, status=advance_session(record.status, SessionInput.TTL)))
            raise AmpError(BAD_REQUEST, "unknown or ended session", path="body.session.session_id")
        if record.pinned:
            request = parse_invoke_body(body)
            name = self._canonical(request.name)
            pinned = record.pinned.get(name)
            if pinned is not None:
                if request.version is None or f"{name}:{request.version}" != pinned:
                    raise AmpError(VERSION_MISMATCH, f"this session pins {shown(pinned)}", path="body.version")
                if not self._can_serve(pinned):
                    raise AmpError(VERSION_MISMATCH, f"pinned {shown(pinned)} can no longer be served")
        self._activity[record.session_id] = (env.id, now_ms)
        return record

    def is_session_thread(self, thread_id: bytes | None) -> bool:
        if thread_id is None:
            return False
        record = self.sessions.get(thread_id)
        if record is None and self.lookup is not None:
            self._read_through(thread_id)
            record = self.sessions.get(thread_id)
        return record is not None and record.live

    # ------------------------------------------------------------- timers

    def get_timer(self) -> int | None:
        live, ended = self._expiry.next_deadline(), self._forget.next_deadline()
        return live if ended is None else ended if live is None else min(live, ended)

    def handle_timer(self, now_ms: int) -> list[Any]:
        actions: list[Any] = []
        for sid in self._forget.pop_due(now_ms):
            record = self.sessions.get(sid)
            if record is not None and record.terminal:
                del self.sessions[sid]
                self._activity.pop(sid, None)
        for sid in self._expiry.pop_due(now_ms):
            record = self.sessions.get(sid)
            if record is not None and record.live:
                actions.append(self._save(replace(record, status=advance_session(record.status, SessionInput.TTL))))
                actions.append(Log(logging.INFO, f"session {sid.hex()} expired"))
        return actions
