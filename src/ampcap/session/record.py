"""The session record (RFC 006 §4.2, CDDL ``session-record`` in §4.3).

What a provider (and the session store) keeps about one session. Immutable:
every change makes a new record (:func:`dataclasses.replace`), so what the
store commits is exactly what the provider decided. :meth:`to_wire` gives the
CDDL map (checked against ``session-record`` in the tests) plus two keys the
RFC's record lacks but recovery needs: ``thread_mode`` (§4.1: a resumed
session keeps its mode) and ``last_terminal`` (the id of the last terminal
reply sent in the session, the §7.1 replay hint); both are extension keys,
which §10 lets a reader ignore.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgspec

from .state import TERMINAL, SessionState

__all__ = ["SESS_V", "ThreadMode", "Checkpoint", "SessionRecord"]

SESS_V = 1  # RFC 006 §10: the only control schema version


class ThreadMode(enum.Enum):
    COUPLED = "coupled"  # MTI: thread_id == session_id on every session-scoped message
    INDEPENDENT = "independent"  # thread_id is a sub-thread key; the signed body.session binds


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """§4.3 ``session-checkpoint``: the last message confirmed in the session."""

    last_seen_msg_id: bytes | None = None
    last_activity_at: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.last_seen_msg_id is not None:
            out["last_seen_msg_id"] = self.last_seen_msg_id
        if self.last_activity_at is not None:
            out["last_activity_at"] = self.last_activity_at
        return out

    @classmethod
    def from_wire(cls, value: Mapping[str, Any] | None) -> Checkpoint | None:
        if value is None:
            return None
        return cls(last_seen_msg_id=value.get("last_seen_msg_id"), last_activity_at=value.get("last_activity_at"))


def _frozen(pins: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(pins))


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    session_id: bytes
    owner: str  # the DID that sent init
    participants: tuple[str, ...]
    status: SessionState
    created_at: int
    expires_at: int
    last_activity_at: int
    thread_mode: ThreadMode = ThreadMode.COUPLED
    suspended_at: int | None = None
    closed_at: int | None = None
    checkpoint: Checkpoint | None = None
    pinned: Mapping[str, str] = field(default_factory=lambda: _frozen({}))  # name -> capability id
    delegation_cache: tuple[Mapping[str, Any], ...] = ()
    purpose: str | None = None
    last_terminal: bytes | None = None  # id of the last terminal reply sent in the session

    def __post_init__(self) -> None:
        if len(self.session_id) != 16:
            raise ValueError("session_id must be 16 bytes (RFC 006 §4.1)")
        if self.status is SessionState.NONE:
            raise ValueError("a record is never in state none")
        if not isinstance(self.pinned, MappingProxyType):
            object.__setattr__(self, "pinned", _frozen(self.pinned))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def live(self) -> bool:
        """Active or suspended: session-scoped work may refer to it."""
        return self.status in (SessionState.ACTIVE, SessionState.SUSPENDED)

    def is_participant(self, did: str) -> bool:
        return did == self.owner or did in self.participants

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sess_v": SESS_V, "session_id": self.session_id, "owner": self.owner,
            "participants": list(self.participants), "status": self.status.value,
            "created_at": self.created_at, "expires_at": self.expires_at,
            "last_activity_at": self.last_activity_at, "thread_mode": self.thread_mode.value,
        }
        if self.suspended_at is not None:
            out["suspended_at"] = self.suspended_at
        if self.closed_at is not None:
            out["closed_at"] = self.closed_at
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint.to_wire()
        if self.pinned:
            out["pinned_capabilities"] = dict(self.pinned)
        if self.delegation_cache:
            out["delegation_cache"] = [dict(e) for e in self.delegation_cache]
        if self.purpose is not None:
            out["purpose"] = self.purpose
        if self.last_terminal is not None:
            out["last_terminal"] = self.last_terminal
        return out

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> SessionRecord:
        """A record the store kept (our own bytes: trusted shape)."""
        return cls(session_id=value["session_id"], owner=value["owner"],
                   participants=tuple(value["participants"]), status=SessionState(value["status"]),
                   created_at=value["created_at"], expires_at=value["expires_at"],
                   last_activity_at=value["last_activity_at"],
                   thread_mode=ThreadMode(value.get("thread_mode", "coupled")),
                   suspended_at=value.get("suspended_at"), closed_at=value.get("closed_at"),
                   checkpoint=Checkpoint.from_wire(value.get("checkpoint")),
                   pinned=value.get("pinned_capabilities", {}),
                   delegation_cache=tuple(value.get("delegation_cache", ())), purpose=value.get("purpose"),
                   last_terminal=value.get("last_terminal"))
