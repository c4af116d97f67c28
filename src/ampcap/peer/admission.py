"""What a daemon needs from the executor before it serves anything: the
executor's settings and the RFC 005 §5.3 check every inbound message gets.

Split from :mod:`ampcap.peer.executor` (which re-exports both) so that a
client-only daemon, which checks replies but never runs an invoke, does not
import the executor and the delegation verifier behind it (issue 26: each
one-shot command pays for its imports)."""

from __future__ import annotations

import msgspec

from ..errors import AmpError
from ..wire.envelope import Envelope
from ..wire.receive import Inbound
from ..wire.registry import MessageType

__all__ = ["ExecutorConfig", "delegation_violation", "has_ext_delegation"]

BAD_REQUEST, DELEGATION_INVALID = 4001, 3004
UNAVAILABLE, TIMEOUT = 5002, 5003
_INVOKE = int(MessageType.CAP_INVOKE)


class ExecutorConfig(msgspec.Struct, frozen=True, kw_only=True):
    ack_on_receipt: bool = False  # RFC 001 §16.1 recipient ACK before validation
    default_timeout_ms: int = 60_000  # RFC 001 §16.4, when the invoke names none
    max_timeout_ms: int = 600_000  # a caller cannot pin a worker longer than this
    shutdown_code: int = UNAVAILABLE  # see Executor.shutdown
    cache_entries: int = 100_000
    cache_bytes: int = 64 * 1024 * 1024  # encoded terminal replies kept for retries (R8)
    max_waiters: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.default_timeout_ms <= self.max_timeout_ms:
            raise ValueError("need 0 < default_timeout_ms <= max_timeout_ms")
        if self.shutdown_code not in (UNAVAILABLE, TIMEOUT):
            raise ValueError("shutdown_code must be 5002 or 5003")


def delegation_violation(inbound: Inbound) -> AmpError | None:
    """RFC 005 §5.3 for the messages the executor does not handle (replies,
    PING, MESSAGE…): delegation evidence in ``ext`` → 3004 (A.14);
    ``body.delegation`` → 4001 (A.18). CAP_INVOKE and CAP_QUERY are checked
    by the executor itself, in their validation order (after the caller's
    policy, so a denied caller learns nothing more, R10)."""
    env = inbound.envelope
    if has_ext_delegation(env):
        return AmpError(DELEGATION_INVALID, "delegation evidence outside the signed body is not accepted")
    if env.typ != _INVOKE and isinstance(inbound.body, dict) and "delegation" in inbound.body:
        return AmpError(BAD_REQUEST, "'delegation' is only allowed on CAP_INVOKE", path="body.delegation")
    return None


def has_ext_delegation(env: Envelope) -> bool:
    # Unsigned-for-authorization hints: any ext key naming delegation.
    return bool(env.ext) and any(isinstance(k, str) and "deleg" in k.lower() for k in env.ext)  # type: ignore[union-attr]
