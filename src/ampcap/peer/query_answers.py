"""CAP_QUERY answers, the provider side of RFC 004 §6: a query in, one
CAP_DECLARE or ERROR out.

Split from the executor (:mod:`.executor`, which runs invokes): a query
runs nothing and keeps no state. It shares the executor's caller checks
(:class:`~.caller_checks.CallerChecks`: the same policy and rate limiter)
and its alias table, so the ACL runs on the canonical name before the
registry is asked, and a denied caller cannot tell 4002 from 4003 (R10).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import msgspec

from ..caps.bodies import QueryPage, QueryRequest, parse_query_body
from ..display import quoted, shown
from ..errors import AmpError
from ..wire.receive import Inbound
from ..wire.registry import MessageType
from .actions import Action
from .admission import has_ext_delegation as _has_ext_delegation
from .caller_checks import CallerChecks, denied
from ..caps.deprecation import DeprecationNotices
from .outbound import Log, Send, error_reply, reply_to

__all__ = ["CapabilityDirectory", "QueryAnswers"]

DELEGATION_INVALID = 3004
CAPABILITY_NOT_FOUND = 4002
INTERNAL_ERROR, UNAVAILABLE = 5001, 5002


class CapabilityDirectory(Protocol):
    """CAP_QUERY answers (``caps/registry.py``): 4001 bad cursor, 4002, 4003."""

    def query(self, request: QueryRequest, now_ms: int, *,
              allowed: Callable[[str], bool] | None = None) -> QueryPage: ...


class QueryAnswers:
    """The daemon's CAP_QUERY answers: ``registry`` lists (``None``: every
    query is 5002), ``canonical_name`` maps an alias to the name the ACL
    decides on (:meth:`CapabilityResolver.canonical_name
    <ampcap.peer.executor.CapabilityResolver.canonical_name>`)."""

    __slots__ = ("_registry", "_canonical_name", "_callers", "_deprecations", "_listing")

    def __init__(self, registry: CapabilityDirectory | None, canonical_name: Callable[[str], str],
                 callers: CallerChecks, deprecations: DeprecationNotices | None = None,
                 listing: Callable[[Hashable, str], bool] | None = None) -> None:
        # R22: listing(conn, sender) says whether that link agreed ampcap.list-all
        # for that sender (peer/listing.py's agrees); None: no link did.
        self._listing = listing
        self._deprecations = deprecations  # R23: deprecated versions listed get a signed ext entry
        self._registry = registry
        self._canonical_name = canonical_name
        self._callers = callers

    def answer(self, inbound: Inbound, conn: Hashable, now_ms: int, *, closing: bool) -> list[Action]:
        """The reply to one CAP_QUERY on ``conn``: CAP_DECLARE or ERROR
        (``closing``: the daemon is shutting down, 5002)."""
        env = inbound.envelope
        try:
            if closing:
                raise AmpError(UNAVAILABLE, "daemon is shutting down")
            request = parse_query_body(inbound.body)  # shape 1001; body.delegation 4001 (RFC 005 A.18)
            self._callers.check_caller(env.sender, now_ms)  # 3001, 3005
            if _has_ext_delegation(env):
                raise AmpError(DELEGATION_INVALID, "delegation is not supported")
            # The ACL runs before the registry is asked, so a denied caller
            # cannot tell 4002/4003 apart (R10 holds for discovery too).
            allowed = None
            if request.lists_every_name and self._listing is not None and self._listing(conn, env.sender):
                # The ampcap "*" listing: the same per-name ACL, applied to
                # each name listed instead of refusing the whole query.
                sender, policy = env.sender, self._callers.policy
                allowed = lambda name: policy.capability_allowed(sender, name)  # noqa: E731
            elif not self._callers.policy.capability_allowed(env.sender, self._canonical_name(request.name)):
                raise denied()
            elif request.lists_every_name:
                # "*" on a link that did not agree the listing: answered as
                # the RFC answers any name without a descriptor, which is
                # what another implementation answers. Not 4001: §6.4 types
                # the filter's capability as any text, so the query is well
                # formed; §6.1 makes a name nothing matches 4002 (3001 for a
                # caller a capability rule refuses, as for every unknown
                # name: R10). The registry is not asked, since it lists for "*".
                raise self._callers.as_seen_by(env.sender, AmpError(CAPABILITY_NOT_FOUND,
                                                                     f"no capability named {quoted('*')}"))
            if self._registry is None:
                raise AmpError(UNAVAILABLE, "no capability registry")
            try:
                page = self._registry.query(request, now_ms, allowed=allowed)
            except AmpError as err:  # 4002 here: the name is unknown (CAP_QUERY always names one)
                raise self._callers.as_seen_by(env.sender, err) from None
            if not page.descriptors:  # §6.1: never an empty CAP_DECLARE
                raise AmpError(CAPABILITY_NOT_FOUND, "no capability matches the filter")
            body: dict[str, Any] = {"capabilities": [d.to_wire() for d in page.descriptors]}
            if page.next_cursor is not None:
                body["next_cursor"] = page.next_cursor
        except AmpError as err:
            return [Send(conn, error_reply(env, err, encrypt=inbound.decrypted))]
        except Exception as exc:
            return [Log(logging.ERROR, f"query crashed: {shown(repr(exc))}", "query crash"),
                    Send(conn, error_reply(env, AmpError(INTERNAL_ERROR, "internal error"), encrypt=inbound.decrypted))]
        out = reply_to(env, int(MessageType.CAP_DECLARE), body, encrypt=inbound.decrypted)
        if self._deprecations is not None:
            ext = self._deprecations.ext_for((d.id for d in page.descriptors), conn, env.id)
            if ext is not None:
                out = msgspec.structs.replace(out, ext=ext)
        return [Send(conn, out)]
