"""RFC 005 at the daemon's edge: the DELEG_* messages peers send us, and
the revocation statuses we ask a publisher about (R20).

* :func:`answer`: a DELEG_GRANT, DELEG_REVOKE or DELEG_QUERY (§2.2: we are
  the consumer of grants, the issuer's revocations reach us, and we publish
  what we know) is handled by the sans-I/O
  :class:`~ampcap.deleg.service.DelegationService`; this turns its answer,
  or its refusal, into the one reply the sender gets, and logs it.
* :class:`RevocationRefresher`: with a publisher configured, a delegated
  invoke whose status is stale or missing waits (the executor parks it,
  ``peer/status_wait.py``) while this asks the publisher (DELEG_QUERY)
  within a short bound, then is decided on the answer; 5002 only when the
  publisher did not answer in time (RFC 005 §6.3, §7.3, R20).

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
    needs (see the module docstring). :meth:`fetch` for the keys a parked
    invoke waits for (the executor's ``FetchStatus``: each is reported back
    settled, answered or not, within ``timeout_s``); :meth:`kick` whenever a
    delegation was refused for a stale status anyway (its retry finds the
    answer); :meth:`run` as one of the daemon's tasks."""

    def __init__(self, daemon: RevocationPort, url: str, publisher_did: str | None, timeout_s: float = 2.0) -> None:
        self._daemon = daemon
        self._url = url
        self._publisher_did = publisher_did  # pinned, else whoever answers at the URL
        self._timeout_s = timeout_s
        self._kick = trio.Event()
        self._link: Link | None = None
        self._dialling = trio.Lock()
        self._nursery: trio.Nursery | None = None

    def kick(self) -> None:
        self._kick.set()

    def fetch(self, keys: tuple[tuple[str, str], ...]) -> None:
        """Ask about each key now, concurrently; each is settled with the
        executor when answered, failed, or ``timeout_s`` passed."""
        assert self._nursery is not None, "run() first"
        for key in keys:
            self._nursery.start_soon(self._fetch_one, key)

    async def _fetch_one(self, key: tuple[str, str]) -> None:
        try:
            await self._try(key)
        finally:
            self._daemon.status_settled(key)  # decided now, on what the cache holds

    async def ask_now(self, keys: list[tuple[str, str]]) -> None:
        """Ask about ``keys`` concurrently and return when each was answered,
        failed, or ``timeout_s`` passed (a session resume waits on this)."""
        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(self._try, key)

    async def _try(self, key: tuple[str, str]) -> None:
        """Ask about ``key`` unless its status is fresh, within ``timeout_s``; never raises."""
        daemon = self._daemon
        try:
            if daemon.revocation_status.get(key, daemon.clock.wall_ms()) is None:
                with trio.move_on_after(self._timeout_s) as bound:
                    await self._ask(key)
                if bound.cancelled_caught:
                    log.warning("revocation publisher %s: no answer within %g s", self._url, self._timeout_s)
        except (AmpError, OSError) as exc:
            log.warning("revocation publisher %s: %s", self._url, shown(str(exc)))
            self._link = None
        except Exception as exc:  # a bug here must not take the daemon down: the status stays stale (5002)
            log.error("revocation status query failed: %s", shown(repr(exc)))
            self._link = None

    async def _ask(self, key: tuple[str, str]) -> None:
        """One DELEG_QUERY; the answer goes into the daemon's status cache."""
        from ...deleg.bodies import query_body
        from ...deleg.revocation import query_result_from_wire

        daemon = self._daemon
        delegator, delegation_id = key
        link = self._link
        if link is None or not link.open:
            async with self._dialling:  # queries at once share one connection
                link = self._link
                if link is None or not link.open:
                    link = self._link = await daemon.connect(self._url, peer_did=self._publisher_did,
                                                             timeout_s=self._timeout_s)
        reply = await daemon.calls.request(link, int(MessageType.DELEG_QUERY), query_body(delegation_id, delegator),
                                           timeout_ms=max(1, int(self._timeout_s * 1000)))
        result = query_result_from_wire(reply.body)
        if (result.delegator, result.delegation_id) != key:
            raise AmpError(1001, "the publisher answered about another delegation")
        daemon.revocation_status.put(result)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                await self._kick.wait()
                self._kick = trio.Event()
                for key in self._daemon.revocation_status.wanted()[:_BATCH]:
                    try:
                        with trio.fail_after(self._timeout_s):
                            await self._ask(key)
                    except (AmpError, OSError, trio.TooSlowError) as exc:
                        log.warning("revocation publisher %s: %s", self._url,
                                    shown(str(exc) or f"no answer within {self._timeout_s:g} s"))
                        self._link = None
                        break
                    except Exception as exc:  # a bug here must not take the daemon down: statuses stay stale (5002)
                        log.error("revocation refresh failed: %s", shown(repr(exc)))
                        self._link = None
                        break
