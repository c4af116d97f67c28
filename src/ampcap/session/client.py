"""The session client (RFC 006 Session Client Profile), sans-I/O.

One :class:`SessionClient` per session: it makes the ``session_id`` (16
random bytes, stable for the session's life), builds the control requests
and the session-scoped bodies (signed ``body.session`` context; in coupled
mode ``thread_id == session_id`` on every message), reads the provider's
answers, remembers the checkpoint a resume sends (the last message it saw
in the session) and deduplicates by message id (§7.2: a provider may replay
after a resume, and a retry may meet its first answer).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import AmpError
from ..peer.outbound import Outbound
from ..wire.envelope import Envelope
from ..wire.registry import MessageType
from . import control
from .context import RequestTracker, session_context
from .record import Checkpoint, ThreadMode
from .state import SessionState

__all__ = ["SessionClient"]

_REQUEST = int(MessageType.REQUEST)


class SessionClient:
    def __init__(self, *, entropy: Callable[[int], bytes], mode: ThreadMode = ThreadMode.COUPLED,
                 pin: Mapping[str, str] | None = None, session_id: bytes | None = None,
                 max_seen: int = 10_000) -> None:
        self.session_id = session_id if session_id is not None else entropy(16)
        if len(self.session_id) != 16:
            raise ValueError("session_id must be 16 bytes")
        self.mode = mode
        self.asked_pins = dict(pin or {})
        self.pinned: dict[str, str] = {}
        self.status = SessionState.NONE
        self.expires_at: int | None = None
        self.last_seen: bytes | None = None
        self.tracker = RequestTracker()
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._max_seen = max_seen

    @property
    def thread_id(self) -> bytes | None:
        return self.session_id if self.mode is ThreadMode.COUPLED else None

    # ------------------------------------------------------------ control

    def _control(self, body: dict[str, Any], to: str | None) -> Outbound:
        return Outbound(typ=_REQUEST, body=body, thread_id=self.session_id if self.mode is ThreadMode.COUPLED
                        else None, to=to)

    def init(self, me: str, expires_in_ms: int, *, participants: list[str] | None = None, purpose: str | None = None,
             to: str | None = None) -> Outbound:
        people = list(participants or [])
        if me not in people:
            people.insert(0, me)
        return self._control(control.init_body(self.session_id, people, expires_in_ms,
                                               thread_mode=self.mode if self.mode is not ThreadMode.COUPLED
                                               else None, purpose=purpose, pin=self.asked_pins), to)

    def resume(self, to: str | None = None) -> Outbound:
        checkpoint = Checkpoint(last_seen_msg_id=self.last_seen) if self.last_seen is not None else None
        return self._control(control.op_body("resume", self.session_id, checkpoint=checkpoint), to)

    def close(self, reason: str | None = None, to: str | None = None) -> Outbound:
        return self._control(control.op_body("close", self.session_id, reason=reason), to)

    def suspend(self, reason: str | None = None, to: str | None = None) -> Outbound:
        return self._control(control.op_body("suspend", self.session_id, reason=reason), to)

    def update(self, *, pin: Mapping[str, str] | None = None, allow_renegotiate: bool | None = None,
               expires_in_ms: int | None = None, to: str | None = None) -> Outbound:
        return self._control(control.op_body("update", self.session_id, pin=dict(pin) if pin else None,
                                             allow_renegotiate=allow_renegotiate, expires_in_ms=expires_in_ms), to)

    def on_answer(self, body: Any) -> control.ControlResponse:
        """The provider's RESPONSE to one of our control requests; an
        AmpError for a reject (its ``reason_code``) or a malformed answer."""
        answer = control.parse_response(body)
        if answer.session_id != self.session_id:
            raise AmpError(4001, "the answer names another session", path="body.session_id")
        if answer.op == "reject":
            self.status = SessionState.FAILED
            code = body.get("reason_code")
            raise AmpError(code if type(code) is int else 4001, str(body.get("reason") or "session rejected"))
        if answer.status is not None:
            try:
                self.status = SessionState(answer.status)
            except ValueError:
                raise AmpError(1001, "unknown session status", path="body.status") from None
        if answer.expires_at is not None:
            self.expires_at = answer.expires_at
        if answer.op == "accept" and answer.thread_mode is not None:
            self.mode = answer.thread_mode
        if "pinned_capabilities" in answer.body:
            self.pinned = answer.pinned
        return answer

    # ------------------------------------------------------- scoped work

    def invoke_body(self, capability: str, params: Any, *, version: str | None = None,
                    timeout_ms: int | None = None) -> dict[str, Any]:
        """A session-scoped CAP_INVOKE body; a pinned name gets its pinned version."""
        pinned = self.pinned.get(capability) or self.asked_pins.get(capability)
        if pinned is not None and version is None:
            body: dict[str, Any] = {"id": pinned, "params": params}
        elif version is not None:
            body = {"capability": capability, "version": version, "params": params}
        else:
            raise AmpError(4001, f"name a version for {capability!r} (it is not pinned in this session)")
        body["session"] = session_context(self.session_id)
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        return body

    def seen(self, env: Envelope) -> bool:
        """Record a message received in the session; True if it was seen before (drop it)."""
        if env.id in self._seen:
            return True
        self._seen[env.id] = None
        if len(self._seen) > self._max_seen:
            self._seen.popitem(last=False)
        self.last_seen = env.id
        return False
