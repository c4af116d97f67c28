"""Turning an :class:`~ampcap.peer.outbound.Outbound` into signed wire bytes.

One function, :func:`seal_outbound`, used by the :class:`Connection` for
what it sends and by the executor (through a :class:`Sealer`) for terminal
replies. The executor seals those itself, once, because ruling R8 (amended)
wants a retry of a completed invoke to get *the same message* again: the
same bytes, so the same id, ``ts`` and signature. Sealing once and keeping
the bytes is the only way that also holds for an authcrypt reply, whose
nonce is random, and for a journal that outlives the process.

Authcrypt (RFC 001 §8.5–8.6): ``Outbound.encrypt`` asks for the body to be
encrypted to the recipient's X25519 key, which the resolver supplies
(did:key derives it, a keyring names it; 3001 when it cannot be found).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..wire.envelope import DEFAULT_TTL_MS, Envelope, seal
from ..wire.identity import KeyResolver
from ..wire.signing import Profile

if TYPE_CHECKING:  # the connection imports this module: nothing of outbound runs here
    from .outbound import Outbound

__all__ = ["seal_outbound", "Sealer"]


def seal_outbound(identity: Any, out: Outbound, now_ms: int, *, entropy: Callable[[int], bytes], to: Any,
                  default_ttl_ms: int, v: int = 1, profile: Profile = Profile.RFC,
                  resolver: KeyResolver | None = None) -> tuple[Envelope, bytes]:
    """Sign (and, when ``out.encrypt``, authcrypt) ``out`` from ``identity``
    to ``to``. A retry's pinned ``msg_id`` / ``ts_ms`` / ``ttl_ms`` are kept
    (RFC 001 §16.3), so the signed content repeats exactly."""
    encrypt_to = None
    if out.encrypt:
        if resolver is None:
            raise ValueError("an encrypted reply needs a key resolver")
        # One recipient: authcrypt to several needs one copy each (§8.5).
        encrypt_to = resolver.x25519_for(to if isinstance(to, str) else to[0])
    ttl = out.ttl_ms if out.ttl_ms is not None else default_ttl_ms
    stamp = out.ts_ms if out.ts_ms is not None else now_ms
    return seal(identity, typ=out.typ, to=to, body=out.body, now_ms=stamp, entropy=entropy, ttl=ttl,
                reply_to=out.reply_to, thread_id=out.thread_id, v=v, profile=profile, message_id=out.msg_id,
                body_bytes=out.body_cbor, ext=out.ext, encrypt_to=encrypt_to)


class Sealer(msgspec.Struct, frozen=True):
    """The daemon's own signature, for the messages the executor seals itself
    (terminal replies, R8). Its settings are the daemon's connection
    defaults, so such a message is what the connection would have made."""

    identity: Any
    entropy: Callable[[int], bytes]
    resolver: KeyResolver | None = None
    default_ttl_ms: int = DEFAULT_TTL_MS
    profile: Profile = Profile.RFC

    def __call__(self, out: Outbound, now_ms: int) -> Outbound:
        """``out`` sealed: ``wire`` holds its bytes; id, ts and ttl are pinned."""
        if out.to is None:
            raise ValueError("a message sealed ahead of sending must name its recipient")
        env, wire = seal_outbound(self.identity, out, now_ms, entropy=self.entropy, to=out.to,
                                  default_ttl_ms=self.default_ttl_ms, profile=self.profile, resolver=self.resolver)
        return msgspec.structs.replace(out, wire=wire, msg_id=env.id, ts_ms=env.ts, ttl_ms=env.ttl)
