"""RFC 005 at the daemon's edge: the DELEG_* messages peers send us, and
the revocation statuses we ask a publisher about (R20).

* :func:`answer`: a DELEG_GRANT, DELEG_REVOKE or DELEG_QUERY (§2.2: we are
  the consumer of grants, the issuer's revocations reach us, and we publish
  what we know) is handled by the sans-I/O
  :class:`~ampcap.deleg.service.DelegationService`; this turns its answer,
  or its refusal, into the one reply the sender gets, and logs it.
* :class:`RevocationRefresher`: the chain verifier finds a status stale or
  missing and refuses with 5002 (retryable); when a publisher is configured
  this asks it (DELEG_QUERY) about those (delegator, delegation_id) pairs,
  so the caller's retry is decided on fresh data.

The delegation model is imported lazily: a client-only daemon imports this
module but never ``ampcap.deleg`` (tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ...display import shown
from ...errors import AmpError
from ...peer.outbound import Outbound, error_reply, reply_to
from ...wire.registry import MessageType

if TYPE_CHECKING:
    from ...deleg.service import DelegationService
    from ..daemon.ports import RevocationPort
    from ..daemon.link import Link

__all__ = ["answer", "RevocationRefresher"]

log = logging.getLogger("ampcap.daemon")

_BATCH = 64  # pairs asked about per kick
_QUERY_TIMEOUT_MS = 5_000


def answer(service: DelegationService, inbound: Any, now: int) -> Outbound:
    """The reply to one DELEG_* message (its answer, or an ERROR)."""
    env = inbound.envelope
    try:
        typ, body = service.handle(env.typ, inbound.body, env.sender, now)
    except AmpError as err:
        log.info("%s from %s refused: %s", MessageType(env.typ).name, shown(env.sender), shown(str(err)))
        return error_reply(env, err)
    except Exception as exc:  # a bug must not take the daemon down; the peer still gets one answer
        log.error("delegation message crashed: %s", shown(repr(exc)))
        return error_reply(env, AmpError(5001, "internal error"))
    log.info("%s from %s accepted", MessageType(env.typ).name, shown(env.sender))
    return reply_to(env, typ, body)


class RevocationRefresher:
    """R20: ask the publisher at ``url`` about the statuses the verifier
    wants (see the module docstring). :meth:`kick` whenever a delegation was
    refused for a stale status; :meth:`run` as one of the daemon's tasks."""

    def __init__(self, daemon: RevocationPort, url: str, publisher_did: str | None) -> None:
        self._daemon = daemon
        self._url = url
        self._publisher_did = publisher_did  # pinned, else whoever answers at the URL
        self._kick = trio.Event()

    def kick(self) -> None:
        self._kick.set()

    async def run(self) -> None:
        from ...deleg.bodies import query_body
        from ...deleg.revocation import query_result_from_wire

        daemon, url = self._daemon, self._url
        link: Link | None = None
        while True:
            await self._kick.wait()
            self._kick = trio.Event()
            for delegator, delegation_id in daemon.revocation_status.wanted()[:_BATCH]:
                try:
                    if link is None or not link.open:
                        link = await daemon.connect(url, peer_did=self._publisher_did)
                    reply = await daemon.calls.request(link, int(MessageType.DELEG_QUERY),
                                                       query_body(delegation_id, delegator),
                                                       timeout_ms=_QUERY_TIMEOUT_MS)
                    result = query_result_from_wire(reply.body)
                    if (result.delegator, result.delegation_id) != (delegator, delegation_id):
                        raise AmpError(1001, "the publisher answered about another delegation")
                    daemon.revocation_status.put(result)
                except (AmpError, OSError) as exc:
                    log.warning("revocation publisher %s: %s", url, shown(str(exc)))
                    link = None
                    break
                except Exception as exc:  # a bug here must not take the daemon down: statuses stay stale (5002)
                    log.error("revocation refresh failed: %s", shown(repr(exc)))
                    link = None
                    break
